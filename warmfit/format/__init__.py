"""The trace format: its schema, reading and checking traces, writing them atomically.

:mod:`~warmfit.format.schema` (columns and types of format v1),
:mod:`~warmfit.format.trace` (read a trace, check its rules),
:mod:`~warmfit.format.writer` (write one), :mod:`~warmfit.format.files`
(regular files in, atomic writes out), :mod:`~warmfit.format.pagecrc` (page
checksums) and :mod:`~warmfit.format.batches` (a trace as batches of whole
streams, for a replay of any size).
"""
