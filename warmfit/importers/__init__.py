"""Measurements people already have, as traces: tables through a declarative mapping
(:mod:`~warmfit.importers.table`) and ART's planner-miss reports
(:mod:`~warmfit.importers.art_misses`). ``warmfit import`` is their command line.
"""
