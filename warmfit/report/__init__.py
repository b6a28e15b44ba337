"""What a replay shows: the table (:mod:`~warmfit.report.table`), the plots
(:mod:`~warmfit.report.plot`), the CI gate (:mod:`~warmfit.report.gate`) and the
safety-factor sweep (:mod:`~warmfit.report.sweep`).
"""
