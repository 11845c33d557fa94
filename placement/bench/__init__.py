"""The benchmark suite behind ``placement bench``: solvers x workloads, isolated runs, resumable results,
Markdown/CSV tables (:mod:`.suite`, :mod:`.catalog`, :mod:`.report`).

Part of the library so that the installed command does not depend on the source checkout; the
standalone benchmark scripts (``bench_*.py``) and their notes stay in ``benchmarks/``.
"""
