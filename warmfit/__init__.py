"""warmfit: replay recorded GPU training waves through memory-pricing policies.

The library behind the ``warmfit`` command, one folder per job:

- :mod:`warmfit.recorder` and :mod:`warmfit.integrations` record waves during training;
- :mod:`warmfit.format` reads, checks and writes traces (format v1);
- :mod:`warmfit.policies` is the policy API, the built-in policies and their registry;
- :mod:`warmfit.replay` prices traces through policies and summarizes them,
  on :mod:`warmfit.run`'s worker processes when a trace is large;
- :mod:`warmfit.report` shows the figures: the table, plots, the CI gate, the sweep;
- :mod:`warmfit.testing` checks a policy of your own; :mod:`warmfit.samples`
  holds the traces to start from and the demo; :mod:`warmfit.show` escapes
  names and reads byte counts;
- :mod:`warmfit.commands` and :mod:`warmfit.cli` are the command line;
  :mod:`warmfit.errors` the error every part raises for bad input;
- :mod:`warmfit.trainer` runs a policy inside the trainer: ``warmfit.Pricer``.

``warmfit.Pricer`` is loaded when first asked for, so that ``import warmfit``
(and ``warmfit replay``) load nothing they do not need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Pricer", "__version__"]

if TYPE_CHECKING:
    from warmfit.trainer.pricer import Pricer


def __getattr__(name: str) -> Any:
    if name == "Pricer":
        from warmfit.trainer.pricer import Pricer

        return Pricer
    raise AttributeError(f"module 'warmfit' has no attribute {name!r}")
