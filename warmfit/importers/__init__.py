"""Measurements people already have, as traces: tables through a TOML mapping of polars
expressions (:mod:`~warmfit.importers.mapping`, :mod:`~warmfit.importers.table`) and ART's
planner-miss reports (:mod:`~warmfit.importers.art_misses`). ``warmfit import`` is their
command line.
"""
