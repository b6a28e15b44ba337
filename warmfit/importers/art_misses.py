"""ART's planner-miss reports as a trace: one wave per report.

ART (OpenPipe/ART) writes one canonical JSON report per *miss* when
``ART_TRAINER_RANK_PLANNER_MISS_THRESHOLD_PCT`` is set: a wave whose observed
peak differed from ART's prediction by more than the threshold, or that ran
out of memory. Each report becomes one flat wave of one caller reading, not
whole, in ``occurred_at`` order per rank, with the bytes the rank admitted on as
the price the trainer used (``estimate_bytes``, SPEC §8 and §9: replay reports
it as the policy ``recorded``). docs/how-to/bring-your-own-measurements.md gives the
mapping field by field and what the reports cannot give.

Reports are read one by one: a file that is not a report warmfit can read
(not JSON, cut short, over ART's 16 MiB cap, a field of the wrong kind) is
refused with its reason and the others are imported.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from warmfit.errors import TraceError
from warmfit.format.files import not_regular

#: ART caps a report at 16 MiB (``MAX_REPORT_BYTES``); a larger file is refused unread.
MAX_REPORT_BYTES = 16 * 2**20
#: The ``kind`` of every ART planner-miss report.
REPORT_KIND = "art-planner-miss"
#: The report formats read (ART's 1, and 2, which adds ``event``, ``decision`` and ``failure``).
FORMATS = (1, 2)
#: Events that describe a wave that ran (a miss of the estimate, or an OOM).
RAN = ("estimate_miss", "oom")

#: Why a report was not imported, in the order the counts are printed.
MALFORMED = "malformed"
OVERSIZED = "oversized"
NOT_A_WAVE = "not a wave"
REASONS = (MALFORMED, OVERSIZED, NOT_A_WAVE)

#: The extra columns each wave carries (they price nothing), with their types.
EXTRAS = {
    "art_report_id": "text",
    "art_occurred_at": "text",
    "art_event": "text",
    "art_phase": "text",
    "art_device": "text",
    "art_threshold_pct": "float",
    "art_safety_factor": "float",
    "art_admission_peak_bytes": "int",
    "art_expected_required_bytes": "int",
    "art_estimate_from": "text",
    "art_predicted_peak_bytes": "int",
}
#: Where ``estimate_bytes`` comes from, the first a report has (SPEC §9).
ADMITTED = (
    "replay.local_admission_peak_bytes",
    "admission_peak_bytes",
    "predicted_peak_bytes x replay.safety_factor",
)


class _Refused(Exception):
    def __init__(self, reason: str, problem: str) -> None:
        super().__init__(problem)
        self.reason = reason
        self.problem = problem


@dataclass(frozen=True)
class Refused:
    """A report that was not imported: its file, the kind of reason and the problem."""

    path: Path
    reason: str
    problem: str


@dataclass
class Misses:
    """The readings of a directory of reports, and the reports refused."""

    readings: Any  # a polars DataFrame
    metadata: dict[str, str]
    imported: int
    refused: list[Refused] = field(default_factory=list)

    def sources(self) -> dict[str, int]:
        """How many waves took ``estimate_bytes`` from each of :data:`ADMITTED`."""
        column = self.readings.get_column("art_estimate_from").to_list()
        return {source: column.count(source) for source in ADMITTED}

    def counts(self) -> dict[str, int]:
        """How many reports were refused for each reason (:data:`REASONS`)."""
        return {r: sum(x.reason == r for x in self.refused) for r in REASONS}


def _malformed(problem: str) -> _Refused:
    return _Refused(MALFORMED, problem)


#: The largest value a trace column holds: int64 for bytes and tokens, int32 for a rank
#: (warmfit/format/schema.py), with its name in a message.
LARGEST = (2**63 - 1, "2**63 - 1")
LARGEST_RANK = (2**31 - 1, "2**31 - 1, an int32")


def _integer(
    record: dict[str, Any],
    key: str,
    *,
    where: str = "",
    optional: bool = False,
    largest: tuple[int, str] = LARGEST,
) -> int | None:
    value = record.get(key)
    if value is None and optional:
        return None
    if type(value) is not int or not 0 <= value <= largest[0]:
        raise _malformed(
            f"{where}{key} must be a whole number from 0 to {largest[1]}; got {_short(value)}."
        )
    return value


def _number(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise _malformed(f"{key} must be a finite number; got {_short(value)}.")
    return float(value)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _malformed(f"names the key {key!r} twice.")
        result[key] = value
    return result


def _load(path: Path) -> tuple[dict[str, Any], bytes]:
    problem = not_regular(path)
    if problem is not None:
        raise _malformed(f"{problem}.")
    try:
        size = os.stat(path).st_size
        if size > MAX_REPORT_BYTES:
            raise _Refused(
                OVERSIZED, f"is {size:,} bytes, over ART's cap of {MAX_REPORT_BYTES:,} (16 MiB)."
            )
        with path.open("rb") as handle:
            raw = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        raise _malformed(f"cannot be read ({exc.strerror or exc}).") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise _Refused(
            OVERSIZED, f"holds more than ART's cap of {MAX_REPORT_BYTES:,} bytes (16 MiB)."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(f"is not UTF-8 text (byte {exc.start}).") from None
    try:
        record = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()) or not raw.endswith(b"\n"):
            # ART ends every report with a newline: without it, the file was cut short
            raise _malformed(
                f"is cut short: {len(raw):,} bytes of JSON that ends before it is complete."
            ) from None
        raise _malformed(
            f"is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        ) from None
    except ValueError:  # a number of more than 4,300 digits (sys.get_int_max_str_digits)
        raise _malformed("holds a number too long to read (over 4,300 digits).") from None
    except RecursionError:
        raise _malformed("nests arrays or objects too deeply to read.") from None
    try:  # JSON may escape a lone surrogate (\\ud800), which no text column can hold
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _malformed(
            f"holds a lone surrogate ({exc.object[exc.start : exc.end]!a}), which is not text."
        ) from None
    except RecursionError:
        raise _malformed("nests arrays or objects too deeply to read.") from None
    if not isinstance(record, dict):
        raise _malformed("is JSON but not an object.")
    return record, raw


@dataclass(frozen=True)
class _Wave:
    model: str
    rank: int
    occurred: datetime
    row: dict[str, object]


def _wave(record: dict[str, Any]) -> _Wave:
    if record.get("kind") != REPORT_KIND:
        raise _malformed(
            f"is not an ART planner-miss report (kind {_short(record.get('kind'))}, not {REPORT_KIND!r})."
        )
    if type(record.get("format")) is not int or record["format"] not in FORMATS:
        raise _malformed(
            f"has format {_short(record.get('format'))}; warmfit reads formats 1 and 2."
        )
    for key in ("id", "occurred_at", "phase"):
        if not isinstance(record.get(key), str):
            raise _malformed(f"{key} must be a string; got {_short(record.get(key))}.")
    if type(record.get("oom")) is not bool:
        raise _malformed(f"oom must be true or false; got {_short(record.get('oom'))}.")
    try:
        occurred = datetime.fromisoformat(record["occurred_at"])
    except ValueError:
        raise _malformed(
            f"occurred_at {_short(record['occurred_at'])} is not an ISO 8601 time."
        ) from None
    offset = occurred.utcoffset()
    if offset is None or offset.total_seconds() != 0:
        raise _malformed(f"occurred_at {_short(record['occurred_at'])} is not in UTC.")
    oom = record["oom"]
    event = record.get("event", "oom" if oom else "estimate_miss")
    if not isinstance(event, str):
        raise _malformed(f"event must be a string; got {_short(event)}.")
    if event not in RAN:
        raise _Refused(
            NOT_A_WAVE, f"records the event {event!r}: no wave ran, so there is no peak."
        )
    if oom != (event == "oom"):
        raise _malformed(f"event {event!r} disagrees with oom = {json.dumps(oom)}.")
    predicted = _integer(record, "predicted_peak_bytes")
    admission = _integer(record, "admission_peak_bytes", optional=True)
    if oom:
        peak = _integer(record, "partial_peak_bytes", optional=True)
        if peak is None:
            raise _Refused(NOT_A_WAVE, "is an OOM with no partial_peak_bytes: no peak to record.")
    else:
        peak = _integer(record, "observed_peak_bytes")
    threshold = _number(record, "threshold_pct")
    replay = record.get("replay")
    if replay is None:
        reasons = record.get("incomplete_reasons") or []
        said = f" (ART says: {'; '.join(map(str, reasons))[:200]})" if reasons else ""
        raise _Refused(NOT_A_WAVE, f"has no replay section, so no tokens or signature{said}.")
    if not isinstance(replay, dict):
        raise _malformed(f"replay must be an object; got {_short(replay)}.")
    rank = _integer(replay, "rank", where="replay.", largest=LARGEST_RANK)
    model = replay.get("model")
    if not isinstance(model, str) or not model:
        raise _malformed(f"replay.model must be a non-empty string; got {_short(model)}.")
    device = replay.get("device")
    device_text = (
        device if isinstance(device, str) or device is None else json.dumps(device, sort_keys=True)
    )
    safety = _number(replay, "safety_factor")
    local = _integer(replay, "local_admission_peak_bytes", where="replay.", optional=True)
    # the bytes the rank admitted on (SPEC §9): ART's predicted_peak_bytes is its
    # prediction net of the safety factor, round(local_required / factor)
    if local is not None:
        estimate, source = local, ADMITTED[0]
    elif admission is not None:
        estimate, source = admission, ADMITTED[1]
    elif safety is not None and safety > 0 and predicted is not None:
        # exactly, as the numbers are written, half to even (a double's product would
        # round 2**63 - 1 x 1.0 to 2**63, and any figure past 2**53 to a multiple of 2)
        estimate, source = round(predicted * Fraction(repr(safety))), ADMITTED[2]
        if estimate > LARGEST[0]:
            raise _malformed(f"predicted_peak_bytes x replay.safety_factor is beyond {LARGEST[1]}.")
    else:
        raise _malformed(
            "says no bytes admitted: neither replay.local_admission_peak_bytes, "
            "admission_peak_bytes nor a positive replay.safety_factor."
        )
    memory = replay.get("memory_replay")
    estimates = memory.get("estimates") if isinstance(memory, dict) else None
    if not isinstance(estimates, list) or not estimates:
        raise _Refused(
            NOT_A_WAVE, "has no replay.memory_replay.estimates, so no tokens or signature."
        )
    checked = [_estimate(e, i) for i, e in enumerate(estimates)]
    chosen = checked[0]
    if len(checked) > 1:
        # like with like: an estimate's expected_required_bytes carries the safety factor,
        # as the admitted bytes do; the net prediction is compared net, as ART rounds it
        tries = [(local, lambda e: e == local), (admission, lambda e: e == admission)]
        if safety is not None and safety > 0:
            tries.append((predicted, lambda e: round(e / safety) == predicted))
        matching: list[tuple[str, dict[str, int], int, int]] = []
        for target, match in tries:
            if target is not None:
                matching = [e for e in checked if match(e[3])]
                if matching:
                    break
        if len(matching) != 1:
            raise _Refused(
                NOT_A_WAVE,
                f"lists {len(checked)} candidate estimates and {len(matching)} of them match "
                f"the admitted bytes ({estimate:,}, {source}): which one ran is not known.",
            )
        chosen = matching[0]
    signature, arguments, _index, expected = chosen
    assert peak is not None and predicted is not None and rank is not None
    row: dict[str, object] = {
        "signature": signature,
        "packed_tokens": arguments["packed_tokens"],
        "logical_tokens": arguments["logical_tokens"],
        "output_bytes": arguments["output_bytes"],
        "peak_bytes": peak,
        "oom": oom,
        "estimate_bytes": estimate,
        "art_estimate_from": source,
        "art_predicted_peak_bytes": predicted,
        "art_report_id": record["id"],
        "art_occurred_at": record["occurred_at"],
        "art_event": event,
        "art_phase": record["phase"],
        "art_device": device_text,
        "art_threshold_pct": threshold,
        "art_safety_factor": safety,
        "art_admission_peak_bytes": admission,
        "art_expected_required_bytes": expected,
    }
    return _Wave(model, rank, occurred, row)


def _estimate(item: Any, index: int) -> tuple[str, dict[str, int], int, int]:
    where = f"replay.memory_replay.estimates[{index}]."
    if not isinstance(item, dict):
        raise _malformed(f"{where[:-1]} must be an object.")
    signature = item.get("signature")
    if isinstance(signature, str) and signature:
        key = signature
    elif isinstance(signature, dict):
        canonical = json.dumps(signature, sort_keys=True, separators=(",", ":"))
        key = "art:" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
    else:
        raise _malformed(
            f"{where}signature must be an object or a string; got {_short(signature)}."
        )
    arguments = item.get("arguments")
    if not isinstance(arguments, dict):
        raise _malformed(f"{where}arguments must be an object; got {_short(arguments)}.")
    values: dict[str, int] = {}
    for name in ("packed_tokens", "logical_tokens", "output_bytes"):
        value = _integer(arguments, name, where=f"{where}arguments.")
        assert value is not None
        values[name] = value
    if values["packed_tokens"] == 0:
        raise _malformed(f"{where}arguments.packed_tokens is 0; a wave has at least one token.")
    if values["logical_tokens"] < values["packed_tokens"]:
        raise _malformed(f"{where}arguments.logical_tokens is below packed_tokens.")
    expected = _integer(item, "expected_required_bytes", where=where)
    assert expected is not None
    return key, values, index, expected


def report_files(directory: Path) -> list[Path]:
    """Every ``*.json`` entry directly in ``directory``, sorted by name."""
    if not directory.is_dir():
        problem = not_regular(directory) or "is a file"
        raise TraceError(
            f"{problem}; name the directory of ART's planner-miss reports "
            "(art-planner-misses-UID-PID under the temporary folder, or where your sink puts them).",
            path=directory,
        )
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(".json"))
    except OSError as exc:
        raise TraceError(f"cannot be listed ({exc.strerror or exc}).", path=directory) from None


def import_misses(directory: str | Path) -> Misses:
    """Read every report of ``directory``; the readings of those that can be read."""
    import polars as pl

    directory = Path(directory)
    files = report_files(directory)
    if not files:
        raise TraceError(
            "holds no *.json report; ART writes one <id>.json per planner miss.", path=directory
        )
    waves: list[_Wave] = []
    refused: list[Refused] = []
    digests: list[str] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            record, raw = _load(path)
            wave = _wave(record)
            first = seen.setdefault(str(record["id"]), path)
            if first != path:
                raise _malformed(f"repeats the id of {first.name}.")
        except _Refused as refusal:
            refused.append(Refused(path, refusal.reason, refusal.problem))
            continue
        digests.append(f"{hashlib.sha256(raw).hexdigest()}  {path.name}\n")
        waves.append(wave)
    waves.sort(key=lambda w: (w.model, w.rank, w.occurred, str(w.row["art_report_id"])))
    readings: list[dict[str, object]] = []
    counters: dict[tuple[str, int], int] = {}
    for wave in waves:
        index = counters.get((wave.model, wave.rank), 0)
        counters[(wave.model, wave.rank)] = index + 1
        readings.append(
            {
                "run": wave.model,
                "rank": wave.rank,
                "seq": index,
                "step": None,
                "wave": index,
                "kind": "flat",
                "phase": "caller",
                "whole": False,
                "baseline_bytes": 0,
                "static_floor_bytes": None,
            }
            | wave.row
        )
    schema: dict[str, Any] = {
        "run": pl.String,
        "rank": pl.Int64,
        "seq": pl.Int64,
        "step": pl.Int64,
        "wave": pl.Int64,
        "signature": pl.String,
        "kind": pl.String,
        "phase": pl.String,
        "whole": pl.Boolean,
        "packed_tokens": pl.Int64,
        "logical_tokens": pl.Int64,
        "output_bytes": pl.Int64,
        "baseline_bytes": pl.Int64,
        "peak_bytes": pl.Int64,
        "static_floor_bytes": pl.Int64,
        "oom": pl.Boolean,
        "estimate_bytes": pl.Int64,
    }
    types = {"text": pl.String, "float": pl.Float64, "int": pl.Int64}
    schema |= {name: types[kind] for name, kind in EXTRAS.items()}
    frame = pl.DataFrame(readings, schema=schema)
    metadata = {
        "warmfit.provenance": "ART planner-miss reports (OpenPipe/ART, "
        "ART_TRAINER_RANK_PLANNER_MISS_THRESHOLD_PCT), one wave per report, imported by "
        "warmfit import art-misses; waves ART's threshold let through only, and no whole reading",
        "warmfit.import.source": directory.name,
        "warmfit.import.source_sha256": hashlib.sha256("".join(digests).encode()).hexdigest(),
        "warmfit.import.reports": str(len(waves)),
    }
    return Misses(frame, metadata, imported=len(waves), refused=refused)
