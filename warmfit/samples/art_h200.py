"""Real H200 measurements as a trace: ART's recompute-memory calibration.

``traces/art-h200`` is built from the 45 rows of OpenPipe/ART's final
recompute-memory campaign (``traces/art-h200/source/``, Apache-2.0, rows
selected by ``phase == "final"``). Each row is one configuration (model,
parallelism, compiled or eager, recomputed modules) and one shape (a packed
batch of sequences); each shape ran twice in a fresh process per
configuration: sample 0 *cold* (first-execution compilation and autotuning
included), sample 1 *warm*. Every byte column is allocated bytes above the
pre-forward baseline, the maximum over ranks.

How rows become readings (every number can be checked against the CSV):

- **one run per configuration**, labelled by what differs between them
  (:func:`run_label`), one signature per run (the model), rank 0 (the CSV
  gives maxima over ranks), baseline 0 (the CSV's bytes are above it);
- **shapes smallest first** (packed, then logical tokens): the CSV lists a
  configuration's shapes sorted by their text (``10240+10240`` before
  ``128+128``), not in the order they ran, so the order is the one a
  trainer warming up meets;
- per shape **two flat waves, cold then warm**, each with a ``forward``
  reading and a whole ``caller`` reading:

  ============  ================================  =====================================
  wave          forward reading                   caller reading (whole)
  ============  ================================  =====================================
  cold (0)      ``first_forward_peak_max_bytes``  ``forward_backward_peak_max_bytes``
  warm (1)      ``repeat_forward_peak_max_bytes`` ``repeat_forward_peak_max_bytes``
                                                  + (``forward_backward_peak_max_bytes``
                                                  - ``forward_peak_max_bytes``)
  ============  ================================  =====================================

  The campaign publishes one forward+backward peak, the larger of the two
  samples. The cold wave takes it; the warm wave takes its own measured
  forward peak plus the same rise from forward to backward. That value lies
  between two measured bounds, the warm forward peak and the published
  maximum; giving the warm wave the maximum itself would make every warm
  wave exactly as expensive as its cold twin.
- a row that ART's admission **refused** (blank measurements,
  ``refused_rank_samples > 0``) never ran and gives no reading;
- outputs 0 and no static floor: ART's own analytic estimate for the shape
  and the usable budget travel as the extra columns ``art_estimate_bytes``
  and ``art_available_bytes`` (on every reading of the wave) for comparison,
  but price nothing.

The same readings come in two arrangements, one file each (:data:`FILES`):

- ``ascending`` (``recompute_memory_final.parquet``, as first shipped): run
  labels as :func:`run_label` gives them, shapes smallest first;
- ``shuffled`` (``shuffled.parquet``): run labels prefixed ``shuffled/``,
  each run's shapes in a fixed shuffled order (:func:`shuffled_order`, seeded
  by the CRC-32 of the prefixed label), each shape's cold wave still just
  before its warm one. Only the order of the shapes, and so ``wave``,
  ``step`` and ``seq``, differs: every reading is the same.

Both orders are arrangements: the campaign did not record the order its
shapes ran in.

Regenerate both byte-identically with ``make traces`` (``python -m
warmfit.samples.art_h200 traces/art-h200/source/recompute_memory_final.csv
traces/art-h200``).
"""

from __future__ import annotations

import csv
import zlib
from pathlib import Path
from typing import TypeVar

import numpy as np
import polars as pl

from warmfit.format.trace import write_trace

#: The columns that tell configurations apart, in the order labels name them.
CONFIGURATION = (
    "model",
    "tp",
    "ep",
    "etp",
    "compiled",
    "mode",
    "modules",
    "concentrated_routing",
    "memory_minimal",
)

#: The campaign's rows as copied into the repository, with their notice.
SOURCE = "traces/art-h200/source/recompute_memory_final.csv"

METADATA = {
    "warmfit.provenance": "real H200 measurements: OpenPipe/ART "
    "dev/trainer_rank_recompute_memory.csv at 40cb87b7d477dff7ed1cf9ab31ccddc865857a4b, "
    "rows with phase == final (Apache-2.0, Copyright 2025 OpenPipe, Inc.); arranged into "
    "waves by warmfit.samples.art_h200 (see traces/art-h200/README.md)",
    "warmfit.device": "NVIDIA H200, PyTorch 2.11.0+cu128, CUDA 12.8, bf16, LoRA",
}


#: The arrangements of a run's sizes: smallest first, or in a fixed shuffled order.
ARRANGEMENTS = ("ascending", "shuffled")

#: The file each arrangement is written to (the ascending one keeps its first name).
FILES = {"ascending": "recompute_memory_final.parquet", "shuffled": "shuffled.parquet"}

#: What a shuffled file's metadata says of its order (the ascending file, as
#: first shipped, carries :data:`METADATA` alone).
SHUFFLED = (
    "run labels prefixed shuffled/; each run's sizes in a fixed shuffled order, "
    "numpy.random.default_rng(zlib.crc32(run label as UTF-8)).permutation(number of sizes)"
)

Item = TypeVar("Item")


def shuffled_order(label: str, count: int) -> list[int]:
    """A fixed permutation of ``range(count)``, seeded by the CRC-32 of ``label``.

    The seed is the same in every process and Python version (``hash()`` is
    not); the permutation is numpy's ``Generator.permutation`` on PCG64.

    >>> shuffled_order("shuffled/qwen3.5-4b-tp2-compiled-core_attn+mlp", 5)
    [1, 3, 2, 0, 4]
    """
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    return [int(i) for i in rng.permutation(count)]


def arrange(items: list[Item], label: str, arrangement: str) -> list[Item]:
    """``items``, sorted smallest first, in ``arrangement``'s order for the run ``label``.

    >>> arrange([10, 20, 30, 40], "shuffled/x", "ascending")
    [10, 20, 30, 40]
    >>> sorted(arrange([10, 20, 30, 40], "shuffled/x", "shuffled"))
    [10, 20, 30, 40]
    """
    if arrangement not in ARRANGEMENTS:
        raise ValueError(f"unknown arrangement {arrangement!r}: one of {', '.join(ARRANGEMENTS)}")
    if arrangement == "ascending":
        return list(items)
    return [items[i] for i in shuffled_order(label, len(items))]


def run_label(row: dict[str, str]) -> str:
    """A configuration's run label: model, parallelism, compile, recompute.

    >>> run_label({"model": "Qwen/Qwen3.5-35B-A3B", "tp": "4", "ep": "4", "etp": "1",
    ...            "compiled": "False", "mode": "selective", "modules": "core_attn+moe",
    ...            "concentrated_routing": "True", "memory_minimal": "False"})
    'qwen3.5-35b-a3b-tp4-ep4-eager-core_attn+moe-concentrated'
    """
    parts = [row["model"].rpartition("/")[2].lower(), f"tp{row['tp']}"]
    parts += [f"{key}{row[key]}" for key in ("ep", "etp") if row[key] != "1"]
    parts.append("compiled" if row["compiled"] == "True" else "eager")
    if row["mode"] != "selective":
        parts.append(row["mode"])
    parts.append(row["modules"])
    if row["concentrated_routing"] == "True":
        parts.append("concentrated")
    if row["memory_minimal"] == "True":
        parts.append("minimal")
    return "-".join(parts)


def art_h200_readings(source: Path, arrangement: str = "ascending") -> pl.DataFrame:
    """The readings of every configuration that ran, as a v1 frame with two extra columns.

    ``arrangement`` orders each run's shapes (:data:`ARRANGEMENTS`); ``shuffled``
    also prefixes its run labels with ``shuffled/``.
    """
    with source.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["phase"] == "final"]
    runs: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        if int(row["refused_rank_samples"]) > 0:
            continue  # refused by admission: it never ran
        runs.setdefault(run_label(row), []).append(row)
    readings: list[dict[str, object]] = []
    for run in sorted(runs):
        label = run if arrangement == "ascending" else f"{arrangement}/{run}"
        smallest_first = sorted(
            runs[run], key=lambda r: (int(r["packed_tokens"]), int(r["logical_tokens"]))
        )
        shapes = arrange(smallest_first, label, arrangement)
        seq = 0
        for index, row in enumerate(shapes):
            rise = int(row["forward_backward_peak_max_bytes"]) - int(row["forward_peak_max_bytes"])
            cold_forward = int(row["first_forward_peak_max_bytes"])
            warm_forward = int(row["repeat_forward_peak_max_bytes"])
            samples = (
                (cold_forward, int(row["forward_backward_peak_max_bytes"])),
                (warm_forward, warm_forward + rise),
            )
            for sample, (forward_peak, caller_peak) in enumerate(samples):
                wave = {
                    "run": label,
                    "rank": 0,
                    "step": index,
                    "wave": 2 * index + sample,
                    "signature": row["model"],
                    "kind": "flat",
                    "packed_tokens": int(row["packed_tokens"]),
                    "logical_tokens": int(row["logical_tokens"]),
                    "output_bytes": 0,
                    "baseline_bytes": 0,
                    "static_floor_bytes": None,
                    "oom": False,
                    "art_estimate_bytes": int(row["estimate_bytes"]),
                    "art_available_bytes": int(row["available_min_bytes"]),
                }
                for phase, peak in (("forward", forward_peak), ("caller", caller_peak)):
                    readings.append(
                        wave
                        | {"seq": seq, "phase": phase, "whole": phase == "caller"}
                        | {"peak_bytes": peak}
                    )
                    seq += 1
    return pl.DataFrame(readings)


def write_art_h200(source: Path, directory: Path, arrangement: str = "ascending") -> Path:
    """Write ``arrangement``'s file (:data:`FILES`) into ``directory``."""
    readings = art_h200_readings(source, arrangement)
    metadata = METADATA if arrangement == "ascending" else METADATA | {"warmfit.order": SHUFFLED}
    return write_trace(readings, directory / FILES[arrangement], metadata)


def converter_arguments(
    prog: str, description: str, source: str, target: str, argv: list[str] | None = None
) -> tuple[Path, Path]:
    """The ``SOURCE`` CSV and ``TARGET`` folder of a converter's command line (``--help``
    answered, a missing source refused with exit 2 before anything is written)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("source", nargs="?", default=source, help=f"the CSV (default {source})")
    parser.add_argument(
        "target", nargs="?", default=target, help=f"the trace folder to write (default {target})"
    )
    args = parser.parse_args(argv)
    if not Path(args.source).is_file():
        parser.error(f"{args.source}: no such file; give the published CSV as SOURCE.")
    return Path(args.source), Path(args.target)


if __name__ == "__main__":
    source, target = converter_arguments(
        "python -m warmfit.samples.art_h200",
        "Write traces/art-h200 (both arrangements) from ART's recompute-memory CSV.",
        SOURCE,
        "traces/art-h200",
    )
    for arrangement in ARRANGEMENTS:
        print(f"wrote {write_art_h200(source, target, arrangement)}")
