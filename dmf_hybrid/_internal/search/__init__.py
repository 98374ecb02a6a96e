"""Search: planner, keyword leg, fusion, resolution (results: :mod:`dmf_hybrid._internal.models`).
"""
