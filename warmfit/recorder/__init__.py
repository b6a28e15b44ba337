"""Record the waves of a real torch training run as a warmfit trace.

:class:`Recorder` is the API a trainer calls (one context manager per wave);
:mod:`warmfit.recorder.meters` reads device memory; :mod:`warmfit.recorder.log`
writes the crash-safe log, compacts it into Parquet and recovers a killed
run's logs. See ``docs/reference/recorder.md``.

Importing this package does not import torch; creating an enabled
:class:`Recorder` does.
"""

from warmfit.recorder.log import Compaction, recover
from warmfit.recorder.recorder import (
    ENV_DIR,
    ENV_RUN,
    Recorder,
    RecorderWarning,
    Wave,
    is_out_of_memory,
)

__all__ = [
    "ENV_DIR",
    "ENV_RUN",
    "Compaction",
    "Recorder",
    "RecorderWarning",
    "Wave",
    "is_out_of_memory",
    "recover",
]
