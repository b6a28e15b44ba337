"""Real GPU memory curves as a trace: Liger-Kernel's published benchmarks.

``traces/liger-gpu`` is built from linkedin/Liger-Kernel's
``benchmark/data/all_benchmark_data.csv`` (``traces/liger-gpu/source/``,
BSD-2-Clause, unchanged). Each of its rows is one benchmark point: a kernel
(``kernel_name``) from one implementation (``kernel_provider``), in one mode
(``kernel_operation_mode``: ``forward``, ``backward`` or ``full``), on one GPU
(``gpu_name``), with the other dimensions fixed (``extra_benchmark_config_str``),
at one value ``x_value`` of the swept dimension ``x_name``. Its memory rows give
``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()``, around
one call of the kernel, in MB (2**20 bytes): **the kernel's inputs and weights,
already allocated, are inside that peak**; there is no separate baseline.

How rows become readings (every number can be checked against the CSV):

- **rows used**: ``metric_name == "memory"`` and ``x_name`` a token count
  (:data:`TOKEN_AXES`: ``T``, ``BT``, ``seq_len``, ``L``, ``num_tokens``);
- **one run per series**, a series being the rows that share kernel, provider,
  mode, GPU, config and ``x_name`` (:data:`SERIES`): a measured curve of peak
  memory against tokens. Its label (:func:`series_label`) names the kernel,
  provider, mode, GPU and, for a kernel benchmarked in several configs, the
  config keys, chosen greedily, that tell them apart (:func:`config_shorts`). One
  signature per run (the kernel), rank 0;
- **one wave per size**: a ``flat`` wave with one whole ``caller`` reading;
  ``packed_tokens`` = ``logical_tokens`` = ``x_value``; ``peak_bytes`` =
  ``round(y_value_50 * 2**20)`` (exact: every value is a whole number of bytes);
  ``baseline_bytes`` 0, since the peak includes the kernel's inputs and weights;
  ``output_bytes`` 0, no static floor, ``oom`` false;
- **a series holds each size once**: the published file has no series with two
  rows at one ``x_value`` (no repeated timestamps or Liger versions); a source
  that had one is refused with an error naming it, rather than one row being
  picked silently;
- the median, 20th and 80th percentiles are equal on every memory row, so only
  the median is used; the extra columns ``kernel``, ``provider``, ``mode``,
  ``gpu`` (the full name), ``config`` (the JSON), ``x_name`` and
  ``liger_version`` carry the series' identity and price nothing.

Each series appears twice, one file per arrangement
(:data:`warmfit.samples.art_h200.ARRANGEMENTS`): ``ascending.parquet`` with sizes
smallest first, run labels prefixed ``ascending/``, and ``shuffled.parquet``
with sizes in a fixed shuffled order (:func:`warmfit.samples.art_h200.shuffled_order`,
seeded by the CRC-32 of the run label), run labels prefixed ``shuffled/``.
Both orders are arrangements: each point was measured alone, and the CSV
does not say in which order.

Regenerate both byte-identically with ``make traces`` (``python -m
warmfit.samples.liger_gpu traces/liger-gpu/source/all_benchmark_data.csv
traces/liger-gpu``).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import polars as pl

from warmfit.format.trace import write_trace
from warmfit.samples.art_h200 import ARRANGEMENTS, SHUFFLED, arrange, converter_arguments

#: The swept dimensions that count tokens (sequence length, batch x tokens, tokens).
TOKEN_AXES = ("T", "BT", "seq_len", "L", "num_tokens")

#: The columns that make a series (one run), in the order labels name them.
SERIES = (
    "kernel_name",
    "kernel_provider",
    "kernel_operation_mode",
    "gpu_name",
    "extra_benchmark_config_str",
    "x_name",
)

#: MB in the CSV's memory rows (``metric_unit`` MB) is 2**20 bytes.
MB = 2**20

#: The benchmark rows as copied into the repository, with their licence.
SOURCE = "traces/liger-gpu/source/all_benchmark_data.csv"

METADATA = {
    "warmfit.provenance": "real GPU measurements: linkedin/Liger-Kernel "
    "benchmark/data/all_benchmark_data.csv at 2120862ba532c9449e72d603ba6324310ae756e7, "
    "rows with metric_name == memory and a token-count x_name (BSD-2-Clause, Copyright "
    "2024 LinkedIn Corporation); peaks include the kernel's inputs and weights; arranged "
    "into waves by warmfit.samples.liger_gpu (see traces/liger-gpu/README.md)",
    "warmfit.device": "NVIDIA A100-SXM4-80GB, H100 80GB HBM3, B200, GeForce RTX 3090 and "
    "GeForce RTX 4090 (one per run: the gpu column)",
}

#: What each file's metadata says of its order.
ORDERS = {
    "ascending": "run labels prefixed ascending/; each run's sizes smallest first",
    "shuffled": SHUFFLED,
}

#: A label is kept to characters that TOML quotes without escapes.
_LABEL = re.compile(r"^[A-Za-z0-9_.+/-]+$")


def gpu_short(gpu_name: str) -> str:
    """A GPU's model, lower case, for labels.

    >>> [gpu_short(g) for g in ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090")]
    ['h100', 'rtx4090']
    """
    found = re.search(r"RTX \d+|[A-Z]\d{2,}", gpu_name)
    if found is None:
        raise ValueError(f"no GPU model in {gpu_name!r}")
    return found.group().replace(" ", "").lower()


def config_shorts(configs: list[str]) -> dict[str, str]:
    """Short names for one kernel's configs: a few keys that tell them apart, with values.

    Keys are taken greedily, the one that splits the configs into the most groups
    first (the earlier key on a tie), until every config has its own name; they
    are named in the configs' own order. The full config travels in the trace.

    >>> config_shorts(['{"B": 2, "H": 8, "K": 7}', '{"B": 2, "H": 16, "K": 9}'])
    {'{"B": 2, "H": 8, "K": 7}': 'H8', '{"B": 2, "H": 16, "K": 9}': 'H16'}
    >>> config_shorts(['{"B": 2}'])
    {'{"B": 2}': ''}
    """
    parsed = {text: json.loads(text) for text in configs}
    keys = list(dict.fromkeys(key for config in parsed.values() for key in config))

    def names(chosen: list[str]) -> int:
        return len({tuple(json.dumps(c.get(k)) for k in chosen) for c in parsed.values()})

    chosen: list[str] = []
    while names(chosen) < len(parsed):
        best = max((k for k in keys if k not in chosen), key=lambda k: names([*chosen, k]))
        if names([*chosen, best]) == names(chosen):
            raise ValueError(f"configs that no key tells apart: {configs}")
        chosen.append(best)
    chosen = [k for k in keys if k in chosen]
    return {
        text: "-".join(f"{key}{_value(config.get(key))}" for key in chosen)
        for text, config in parsed.items()
    }


def _value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def series_label(series: tuple[str, ...], config_short: str) -> str:
    """A series' label (without its arrangement's prefix).

    >>> series_label(("rope", "liger", "full", "NVIDIA A100-SXM4-80GB", "{}", "T"), "")
    'rope-liger-full-a100'
    """
    kernel, provider, mode, gpu = series[:4]
    parts = [kernel, provider, mode, gpu_short(gpu)] + ([config_short] if config_short else [])
    return "-".join(parts)


def liger_series(source: Path) -> dict[str, list[dict[str, str]]]:
    """The memory-versus-tokens series of the CSV, by label, each smallest first."""
    with source.open(newline="") as handle:
        rows = [
            row
            for row in csv.DictReader(handle)
            if row["metric_name"] == "memory" and row["x_name"] in TOKEN_AXES
        ]
    grouped: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        if row["metric_unit"] != "MB":
            raise ValueError(f"a memory row in {row['metric_unit']!r}, not MB: {row}")
        grouped.setdefault(tuple(row[c] for c in SERIES), []).append(row)
    configs: dict[str, set[str]] = {}
    for key in grouped:
        configs.setdefault(key[0], set()).add(key[4])
    shorts = {
        (kernel, text): short
        for kernel, texts in configs.items()
        for text, short in config_shorts(sorted(texts)).items()
    }
    series: dict[str, list[dict[str, str]]] = {}
    for key, points in grouped.items():
        label = series_label(key, shorts[(key[0], key[4])])
        if label in series or not _LABEL.match(label):
            raise ValueError(f"series {key} gives the label {label!r}, taken or not plain")
        sizes = [int(p["x_value"]) for p in points]
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"series {label} has two rows at one x_value: {sorted(sizes)}")
        series[label] = sorted(points, key=lambda p: int(p["x_value"]))
    return series


def liger_gpu_readings(source: Path, arrangement: str = "ascending") -> pl.DataFrame:
    """One whole caller reading per size of every series, in ``arrangement``'s order."""
    readings: list[dict[str, object]] = []
    for name, points in sorted(liger_series(source).items()):
        label = f"{arrangement}/{name}"
        for index, row in enumerate(arrange(points, label, arrangement)):
            tokens = int(row["x_value"])
            readings.append(
                {
                    "run": label,
                    "rank": 0,
                    "seq": index,
                    "step": index,
                    "wave": index,
                    "signature": row["kernel_name"],
                    "kind": "flat",
                    "phase": "caller",
                    "whole": True,
                    "packed_tokens": tokens,
                    "logical_tokens": tokens,
                    "output_bytes": 0,
                    "baseline_bytes": 0,
                    "peak_bytes": round(float(row["y_value_50"]) * MB),
                    "static_floor_bytes": None,
                    "oom": False,
                    "kernel": row["kernel_name"],
                    "provider": row["kernel_provider"],
                    "mode": row["kernel_operation_mode"],
                    "gpu": row["gpu_name"],
                    "config": row["extra_benchmark_config_str"],
                    "x_name": row["x_name"],
                    "liger_version": row["liger_version"],
                }
            )
    return pl.DataFrame(readings)


def write_liger_gpu(source: Path, directory: Path, arrangement: str = "ascending") -> Path:
    """Write ``<arrangement>.parquet`` into ``directory``."""
    if arrangement not in ARRANGEMENTS:
        raise ValueError(f"unknown arrangement {arrangement!r}: one of {', '.join(ARRANGEMENTS)}")
    metadata = METADATA | {"warmfit.order": ORDERS[arrangement]}
    target = directory / f"{arrangement}.parquet"
    return write_trace(liger_gpu_readings(source, arrangement), target, metadata)


if __name__ == "__main__":
    source, target = converter_arguments(
        "python -m warmfit.samples.liger_gpu",
        "Write traces/liger-gpu (both orders) from Liger-Kernel's benchmark CSV.",
        SOURCE,
        "traces/liger-gpu",
    )
    for arrangement in ARRANGEMENTS:
        print(f"wrote {write_liger_gpu(source, target, arrangement)}")
