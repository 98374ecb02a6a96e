"""Adapters to agent frameworks, each an optional extra.

- :mod:`dmf_hybrid.integrations.langgraph`: ``DMFStore``, a LangGraph ``BaseStore``
  (``pip install 'dmf-hybrid[server,langgraph]'``).
- :mod:`dmf_hybrid.integrations.langchain`: ``DMFVectorStore`` and ``DMFRetriever``
  (``pip install 'dmf-hybrid[server,langchain]'``).
- :mod:`dmf_hybrid.integrations.embedder`: ``CallerEmbedder``, a caller's embedding function
  as this project's ``Embedder``.

Each adapter takes any ``MemoryAPI``: an embedded ``Memory`` or a ``MemoryClient``.
"""
