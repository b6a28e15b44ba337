"""Traces to start from: the PR's reconstruction (:mod:`~warmfit.samples.synthetic`) and
the demo that records a real run (:mod:`~warmfit.samples.demo`). The real GPU
measurements in ``traces/art-h200`` and ``traces/liger-gpu`` are imported from
their CSV files by the mappings beside them (``warmfit import table``,
:mod:`warmfit.importers.table`).
"""
