"""The implementation of dmf-hybrid: everything here is private and may change in any
release. The public names are those of ``dmf_hybrid.__all__`` and the framework adapters
of ``dmf_hybrid.integrations``."""

#: What to install for the embedded memory and the server (the base install is the client).
SERVER_EXTRA_HINT = "pip install 'dmf-hybrid[server]'"
