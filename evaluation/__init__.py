"""Retrieval evaluation for dmf-hybrid: dataset loaders, metrics, runners and reports.

``evaluation.metrics`` scores runs against qrels with trec_eval's conventions (as BEIR reports
them); ``evaluation.datasets`` parses the BEIR-format and LoCoMo benchmarks from a path.
"""
