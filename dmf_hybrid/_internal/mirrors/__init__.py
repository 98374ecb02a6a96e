"""In-memory mirrors of DuckDB that search reads and the indexer feeds.

``vectors.LocalVectors`` (the exact vector mirror), ``keyword.KeywordIndex`` (BM25 with the
script-aware ``text.Analyzer``) and ``keys`` (the sorted 64-bit key index both map candidate
hashes with). They import only the shared basics, never the store, the indexer or search.
"""
