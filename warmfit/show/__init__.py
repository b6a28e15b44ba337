"""What people read and type: names from traces escaped for each output
(:mod:`~warmfit.show.names`), byte counts (:mod:`~warmfit.show.units`) and
progress bars (:mod:`~warmfit.show.progress`).
"""
