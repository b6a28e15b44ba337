"""The write-ahead log (warmfit/recorder/log.py) in this process: its writer's edges, how
it tells a torn tail from damage, and compaction's and recovery's rarer paths.

tests/test_hostile_log.py causes the faults for real, in child processes (a SIGKILL, a
full disk, a second writer); the lines those children run are not seen by a test in
this process. Here the same guarantees (docs/reference/recorder.md, the module's
docstring) are checked on logs written by :class:`LogWriter` and bytes spelled out, each
with the figures worked out: what a cut-off message looks like at the limits of its
length fields, what a forked child does with an inherited log, a compaction whose log
vanished while it waited for the lock, a trace that holds only a prefix of a log.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import os
import re
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import warmfit.recorder.log as log_module
from tests.test_hostile_log import a_log, rows
from warmfit.errors import UsageError
from warmfit.format.trace import read_trace
from warmfit.recorder.log import (
    LOG_MARKER,
    LOG_NAME,
    LOG_VERSION,
    TRACE_NAME,
    Compaction,
    LogWriter,
    busy_message,
    compact_log,
    compact_logs,
    is_busy,
    log_schema,
    lost_notes,
    read_log,
    recover,
    recover_all,
    write_lost_readings,
    writer_pid,
)

CONTINUATION = b"\xff\xff\xff\xff"
#: an Arrow stream's end: a continuation, then a metadata length of 0
END_OF_STREAM = CONTINUATION + b"\x00\x00\x00\x00"
GONE = "gone: another process compacted it"


def writer(root: Path, rank: int = 0, **kwargs) -> LogWriter:
    return LogWriter(
        root / "run=r" / f"rank={rank}" / LOG_NAME, "r", rank, {"warmfit.meter": "test"}, **kwargs
    )


def stream(schema: pa.Schema, *columns: list) -> bytes:
    """An Arrow IPC stream of one batch: ``schema``, then ``columns``."""
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as out:
        out.write_batch(pa.record_batch(arrays, schema=schema))
    return bytes(sink.getvalue().to_pybytes())


# --------------------------------------------------------------------------- a torn tail or damage


@pytest.fixture
def two_batches(tmp_path: Path) -> tuple[Path, bytes, int]:
    """A log of 2 batches of 4 readings, no end-of-stream marker (a writer killed after
    its second flush): its path, its bytes, and where its first batch ends."""
    path = a_log(tmp_path, batches=2, per_batch=4, close=False)
    data = path.read_bytes()
    return path, data, read_log(path, data).batch_ends[0]


def test_up_to_three_zero_bytes_after_the_last_batch_are_a_torn_tail(two_batches) -> None:
    """A crash can leave zeros where a message was about to be written. 1, 2 or 3 zero
    bytes are too short to be a message's framing (4 bytes): the tail is torn, the 8
    readings are kept and the log is complete (removable once compacted). Four zeros are
    the old end-of-stream marker: nothing is dropped."""
    path, data, _ = two_batches
    for zeros in (1, 2, 3):
        contents = read_log(path, data + bytes(zeros))
        assert (contents.readings, contents.kept_bytes, contents.dropped_bytes) == (
            8,
            len(data),
            zeros,
        )
        assert contents.torn and contents.complete
        assert contents.problem == "its last batch is cut off (a process killed while writing it)"
    whole = read_log(path, data + bytes(4))
    assert (whole.readings, whole.dropped_bytes, whole.problem) == (8, 0, None)


def test_bytes_after_the_last_batch_that_are_no_message_are_damage(two_batches) -> None:
    """16 bytes of text where a message's framing (0xFFFFFFFF, then its length) should
    start cannot be a message cut off by a kill: damage, so the log is not complete (it
    is kept for a person), though its 8 readings are readable."""
    path, data, _ = two_batches
    contents = read_log(path, data + b"garbage!garbage!")
    assert (contents.readings, contents.batches, contents.dropped_bytes) == (8, 2, 16)
    assert not contents.torn and not contents.complete
    assert contents.problem is not None and contents.problem.startswith("batch 2 is damaged")


def test_a_message_header_longer_than_one_mib_is_damage_not_a_torn_tail(two_batches) -> None:
    """The framing's metadata length must be plausible: at most 1 MiB (2**20 bytes). A
    tail of 0xFFFFFFFF, a length, then 64 bytes: with a length of 1,048,576 it is a
    message cut off by the end of the file (torn: the 8 readings before it are the log,
    whole); with 1,048,577 or -1 the length is nonsense and the tail is damage. (A length
    of 0 makes the 8 bytes an end-of-stream marker.)"""
    path, data, _ = two_batches

    def tail(length: int) -> bytes:
        return data + CONTINUATION + struct.pack("<i", length) + b"\x07" * 64

    at_limit = read_log(path, tail(2**20))
    assert at_limit.torn and at_limit.complete and at_limit.readings == 8
    assert at_limit.dropped_bytes == 72
    for length in (2**20 + 1, -1):
        beyond = read_log(path, tail(length))
        assert not beyond.torn and not beyond.complete, length
        assert beyond.readings == 8 and beyond.dropped_bytes == 72


def _with_body_length(message: bytes, body: int) -> bytes:
    """``message``'s framing and flatbuffer header, its ``bodyLength`` set to ``body``
    (the field the table's vtable points at, slot 3, whose offset is at byte 10)."""
    (length,) = struct.unpack_from("<i", message, 4)
    header = bytearray(message[8 : 8 + length])
    (table,) = struct.unpack_from("<I", header, 0)
    (back,) = struct.unpack_from("<i", header, table)
    (slot,) = struct.unpack_from("<H", header, table - back + 10)
    struct.pack_into("<q", header, table + slot, body)
    return message[:8] + bytes(header)


def test_a_message_body_longer_than_64_gib_is_damage_not_a_torn_tail(two_batches) -> None:
    """A batch's body must be at most 64 GiB (2**36 bytes) to be believed. The second
    batch's message, its header whole and its ``bodyLength`` rewritten, then 16 bytes of
    body: with 68,719,476,736 the body runs past the end of the file (torn: 4 readings
    kept, a complete log); with 68,719,476,737 it is damage."""
    path, data, end = two_batches
    message = data[end:]
    for body, torn in ((2**36, True), (2**36 + 1, False)):
        cut = _with_body_length(message, body) + b"\x01" * 16
        contents = read_log(path, data[:end] + cut)
        assert (contents.torn, contents.complete) == (torn, torn), body
        assert (contents.readings, contents.batches, contents.dropped_bytes) == (4, 1, len(cut))


def message_header(
    vtable_size: int = 12,
    table_to_vtable: int = 12,
    length: int = 28,
    tail: bytes = b"",
    slot: int = 4,
    body: int = 100,
) -> bytes:
    """A flatbuffer IPC message header, built byte by byte: the root table at 16, its
    vtable ``table_to_vtable`` bytes before it (``vtable_size`` bytes; bodyLength's slot,
    4, at its byte 10), bodyLength ``body`` (100) at 20..28; cut to ``length`` bytes, or
    followed by ``tail``. A slot of 0 says the field is absent (a body of 0). As Arrow writes it, ``message_header()`` names a body of 100 bytes."""
    vtable = struct.pack("<HH", vtable_size, 12) + bytes(6) + struct.pack("<H", slot)
    table = struct.pack("<i", table_to_vtable) + struct.pack("<q", body)
    return (struct.pack("<I", 16) + vtable + table + tail)[:length]


def framed(header: bytes) -> bytes:
    return CONTINUATION + struct.pack("<i", len(header)) + header


#: a vtable 12 bytes before its table's start, at the header's end: -12 from the table at 16
BEFORE_THE_HEADER = message_header(
    table_to_vtable=28, length=40, tail=struct.pack("<H", 12) + bytes(8) + struct.pack("<H", 4)
)


@pytest.mark.parametrize(
    ("tail", "torn"),
    [
        # exactly 8 bytes: framing with a nonsense length (2**30 > 1 MiB)
        (CONTINUATION + struct.pack("<i", 2**30), False),
        # exactly 8 bytes: framing announcing a 1-byte header, cut off right after
        (CONTINUATION + struct.pack("<i", 1), True),
        # a plausible length (100) that runs past the end, but no continuation before it
        (b"ABCD" + struct.pack("<i", 100) + b"x" * 10, False),
        # a whole header naming a body of 100 bytes, none of which is there
        (framed(message_header()), True),
        # a header whose bodyLength would need one byte more than the header has
        (framed(message_header(length=27)) + b"\x00", False),
        # a vtable of 10 bytes has no bodyLength slot: no body, and the header is whole
        (framed(message_header(vtable_size=10)), False),
        # a slot of 0: bodyLength absent, so no body (not the table's own first bytes,
        # 12 then 0: a body of 12), and the header is whole
        (framed(message_header(slot=0, body=0)), False),
        # a vtable before the header's first byte (offsets are never negative)
        (framed(BEFORE_THE_HEADER), False),
    ],
    ids=[
        "nonsense-length",
        "one-byte-header-cut",
        "no-continuation",
        "body-missing",
        "body-length-outside",
        "no-body-length",
        "absent-body-length",
        "negative-vtable",
    ],
)
def test_a_tail_is_torn_only_when_its_framing_is_whole_and_runs_past_the_end(
    two_batches, tail: bytes, torn: bool
) -> None:
    """After the 8 readings: a tail is a message cut off by a kill only when it starts with
    0xFFFFFFFF, its header length is 1 to 1 MiB and the header (with the body it names)
    runs past the end of the file; else it is damage (the log kept for a person)."""
    path, data, _ = two_batches
    contents = read_log(path, data + tail)
    assert (contents.readings, contents.dropped_bytes) == (8, len(tail))
    assert (contents.torn, contents.complete) == (torn, torn)


def test_a_whole_message_header_without_a_body_length_is_damage(two_batches) -> None:
    """A flatbuffer header whose vtable (4 bytes) has no slot for ``bodyLength`` declares
    a body of 0 bytes. Framing (8 bytes) and a whole 12-byte header, then the end of the
    file: the message is not cut off, so the tail is damage (pyarrow cannot read it)."""
    path, data, _ = two_batches
    header = struct.pack("<I", 8) + struct.pack("<HH", 4, 4) + struct.pack("<i", 4)
    contents = read_log(path, data + CONTINUATION + struct.pack("<i", len(header)) + header)
    assert not contents.torn and not contents.complete
    assert (contents.readings, contents.dropped_bytes) == (8, 20)


# --------------------------------------------------------------------------- whose file it is


def test_only_a_marked_stream_with_the_logs_columns_is_a_log() -> None:
    """A stream is a log when its schema carries the marker and its columns are v1's
    then known extras, each once, in their order. Each of these holds 1 row and is
    refused whole (not ours, no reading, every byte dropped, never called torn)."""
    v1 = list(log_schema())
    row = [["r"], [0], *([v] for v in rows(0, 1)[0])]
    marked = {LOG_MARKER: LOG_VERSION}
    twice = pa.field("estimate_bytes", pa.int64())
    cases = {
        "unmarked": (pa.schema(v1), row, "marker"),
        "an unknown extra": (
            pa.schema([*v1, pa.field("note", pa.int64())], metadata=marked),
            [*row, [1]],
            "its columns are not those of a warmfit log",
        ),
        "an extra twice": (
            pa.schema([*v1, twice, twice], metadata=marked),
            [*row, [1], [1]],
            "its columns are not those of a warmfit log",
        ),
    }
    for name, (schema, columns, why) in cases.items():
        data = stream(schema, *columns)
        contents = read_log(Path(LOG_NAME), data)
        assert not contents.ours and not contents.complete, name
        assert (contents.readings, contents.dropped_bytes, contents.torn) == (0, len(data), False)
        assert contents.problem is not None and why in contents.problem, name
    # the same row, marked, with v1's columns: a log of 1 reading
    good = read_log(Path(LOG_NAME), stream(log_schema(metadata=marked), *row))
    assert good.ours and good.complete and good.readings == 1


def test_what_a_file_that_is_no_log_is_refused_for(tmp_path: Path) -> None:
    """An empty file, a log cut inside its schema (its first 20 bytes: a continuation and
    a metadata length that runs past the end) and bytes that are no Arrow stream are each
    refused with their own reason, holding nothing: 0 batches, 0 readings, 0 bytes kept,
    every byte dropped."""
    whole = a_log(tmp_path).read_bytes()
    cases = {
        b"": "the file is empty, so it cannot be shown to be a warmfit log",
        whole[:20]: "the file ends inside its schema, so it cannot be shown to be a warmfit log",
        b"PAR1 and more bytes that are no stream": "the file has a schema that cannot be read (",
    }
    for data, why in cases.items():
        contents = read_log(Path(LOG_NAME), data)
        assert contents.problem is not None and contents.problem.startswith(why), data[:8]
        assert (contents.table, contents.batches, contents.readings) == (None, 0, 0)
        assert (contents.kept_bytes, contents.dropped_bytes) == (0, len(data))
        assert not contents.ours and not contents.torn and not contents.complete


def test_a_log_held_by_another_process_is_named_by_its_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second writer of a live log is told who holds it: "another Recorder in this
    process" when the pid is this one's, else that pid."""
    live = writer(tmp_path, fsync=False)
    try:
        with pytest.raises(UsageError, match="by another Recorder in this process: one "):
            writer(tmp_path)
        monkeypatch.setattr(log_module, "writer_pid", lambda path: "4242")
        with pytest.raises(UsageError) as other:
            writer(tmp_path)
        assert str(other.value).startswith(
            f"{live.path} is already being written by pid 4242: one recorder per rank."
        )
    finally:
        live.release()


def finished_log(root: Path, count: int) -> Path:
    """A log of one batch of ``count`` readings (seq 0, 1, ...), finished and released."""
    log = writer(root, fsync=False)
    try:
        log.append(rows(0, count))
        log.finish()
    finally:
        log.release()
    return log.path


def test_a_short_write_goes_on_where_it_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pwrite may write fewer bytes than asked (a signal, a quota): the rest is written
    after them. With at most 100 bytes a call, a log of 5 readings reads back whole."""
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, data[:100], offset))
    contents = read_log(finished_log(tmp_path, 5))
    assert (contents.problem, contents.dropped_bytes) == (None, 0)
    assert contents.table.column("seq").to_pylist() == [0, 1, 2, 3, 4]


def test_bytes_after_the_end_of_stream_marker_keep_the_log_from_being_complete(
    tmp_path: Path,
) -> None:
    """A whole log, finished, is complete and not torn. The same log with 5 bytes after
    its end marker keeps its readings but is not complete (so never removed after a
    compaction): "5 bytes follow its end-of-stream marker", the 5 dropped, not torn."""
    path = finished_log(tmp_path, 3)
    data = path.read_bytes()
    whole = read_log(path)
    assert (whole.problem, whole.torn, whole.complete) == (None, False, True)
    assert (whole.kept_bytes, whole.dropped_bytes, whole.readings) == (len(data), 0, 3)
    after = read_log(path, data + b"extra")
    assert after.problem == "5 bytes follow its end-of-stream marker"
    assert (after.torn, after.complete, after.ours) == (False, False, True)
    assert (after.kept_bytes, after.dropped_bytes, after.readings) == (len(data), 5, 3)


def test_a_batch_with_a_string_that_is_no_utf8_is_damage(tmp_path: Path) -> None:
    """Only pyarrow's full validation sees a string column's bytes: a signature whose
    four letters became bytes that are no UTF-8 makes its batch damage, read no further
    (the batch before it kept)."""
    log = writer(tmp_path, fsync=False)
    try:
        log.append(rows(0, 2))
        log.append([(2, 0, 1, "QQQQ", *rows(2, 1)[0][4:])])
    finally:
        log.release()
    data = log.path.read_bytes()
    assert data.count(b"QQQQ") == 1
    bad = data.replace(b"QQQQ", b"\xff\xfe\xff\xfe")
    contents = read_log(log.path, bad)
    assert contents.problem is not None
    assert contents.problem.startswith("batch 1 is damaged (ArrowInvalid: ")
    assert (contents.batches, contents.readings, contents.torn) == (1, 2, False)


def test_a_files_writer_pid_is_a_question_mark_when_it_is_no_log(tmp_path: Path) -> None:
    """The pid named in "still being written by pid N" comes from the log's schema; a
    file that is no Arrow stream, or no file at all, names "?"."""
    foreign = tmp_path / LOG_NAME
    foreign.write_bytes(b"not arrow at all")
    assert writer_pid(foreign) == "?" and writer_pid(tmp_path / "missing") == "?"
    assert f"{foreign} is still being written by pid ?: " in busy_message(foreign)
    live = writer(tmp_path)
    try:
        assert writer_pid(live.path) == str(os.getpid())
    finally:
        live.release()


def test_a_log_that_is_gone_is_not_busy(tmp_path: Path) -> None:
    live = writer(tmp_path)
    try:
        assert is_busy(live.path)
    finally:
        live.release()
    assert not is_busy(live.path)
    assert not is_busy(tmp_path / "run=r" / "rank=7" / LOG_NAME)


# --------------------------------------------------------------------------- the writer


def test_a_writer_fsyncs_the_schema_and_every_batch_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a log is durable: its schema is fsynced before it gets its name, and
    each batch before append returns (2 fsyncs for a schema and one batch)."""
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    durable = writer(tmp_path)
    try:
        durable.append(rows(0, 4))
        assert synced == [durable.fd, durable.fd]
    finally:
        durable.release()
    synced.clear()
    fast = writer(tmp_path, rank=1, fsync=False)
    try:
        fast.append(rows(0, 4))
        assert synced == []
    finally:
        fast.release()


def test_append_writes_the_readings_it_can_and_returns_the_others(tmp_path: Path) -> None:
    """No reading: nothing written, nothing refused. Readings of seq 0 and 2 with one
    between them whose peak (2**63) is beyond int64: 2 written as one batch, the third
    returned with why. Only readings the log cannot hold: each returned, nothing written,
    no error. The log then reads back as the 2 readings."""
    log = writer(tmp_path, fsync=False)
    try:
        size = log.path.stat().st_size
        assert log.append([]) == [] and log.path.stat().st_size == size and log.readings == 0
        first, second = rows(0, 1)[0], rows(2, 1)[0]
        bad = (*rows(1, 1)[0][:11], 2**63, *rows(1, 1)[0][12:])
        refused = log.append([first, bad, second])
        assert [row for row, _ in refused] == [bad]
        assert refused[0][1].startswith(("OverflowError", "ArrowInvalid", "ValueError"))
        assert log.readings == 2
        size = log.path.stat().st_size
        assert [row for row, _ in log.append([bad, bad])] == [bad, bad]
        assert log.readings == 2 and log.path.stat().st_size == size
    finally:
        log.release()
    contents = read_log(log.path)
    assert contents.batches == 1 and contents.table is not None
    assert contents.table.column("seq").to_pylist() == [0, 2]
    assert contents.table.column("peak_bytes").to_pylist() == [200, 200]


def test_a_writer_counts_the_readings_of_every_batch(tmp_path: Path) -> None:
    """``readings`` (named in the recorder's "N readings flushed before are in that log")
    is the number written: 4, then 3 more is 7."""
    log = writer(tmp_path, fsync=False)
    try:
        log.append(rows(0, 4))
        assert log.readings == 4
        log.append(rows(4, 3))
        assert log.readings == 7
    finally:
        log.release()
    assert read_log(log.path).table.column("seq").to_pylist() == list(range(7))


def test_a_reading_of_the_wrong_length_is_refused_not_cut_or_padded(tmp_path: Path) -> None:
    """A reading with one value too many or one too few for the log's 14 columns is
    returned with why, not written with its extra value dropped (nor the batch refused):
    of seq 0, 1 (one too many), 2 (one too few), 3 the log holds 0 and 3; of 0 and 1
    (one too many) again, 0."""
    log = writer(tmp_path, fsync=False)
    try:
        good = rows(0, 4)
        longer = (*good[1], 7)
        shorter = good[2][:-1]
        refused = log.append([good[0], longer, shorter, good[3]])
        assert [row for row, _ in refused] == [longer, shorter]
        assert all(why.startswith("ValueError") for _, why in refused)
        assert log.readings == 2
        # alone with good ones, a longer reading is refused too (not cut to 14 values)
        assert [row for row, _ in log.append([good[0], longer])] == [longer]
        assert log.readings == 3
    finally:
        log.release()
    assert read_log(log.path).table.column("seq").to_pylist() == [0, 3, 0]


def test_a_closed_writer_refuses_to_append_and_says_it_is_closed(tmp_path: Path) -> None:
    log = writer(tmp_path, fsync=False)
    log.append(rows(0, 2))
    log.release()
    size = log.path.stat().st_size
    with pytest.raises(OSError, match=r"is closed$") as closed:
        log.append(rows(2, 2))
    assert str(closed.value) == f"the log {log.path} is closed"
    assert log.path.stat().st_size == size and log.readings == 2


def test_a_new_log_gets_the_mode_of_a_new_file_under_the_umask(tmp_path: Path) -> None:
    """Read and write for everyone the umask allows (0o666 & ~umask), like any file a
    program creates; never an execute bit (0o644 under the usual 022)."""
    mask = os.umask(0o022)
    try:
        log = writer(tmp_path, fsync=False)
        log.release()
        assert log.path.stat().st_mode & 0o777 == 0o644
        os.umask(0)
        other = writer(tmp_path, rank=1, fsync=False)
        other.release()
        assert other.path.stat().st_mode & 0o777 == 0o666
    finally:
        os.umask(mask)


def test_a_writer_that_could_not_start_closes_no_descriptor_of_this_process(
    tmp_path: Path,
) -> None:
    """A writer refused before it opened its log (the name is taken) holds descriptor -1,
    so when it is collected its release closes nothing: stdout and stderr stay open."""
    log = a_log(tmp_path)
    out, err = os.dup(1), os.dup(2)  # to put them back if a bug closes them
    try:
        for _ in range(2):
            with pytest.raises(UsageError):
                LogWriter(log, "r", 0, {})
        gc.collect()
        os.fstat(1)
        os.fstat(2)
    except OSError:
        os.dup2(out, 1)
        os.dup2(err, 2)
        raise
    finally:
        os.close(out)
        os.close(err)


def test_a_log_with_no_reading_is_discarded_with_its_empty_folders(tmp_path: Path) -> None:
    """A recording that measured nothing leaves nothing: ``discard`` removes the log and
    the rank's and run's folders, now empty; a log a forked child inherited is left to
    its parent (the test above)."""
    log = writer(tmp_path, fsync=False)
    log.discard()
    assert log.fd == -1 and list(tmp_path.iterdir()) == []


def test_a_busy_message_says_when_the_writer_is_this_process(tmp_path: Path) -> None:
    """The pid followed by "(this process)" for a log this process writes: the user is told the
    recording holding it is their own (a second Recorder in one trainer)."""
    live = writer(tmp_path, fsync=False)
    try:
        assert (
            f"{live.path} is still being written by pid {os.getpid()} (this process): "
            in busy_message(live.path)
        )
    finally:
        live.release()
    stranger = tmp_path / "stranger.arrows"
    stranger.write_bytes(b"x")
    message = busy_message(stranger)
    assert "by pid ?: " in message and "(this process)" not in message


def test_an_output_folder_not_yet_made_holds_no_recording(tmp_path: Path) -> None:
    assert log_module.existing_recording(tmp_path / "not-yet") == []
    a_log(tmp_path)
    assert log_module.existing_recording(tmp_path) == [tmp_path / "run=r" / "rank=0" / LOG_NAME]


def test_a_second_writer_of_a_killed_recordings_log_is_told_to_recover(tmp_path: Path) -> None:
    """A log nobody holds (its recording was killed) is not overwritten: a new writer is
    refused with what to run, and leaves no temporary file."""
    log = a_log(tmp_path)
    before = log.read_bytes()
    with pytest.raises(UsageError) as refused:
        LogWriter(log, "r", 0, {})
    assert str(refused.value) == (
        f"{log} already exists: a recording that was killed left it. Run 'warmfit recover "
        f"{tmp_path}' first, or record under another run label."
    )
    assert log.read_bytes() == before
    assert [p.name for p in log.parent.iterdir()] == [LOG_NAME]


# --------------------------------------------------------------------------- a forked child


def _is_devnull(fd: int) -> bool:
    return os.path.samestat(os.fstat(fd), os.stat(os.devnull))


def test_what_a_forked_child_does_with_the_logs_it_inherits(tmp_path: Path) -> None:
    """What ``os.fork`` runs in the child (the module registers it): each open log's
    descriptor, same number, now points at /dev/null, so the child holds no lock (a
    recover after the parent dies finds no writer), its appends go nowhere, and its
    discard does not remove the parent's log. A log already released is left alone."""
    first, second, done = writer(tmp_path, 0), writer(tmp_path, 1, fsync=False), writer(tmp_path, 2)
    done.release()
    fds = first.fd, second.fd
    try:
        log_module._release_locks_in_child()
        assert (first.fd, second.fd, done.fd) == (*fds, -1)
        assert _is_devnull(first.fd) and _is_devnull(second.fd)
        assert not is_busy(first.path) and not is_busy(second.path)
        before = second.path.read_bytes()
        assert second.append(rows(0, 4)) == []  # written to /dev/null
        assert second.path.read_bytes() == before
        first.discard()
        assert first.path.exists() and first.fd == fds[0]  # not even closed: not ours
    finally:
        first.release()
        second.release()


@contextlib.contextmanager
def stdin_closed() -> Iterator[None]:
    """Descriptor 0 free for the next file opened (a trainer started without stdin)."""
    try:
        saved: int | None = os.dup(0)
    except OSError:  # no stdin at all
        saved = None
    else:
        os.close(0)
    try:
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 0)
            os.close(saved)


def test_a_forked_child_lets_go_of_a_log_on_descriptor_0(tmp_path: Path) -> None:
    """A trainer started with stdin closed (a daemon) can get descriptor 0 for its log;
    a forked child lets go of that one too."""
    with stdin_closed():
        log = writer(tmp_path)
        try:
            assert log.fd == 0
            log_module._release_locks_in_child()
            assert _is_devnull(0) and not is_busy(log.path)
        finally:
            log.release()


def test_a_log_on_descriptor_0_is_written_finished_and_discarded_like_any(
    tmp_path: Path,
) -> None:
    """Descriptor 0 is an open log like any other, not a closed one: its batches and its
    end-of-stream marker are written (the log reads back whole), and an empty one on 0 is
    discarded with its folders."""
    with stdin_closed():
        log = writer(tmp_path, fsync=False)
        try:
            assert log.fd == 0
            log.append(rows(0, 3))
            log.finish()
        finally:
            log.release()
        assert not is_busy(log.path)  # released: the lock on descriptor 0 let go
        log.release()  # again: nothing to do
    assert log.path.read_bytes().endswith(END_OF_STREAM)
    assert read_log(log.path).table.column("seq").to_pylist() == [0, 1, 2]
    with stdin_closed():
        empty = writer(tmp_path, rank=1, fsync=False)
        assert empty.fd == 0
        empty.discard()
    assert empty.fd == -1 and not (tmp_path / "run=r" / "rank=1").exists()


def test_finish_ends_the_stream_once_and_a_released_log_is_left_as_it_is(
    tmp_path: Path,
) -> None:
    """``finish`` writes the Arrow stream's end marker (continuation, then a zero length:
    8 bytes) after the last batch; once released, finishing again writes nothing and
    raises nothing."""
    log = writer(tmp_path, fsync=False)
    log.append(rows(0, 2))
    size = log.path.stat().st_size
    log.finish()
    assert log.path.stat().st_size == size + 8
    assert log.path.read_bytes()[size:] == END_OF_STREAM
    log.release()
    log.finish()
    assert log.path.stat().st_size == size + 8


def test_a_batch_whose_failed_write_could_not_be_cut_back_is_cut_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails part-way (a full disk) leaves its bytes after the last whole
    batch; when cutting them off fails too, the next append cuts them first, so the log
    holds only whole batches: here 2 readings, a lost batch of 50, then 1 reading."""
    log = writer(tmp_path, fsync=False)
    log.append(rows(0, 2))
    whole = log.path.stat().st_size
    real_pwrite, real_ftruncate = os.pwrite, os.ftruncate

    def pwrite_half_then_fail(fd: int, data, offset: int) -> int:
        real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    def ftruncate_fails(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pwrite", pwrite_half_then_fail)
    monkeypatch.setattr(os, "ftruncate", ftruncate_fails)
    with pytest.raises(OSError, match="No space left"):
        log.append(rows(2, 50))
    assert log.path.stat().st_size > whole  # the half batch is still there
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    try:
        log.append(rows(52, 1))
        assert log.readings == 3
    finally:
        log.release()
    contents = read_log(log.path)
    assert contents.table.column("seq").to_pylist() == [0, 1, 52]
    assert (contents.problem, contents.dropped_bytes) == (None, 0)


def test_a_real_fork_points_the_childs_copy_at_dev_null(tmp_path: Path) -> None:
    """os.fork for real: the child sees its copy of the log's descriptor on /dev/null;
    the parent still holds its log."""
    log = writer(tmp_path)
    try:
        child = os.fork()
        if child == 0:  # the child: report through the exit code, run nothing else
            code = 1
            try:
                code = 0 if _is_devnull(log.fd) else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert is_busy(log.path) and not _is_devnull(log.fd)
    finally:
        log.release()


# --------------------------------------------------------------------------- compaction


def test_compacting_a_log_that_is_gone_says_so(tmp_path: Path) -> None:
    """Another process compacted and removed it first: nothing written, nothing lost."""
    path = tmp_path / "run=r" / "rank=0" / LOG_NAME
    gone = compact_log(path)
    assert gone == Compaction(path, None, 0, 0, 0, GONE, None, 0)
    assert gone.readings_per_batch == 0.0  # no batch: 0, not a division by zero


def test_compaction_leaves_a_file_that_is_no_log_untouched(tmp_path: Path) -> None:
    path = tmp_path / "run=r" / "rank=0" / LOG_NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(b"another program's bytes")
    with pytest.raises(UsageError, match=r"^not recovered, left untouched: the file has a "):
        compact_log(path)
    assert path.read_bytes() == b"another program's bytes"
    assert not (path.parent / TRACE_NAME).exists()


def test_a_log_whose_first_batch_is_damaged_is_kept_not_removed(tmp_path: Path) -> None:
    """A log of a schema, then 16 bytes that are no message: no batch can be read, and
    this is damage, not a torn tail, so the log stays for a person (never removed as a
    log with nothing in it)."""
    log = writer(tmp_path, fsync=False)
    log.release()
    with log.path.open("ab") as f:
        f.write(b"garbage!garbage!")
    before = log.path.read_bytes()
    with pytest.raises(UsageError, match=r"^no batch of the log can be read: batch 0 is dam"):
        compact_log(log.path)
    assert log.path.read_bytes() == before
    assert not (log.path.parent / TRACE_NAME).exists()


def test_a_log_that_shrank_after_its_size_was_taken_is_read_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size comes from fstat; if the file is shorter by the time it is read (100
    bytes fewer here), reading stops at its end instead of asking for bytes forever."""
    path = a_log(tmp_path)
    data = path.read_bytes()
    real = os.fstat

    def fstat_100_more(fd: int) -> os.stat_result:
        st = real(fd)
        return os.stat_result((*st[:6], st.st_size + 100, *st[7:]))

    monkeypatch.setattr(os, "fstat", fstat_100_more)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert log_module._read_fd(fd) == data
    finally:
        os.close(fd)


def test_a_compaction_says_how_many_readings_a_batch_held(tmp_path: Path) -> None:
    """2 batches of 4 readings: 4.0 a batch (what a cut-off batch held, about)."""
    done = compact_log(a_log(tmp_path, batches=2, per_batch=4))
    assert (done.readings, done.batches, done.readings_per_batch) == (8, 2, 4.0)


def test_a_log_compacted_by_another_process_while_this_one_waited_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compact_log opens the log, then waits for its lock; if meanwhile another process
    compacted the log and removed it, the open file is no longer the log: it is not
    compacted again (no second trace), the answer is "gone"."""
    log = a_log(tmp_path)
    real = log_module._lock

    def after_the_other_compaction(fd: int) -> bool:
        log.unlink()
        return real(fd)

    monkeypatch.setattr(log_module, "_lock", after_the_other_compaction)
    assert compact_log(log) == Compaction(log, None, 0, 0, 0, GONE, None, 0)
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_compaction_that_fails_to_write_reports_the_failure_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk while writing the trace: the log is kept byte for byte, no trace is
    left, and the problem is the disk's, not a missing temporary file's."""
    log = a_log(tmp_path)
    before = log.read_bytes()

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log_module, "write_trace", full_disk)
    recovery = compact_logs([log])
    assert recovery.problems == [
        f"{log}: OSError: [Errno 28] No space left on device (check the disk and the "
        "file's permissions; the log is left in place)"
    ]
    assert log.read_bytes() == before and not list(tmp_path.rglob("*.parquet"))


def test_a_trace_of_other_columns_beside_a_log_keeps_both(tmp_path: Path) -> None:
    """A readings.parquet without the trace's columns (1 row of ``x``) cannot hold the
    log's 12 readings: both are kept, and the message gives the counts."""
    log = a_log(tmp_path)
    before = log.read_bytes()
    pq.write_table(pa.table({"x": [1]}), log.with_name("readings.parquet"))
    with pytest.raises(UsageError, match=r"\(1 in the trace, 12 in the log\)"):
        compact_log(log)
    assert log.read_bytes() == before


def test_a_trace_of_the_first_readings_of_a_log_keeps_the_log(tmp_path: Path) -> None:
    """An earlier recovery kept a prefix: the trace beside the log holds its first 4
    readings (seq 0-3, its first batch), the log 12. The log is kept, and the answer
    says the trace holds 4 of 12; nothing is counted as a batch or bytes dropped."""
    a_log(tmp_path / "first", batches=1)
    recover(tmp_path / "first")
    log = a_log(tmp_path / "second", batches=3)
    trace = log.with_name("readings.parquet")
    next((tmp_path / "first").rglob("*.parquet")).rename(trace)
    before = log.read_bytes()
    done = compact_log(log)
    assert done == Compaction(
        log,
        trace,
        4,
        0,
        0,
        "readable prefix already in the trace; the log is kept",
        f"{trace} holds the first 4 of the log's 12 readings; the others break the trace "
        "format or cannot be read (an earlier 'warmfit recover' said which). The log is "
        "kept, untouched, for a person to look at",
        0,
    )
    assert log.read_bytes() == before and read_trace([trace]).height == 4


def test_recovering_a_damaged_log_again_keeps_it_and_says_the_trace_has_its_readings(
    tmp_path: Path,
) -> None:
    """A log of 3 batches of 4 readings, then 16 bytes of damage. The first compaction
    writes the 12 readings and keeps the log; the second finds them in the trace:
    12 readings in 3 batches, 0 bytes dropped (nothing new), the log kept again."""
    log = a_log(tmp_path, close=False)
    log.write_bytes(log.read_bytes() + b"garbage!garbage!")
    before = log.read_bytes()
    first = compact_log(log)
    assert (first.readings, first.batches, first.dropped_bytes) == (12, 3, 16)
    assert first.problem is not None and log.read_bytes() == before
    again = compact_log(log)
    assert (again.trace, again.readings, again.batches, again.dropped_bytes) == (
        first.trace,
        12,
        3,
        0,
    )
    assert again.note == "readable prefix already in the trace; the log is kept"
    assert again.problem is not None and again.problem.startswith("batch 3 is damaged")
    assert log.read_bytes() == before and read_trace([tmp_path]).height == 12


# --------------------------------------------------------------------------- recovery


def _unborn(rank_dir: Path, name: str = ".readings.arrows.4242.7f00.tmp") -> Path:
    """What a recorder killed while creating its log leaves: a temporary, never linked."""
    rank_dir.mkdir(parents=True, exist_ok=True)
    path = rank_dir / name
    path.write_bytes(b"half a schema")
    return path


def test_recover_removes_an_unborn_log_and_its_empty_directories(tmp_path: Path) -> None:
    """Rank 1 died creating its log: its temporary and its rank directory go; rank 0's
    log is recovered; the run directory, not empty, and the recording's stay."""
    log = a_log(tmp_path, rank=0)
    stale = _unborn(tmp_path / "run=r" / "rank=1")
    recovery = recover_all(tmp_path)
    assert recovery.problems == [] and [c.readings for c in recovery.compactions] == [12]
    assert not stale.exists() and not stale.parent.exists()
    assert sorted(p.name for p in (tmp_path / "run=r").iterdir()) == ["rank=0"]
    assert not log.exists() and read_trace([tmp_path]).height == 12


def test_recover_never_removes_the_directory_it_was_given(tmp_path: Path) -> None:
    """A recording whose only rank died creating its log, under DIR/rank=0: the
    temporary and rank=0 go, DIR stays, and recover says there is nothing to recover."""
    root = tmp_path / "rec"
    stale = _unborn(root / "rank=0")
    with pytest.raises(UsageError, match="holds no write-ahead logs"):
        recover_all(root)
    assert not stale.parent.exists() and root.is_dir()


def test_recover_leaves_a_temporary_that_its_creator_still_holds(tmp_path: Path) -> None:
    """A recorder alive and creating its log holds the temporary's lock: it is not
    removed from under it."""
    a_log(tmp_path, rank=0)
    stale = _unborn(tmp_path / "run=r" / "rank=1")
    fd = os.open(stale, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert recover_all(tmp_path).problems == []
        assert stale.read_bytes() == b"half a schema"
    finally:
        os.close(fd)


def test_recover_never_opens_a_fifo_named_like_an_unborn_log(tmp_path: Path) -> None:
    """A FIFO is no file a recorder made; opening it to read would wait for a writer
    forever. recover leaves it alone and never opens it (a thread here watches: it can
    open the FIFO for writing only while somebody has it open for reading)."""
    a_log(tmp_path)
    fifo = tmp_path / "run=r" / "rank=1" / ".readings.arrows.1.2.tmp"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    opened: list[bool] = []
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: nobody reads it; ENOENT: removed
                time.sleep(0.005)
                continue
            opened.append(True)
            os.close(fd)
            return

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        recovery = recover_all(tmp_path)
    finally:
        finished.set()
        watcher.join()
    assert opened == [] and recovery.problems == []
    assert fifo.exists() and fifo.is_fifo()


def test_the_readings_lost_are_counted_per_rank_and_in_all(tmp_path: Path) -> None:
    """Rank 0's recorder could not write 5 readings, rank 1's 2, rank 2's none (its note
    says 0), and rank 3's note is not warmfit's: lost_notes names ranks 0 and 1, and the
    recovery counts 7 in all."""
    logs = [a_log(tmp_path, rank=rank) for rank in range(4)]
    write_lost_readings(logs[0], 5)
    write_lost_readings(logs[1], 2)
    write_lost_readings(logs[2], 0)
    logs[3].with_name("readings.lost").write_text("five\n")
    assert lost_notes(tmp_path) == {logs[0].parent: 5, logs[1].parent: 2}
    recovery = recover_all(tmp_path)
    assert [c.lost_readings for c in recovery.compactions] == [5, 2, 0, 0]
    assert recovery.lost_readings == 7 and recovery.problems == []


# ------------- i38v: compaction's trace metadata, a batch that breaks the format, read-back


def test_a_compacted_trace_keeps_the_meter_but_not_the_logs_marker_or_pid(
    tmp_path: Path,
) -> None:
    """The log's schema says warmfit.log = 1 and warmfit.pid = this process; a trace is
    no log and has no writer: its metadata keeps the meter and names neither. A whole
    log (2 batches of 4, finished) drops no bytes and lost no reading: neither key."""
    log = a_log(tmp_path, batches=2)
    assert writer_pid(log) == str(os.getpid())
    done = compact_log(log)
    meta = pq.read_schema(done.trace).metadata
    assert meta[b"warmfit.meter"] == b"test"
    assert LOG_MARKER.encode() not in meta and b"warmfit.pid" not in meta
    assert b"warmfit.recovered_dropped_bytes" not in meta
    assert b"warmfit.readings_lost" not in meta


def test_a_trace_says_the_bytes_dropped_and_the_readings_lost(tmp_path: Path) -> None:
    """12 readings, then 16 bytes of damage, and the recorder could not write 5
    readings: the trace's metadata says 16 bytes dropped and 5 readings lost."""
    log = a_log(tmp_path, close=False)
    log.write_bytes(log.read_bytes() + b"garbage!garbage!")
    write_lost_readings(log, 5)
    done = compact_log(log)
    assert (done.readings, done.dropped_bytes, done.lost_readings) == (12, 16, 5)
    meta = pq.read_schema(done.trace).metadata
    assert meta[b"warmfit.recovered_dropped_bytes"] == b"16"
    assert meta[b"warmfit.readings_lost"] == b"5"


def test_a_whole_finished_log_drops_not_even_its_end_of_stream_marker(tmp_path: Path) -> None:
    """2 batches and the 8-byte end-of-stream marker after the last: every byte is
    kept, 0 dropped (the marker is past the last batch's end, but it is no loss)."""
    log = a_log(tmp_path, batches=2)
    contents = read_log(log)
    assert contents.kept_bytes == contents.batch_ends[-1] + 8 == len(log.read_bytes())
    done = compact_log(log)
    assert (done.readings, done.batches, done.dropped_bytes, done.note) == (
        8,
        2,
        0,
        "complete",
    )


def _peak(reading: tuple, peak: int) -> tuple:
    return (*reading[:11], peak, *reading[12:])


def test_a_second_batch_that_breaks_the_format_keeps_the_first_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    """Batch 0: seq 0-3; batch 1: seq 4-7, valid Arrow but seq 4's peak is -5 (the format
    wants it >= 0); then 16 bytes of damage. The trace keeps batch 0, 4 readings; what
    is dropped is every byte after batch 0's end: batch 1 and the 16 bytes."""
    log = writer(tmp_path, fsync=False)
    log.append(rows(0, 4))
    log.append([_peak(rows(4, 1)[0], -5), *rows(5, 3)])
    log.release()
    log.path.write_bytes(log.path.read_bytes() + b"garbage!garbage!")
    before = log.path.read_bytes()
    contents = read_log(log.path)
    assert (contents.batches, contents.dropped_bytes) == (2, 16)
    done = compact_log(log.path)
    assert (done.readings, done.batches) == (4, 1)
    assert done.dropped_bytes == len(before) - contents.batch_ends[0]
    assert done.note == "readable prefix kept; the log is kept"
    assert done.problem is not None
    assert done.problem.startswith("batch 1 holds values that break the trace format (")
    assert read_trace([done.trace]).get_column("seq").to_list() == [0, 1, 2, 3]
    assert log.path.read_bytes() == before


def test_a_seq_repeated_in_the_last_batch_keeps_no_batch(tmp_path: Path) -> None:
    """Batch 0: seq 0 (1 reading); batch 1: seq 1-4; batch 2: seq 4-7. seq 4 twice breaks
    a rule that spans rows, which names no row: row 0 is taken, in batch 0, so no batch
    can be kept. Nothing is written, the log is kept."""
    log = writer(tmp_path, fsync=False)
    for batch in (rows(0, 1), rows(1, 4), rows(4, 4)):
        log.append(batch)
    log.release()
    before = log.path.read_bytes()
    with pytest.raises(UsageError, match=r"^no batch of the log can be kept: batch 0 holds "):
        compact_log(log.path)
    assert log.path.read_bytes() == before
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_trace_that_reads_back_other_readings_is_an_error_and_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk returns other bytes: the trace validates but seq 0's peak reads 201, not
    the 200 written. That is an OSError, the trace is removed, the log kept."""
    import warmfit.format.trace as trace_module

    log = a_log(tmp_path)
    before = log.read_bytes()
    real = trace_module.read_trace

    def other_bytes(*args: object, **kwargs: object):
        import polars as pl

        back = real(*args, **kwargs)
        return back.with_columns(
            pl.when(pl.col("seq") == 0)
            .then(pl.col("peak_bytes") + 1)
            .otherwise(pl.col("peak_bytes"))
            .alias("peak_bytes")
        )

    monkeypatch.setattr(trace_module, "read_trace", other_bytes)
    with pytest.raises(OSError, match=r"does not read back as the readings written to it"):
        compact_log(log)
    assert log.read_bytes() == before and not list(tmp_path.rglob("*.parquet"))


# ------------- i38w: a trace beside a log, what a compaction removes, what recovery finds


def _empty_trace_beside(log: Path, tmp_path: Path) -> Path:
    """A trace of the trace's columns and 0 rows beside ``log`` (made by compacting a
    log of 1 batch elsewhere and keeping its schema)."""
    donor = compact_log(a_log(tmp_path / "donor", batches=1)).trace
    assert donor is not None
    trace = log.with_name(TRACE_NAME)
    pq.write_table(pq.read_table(donor).slice(0, 0), trace)
    return trace


def test_a_log_of_no_reading_beside_a_trace_of_no_reading_is_already_compacted(
    tmp_path: Path,
) -> None:
    """A log that is only a schema (0 readings, 0 batches) beside a trace of 0 rows: the
    trace holds all of it (none), so the log goes; 0 readings, 0 batches, 0 bytes."""
    log = writer(tmp_path, fsync=False)
    log.release()
    trace = _empty_trace_beside(log.path, tmp_path)
    assert compact_log(log.path) == Compaction(
        log.path, trace, 0, 0, 0, "already compacted", None, 0
    )
    assert not log.path.exists() and pq.read_table(trace).num_rows == 0


def test_a_log_of_no_reading_beside_a_trace_of_one_reading_keeps_both(tmp_path: Path) -> None:
    """The same empty log beside a trace of 1 reading: the trace is not this log's (1 in
    the trace, 0 in the log), so both are kept."""
    log = writer(tmp_path, fsync=False)
    log.release()
    donor = compact_log(a_log(tmp_path / "donor", batches=1)).trace
    assert donor is not None
    trace = log.path.with_name(TRACE_NAME)
    pq.write_table(pq.read_table(donor).slice(0, 1), trace)
    before = log.path.read_bytes()
    with pytest.raises(UsageError, match=r"\(1 in the trace, 0 in the log\)"):
        compact_log(log.path)
    assert log.path.read_bytes() == before and pq.read_table(trace).num_rows == 1


def test_a_log_of_12_readings_beside_a_trace_of_none_keeps_both(tmp_path: Path) -> None:
    """A trace of the trace's columns but 0 rows holds none of the log's 12 readings, not
    all of them and not a prefix worth naming: both are kept, and the log is not
    removed."""
    log = a_log(tmp_path)
    before = log.read_bytes()
    trace = _empty_trace_beside(log, tmp_path)
    with pytest.raises(UsageError, match=r"\(0 in the trace, 12 in the log\)"):
        compact_log(log)
    assert log.read_bytes() == before and pq.read_table(trace).num_rows == 0


def test_a_trace_of_the_first_reading_of_a_log_is_a_prefix_too(tmp_path: Path) -> None:
    """A trace holding only seq 0 beside a log of 12: a prefix of 1 reading, the log
    kept, and the answer says the trace holds the first 1 of 12."""
    log = a_log(tmp_path)
    donor = compact_log(a_log(tmp_path / "donor", batches=1)).trace
    assert donor is not None
    trace = log.with_name(TRACE_NAME)
    pq.write_table(pq.read_table(donor).slice(0, 1), trace)
    before = log.read_bytes()
    done = compact_log(log)
    assert (done.trace, done.readings, done.batches, done.dropped_bytes) == (trace, 1, 0, 0)
    assert done.problem is not None
    assert done.problem.startswith(f"{trace} holds the first 1 of the log's 12 readings;")
    assert log.read_bytes() == before


def test_a_log_whose_readings_the_trace_already_holds_is_removed_with_nothing_dropped(
    tmp_path: Path,
) -> None:
    """The same log of 3 batches of 4 written twice at one path: the first compaction
    writes the trace; the second finds its 12 readings there and removes the log:
    12 readings, 3 batches, 0 bytes dropped, "already compacted"."""
    first = compact_log(a_log(tmp_path))
    log = a_log(tmp_path)
    assert compact_log(log) == Compaction(log, first.trace, 12, 3, 0, "already compacted", None, 0)
    assert not log.exists() and read_trace([tmp_path]).height == 12


def test_a_compaction_removes_the_lost_readings_note_warmfit_wrote_and_no_other(
    tmp_path: Path,
) -> None:
    """Rank 0's note says 5 readings were lost: the count goes into the trace, and the
    note goes with the log. Rank 1's note says 0 and rank 2's is not warmfit's ("five"):
    neither is a count, so both are left where they are."""
    logs = [a_log(tmp_path, rank=rank) for rank in range(3)]
    write_lost_readings(logs[0], 5)
    write_lost_readings(logs[1], 0)
    logs[2].with_name("readings.lost").write_text("five\n")
    assert [compact_log(log).lost_readings for log in logs] == [5, 0, 0]
    assert not logs[0].with_name("readings.lost").exists()
    assert logs[1].with_name("readings.lost").read_text() == "warmfit lost readings: 0\n"
    assert logs[2].with_name("readings.lost").read_text() == "five\n"
    assert not any(log.exists() for log in logs)


def test_a_compaction_leaves_a_symlink_named_like_its_temporary(tmp_path: Path) -> None:
    """A symlink named like a compaction's temporary (``.readings.parquet.1.tmp``), to a
    file outside: no compaction made it, so it is left, and so is the file."""
    log = a_log(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("not warmfit's")
    link = log.with_name(f".{TRACE_NAME}.1.tmp")
    link.symlink_to(outside)
    assert compact_log(log).note == "complete"
    assert link.is_symlink() and outside.read_text() == "not warmfit's"


def test_recover_finds_no_log_in_a_symlink_or_a_directory_of_the_logs_name(
    tmp_path: Path,
) -> None:
    """Rank 0's log is real; rank 1's ``readings.arrows`` is a symlink to a log outside
    the recording, rank 2's a directory: neither is a log of this recording, so only
    rank 0 is compacted, with no problem, and the log outside is untouched."""
    log = a_log(tmp_path / "rec")
    outside = a_log(tmp_path / "outside")
    before = outside.read_bytes()
    link = tmp_path / "rec" / "run=r" / "rank=1" / LOG_NAME
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    (tmp_path / "rec" / "run=r" / "rank=2" / LOG_NAME).mkdir(parents=True)
    assert log_module.find_logs(tmp_path / "rec") == [log]
    recovery = recover_all(tmp_path / "rec")
    assert [c.log for c in recovery.compactions] == [log] and recovery.problems == []
    assert outside.read_bytes() == before and link.is_symlink()


def test_a_folder_of_a_trace_alone_or_of_run_and_rank_folders_alone_is_a_recording(
    tmp_path: Path,
) -> None:
    """No log in either: a folder holding only a trace, and one holding only an empty
    run=r/rank=0, are both recordings with nothing to recover (an empty answer, not an
    error); a folder with neither is refused."""
    only_trace = tmp_path / "trace"
    only_trace.mkdir()
    donor = compact_log(a_log(tmp_path / "donor")).trace
    assert donor is not None
    donor.rename(only_trace / TRACE_NAME)  # no run=*/rank=* folder above it
    only_ranks = tmp_path / "ranks"
    (only_ranks / "run=r" / "rank=0").mkdir(parents=True)
    for folder in (only_trace, only_ranks):
        recovery = recover_all(folder)
        assert (recovery.compactions, recovery.problems) == ([], [])
    (tmp_path / "neither").mkdir()
    with pytest.raises(UsageError, match="holds no write-ahead logs"):
        recover_all(tmp_path / "neither")


def test_recover_of_a_folder_that_does_not_exist_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(
        UsageError, match=rf"^no such directory: {re.escape(str(missing))}\. Name the -o "
    ):
        recover_all(missing)
