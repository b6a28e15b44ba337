"""warmfit: replay recorded GPU training waves through memory-pricing policies.

The library behind the ``warmfit`` command. Import what you need from its
modules: :mod:`warmfit.format.trace` (read, validate, write traces),
:mod:`warmfit.policies` (the policy API and registry), :mod:`warmfit.replay`
(replay and summary), :mod:`warmfit.report.table` (renderers).
"""

__version__ = "0.1.0"
