"""Render a replay summary for people (table, markdown) and machines (csv, json).

Every renderer takes the plain summary frame of :func:`warmfit.replay.summarize`
and returns text; none of them computes a figure. :func:`summary_report` and
:func:`sweep_report` make them a :class:`~warmfit.report.formats.Report`, which
:func:`warmfit.report.formats.render` shows in a format.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import polars as pl

from warmfit.replay import RECORDED, ReplayResult, group_keys
from warmfit.replay.stream import StreamedReplay
from warmfit.report.formats import FORMATS as ALL_FORMATS
from warmfit.report.formats import Report, csv_text, json_text
from warmfit.report.formats import render as render_report
from warmfit.report.sweep import JSON_SCHEMA as SWEEP_JSON_SCHEMA
from warmfit.report.sweep import SweepResult
from warmfit.show.names import markdown_cell, printable, waves_under
from warmfit.show.units import format_bytes

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

FORMATS = ALL_FORMATS
JSON_SCHEMA = "warmfit.replay/1"


def percent(fraction: float | None, digits: int = 0) -> str:
    """A signed percentage, ``—`` for a missing figure.

    >>> percent(0.16), percent(-0.031, 1), percent(None)
    ('+16%', '-3.1%', '—')
    """
    if fraction is None:
        return "—"
    return f"{fraction * 100:+.{digits}f}%"


def to_json(summary: pl.DataFrame, safety_factor: float) -> str:
    """The SPEC §5 JSON object: schema, safety factor and one result per row
    (with §7's ``signature`` and budget fields when the summary has them)."""
    return json_text(_document(summary, safety_factor))


def _document(summary: pl.DataFrame, safety_factor: float) -> dict[str, Any]:
    return {"schema": JSON_SCHEMA, "safety_factor": safety_factor, "results": summary.to_dicts()}


def to_csv(summary: pl.DataFrame) -> str:
    """One header line and one line per result; nulls are empty."""
    return csv_text(summary.columns, summary.iter_rows())


def _under_peak_cell(rows: Sequence[dict[str, object]]) -> str:
    """ "0 of 25" when every policy agrees, else one count per policy."""
    counts = {(r["under_peak"], r["priced_waves"]) for r in rows}
    if len(counts) == 1:
        under, total = counts.pop()
        return f"{under} of {total}"
    return ", ".join(
        f"{markdown_cell(str(r['policy']))} {r['under_peak']} of {r['priced_waves']}" for r in rows
    )


def _beyond_cell(rows: Sequence[dict[str, object]]) -> str:
    """Waves under their peak among those priced beyond the seen range (SPEC §8), as
    :func:`_under_peak_cell` gives them: "0 of 12", or one count per policy."""
    return _under_peak_cell(
        [
            {
                "policy": r["policy"],
                "under_peak": r["under_peak_beyond"],
                "priced_waves": r["priced_beyond"],
            }
            for r in rows
        ]
    )


def _keys(summary: pl.DataFrame) -> list[str]:
    """The columns that name a result: ``run``, and ``signature`` with ``--by signature``."""
    return [k for k in ("run", "signature") if k in summary.columns]


def overall(summary: pl.DataFrame) -> pl.DataFrame | None:
    """Per policy, the results taken together (None for a single result): waves, under
    their peak and beyond the seen range summed; ``median_over_estimate`` the median of
    the results' medians and ``min_over_estimate`` the least of their minima. The key
    columns hold ``all N runs`` (or ``results``, by signature) and nulls.

    >>> frame = pl.DataFrame({"run": ["a", "b", "c"], "policy": ["p"] * 3,
    ...     "priced_waves": [2, 3, 4], "median_over_estimate": [0.1, 0.5, 0.2],
    ...     "min_over_estimate": [0.0, 0.1, -0.1], "under_peak": [0, 1, 1],
    ...     "priced_beyond": [1, 1, 2], "under_peak_beyond": [0, 1, 0]})
    >>> overall(frame).row(0)
    ('all 3 runs', 'p', 9, 0.2, -0.1, 2, 4, 1)
    """
    keys = _keys(summary)
    groups = summary.select(keys).n_unique()
    if groups < 2:
        return None
    label = f"all {groups} {'runs' if keys == ['run'] else 'results'}"
    totals = summary.group_by("policy", maintain_order=True).agg(
        pl.col("priced_waves").sum(),
        pl.col("median_over_estimate").median(),
        pl.col("min_over_estimate").min(),
        pl.col("under_peak").sum(),
        pl.col("priced_beyond").sum(),
        pl.col("under_peak_beyond").sum(),
    )
    names = [pl.lit(label).alias(keys[0]), *[pl.lit(None, pl.String).alias(k) for k in keys[1:]]]
    return totals.select(*names, pl.all())


def to_markdown(summary: pl.DataFrame, policies: Sequence[str]) -> str:
    """The table of ART PR #991: rows are runs (and signatures); per policy the
    median over-estimate with its min; then waves under their peak ("0 of 25")."""
    keys = _keys(summary)
    header = [
        *keys,
        *[f"{markdown_cell(p)} median (min)" for p in policies],
        "waves under their peak",
        "under beyond the seen range",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    together = overall(summary)
    blocks = list(summary.group_by(keys, maintain_order=True))
    if together is not None:  # the results taken together, last, in bold
        blocks.append(((f"**{together.item(0, 0)}**", *[""] * (len(keys) - 1)), together))
    for names, group in blocks:
        rows = group.to_dicts()
        by_policy = {r["policy"]: r for r in rows}
        cells = [markdown_cell(str(name)) if name is not None else "" for name in names]
        for p in policies:
            r = by_policy[p]
            if r["median_over_estimate"] is None:
                cells.append("—")
            else:
                cells.append(
                    f"{percent(r['median_over_estimate'])} ({percent(r['min_over_estimate'])})"
                )
        cells.append(_under_peak_cell(rows))
        cells.append(_beyond_cell(rows))
        lines.append("| " + " | ".join(cells) + " |")
    if "budget_bytes" in summary.columns:  # this table has no room for them: say so
        lines += ["", "The budget's counts are in --format table, csv and json."]
    if "permutations" in summary.columns:
        lines += ["", "The figures across --permute orders are in --format table, csv and json."]
    if together is not None:
        lines += [
            "",
            f"{together.item(0, 0).capitalize()}: the median of their medians (the "
            "least of their minima); waves counted over all of them.",
        ]
    return "\n".join(lines) + "\n"


def table_text(table: Table) -> str:
    """A rich table as plain text, never breaking a cell across lines.

    The table is laid out for the terminal's width (``COLUMNS``, else the
    terminal's, else 80), widened to the table's natural width when that is
    larger: a long label makes the table wider than a narrow terminal rather
    than fold. Trailing spaces are dropped.
    """
    from rich.console import Console

    def console(width: int) -> Console:
        # force_jupyter=False: inside a notebook rich would display the table itself
        # and leave the string empty.
        return Console(
            file=io.StringIO(),
            width=width,
            color_system=None,
            highlight=False,
            force_jupyter=False,
            force_terminal=False,
        )

    natural = console(100_000).measure(table).maximum
    out = console(max(shutil.get_terminal_size((80, 24)).columns, natural))
    out.print(table)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def plain_table(caption: str) -> Table:
    """The look of every warmfit table: a rule under the header, no frame, a caption below."""
    from rich import box
    from rich.table import Table

    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
        caption=caption,
        caption_justify="left",
    )


def cell(name: object) -> Text:
    """A table cell showing ``name`` literally: no rich markup, control characters escaped."""
    from rich.text import Text

    return Text(printable(str(name)))


def to_table(summary: pl.DataFrame, safety_factor: float) -> str:
    """A compact table for a terminal; labels never break across lines."""

    keys = _keys(summary)
    budget = "budget_bytes" in summary.columns
    caption = (
        f"over-estimate = estimate / actual - 1 (safety factor {safety_factor:g}); "
        "under = waves priced below their peak; beyond = of the waves priced beyond every "
        "size their profile had seen, those under their peak / all; "
    )
    if budget:  # the columns of a budget add up: waves = admitted + refused
        caption += (
            f"excess = median estimate - actual; with a budget of "
            f"{format_bytes(summary.get_column('budget_bytes')[0])}: admitted = estimate within "
            "it, refused = the others, fits = refused although the wave fits, ooms = admitted "
            "although it did not; waves that ran out of memory are not in the figures"
        )
    else:
        caption += (
            "set by = waves set by the profile / by the floor; oom = waves that ran out of "
            "memory (not in the figures)"
        )
    orders = "permutations" in summary.columns
    if RECORDED in summary.get_column("policy"):
        caption += (
            f"; {RECORDED} = the prices the trainer itself used (the trace's estimate_bytes), "
            "which the safety factor does not scale"
        )
    if summary.select(keys).n_unique() > 1:
        caption += (
            "; all = the results taken together: waves summed, the median of their medians, "
            "the least of their minima"
        )
    if orders and summary.height:
        caption += (
            f"; across {summary.get_column('permutations')[0]} random orders of each run's "
            "waves: orders under = waves under their peak, mean / worst; orders median = the "
            "median of the median over-estimates"
        )
    table = plain_table(caption)
    for key in keys:
        table.add_column(key, no_wrap=True, min_width=3)
    table.add_column("policy", no_wrap=True)
    figures = ["waves", "median", "min", "max", "under", "beyond", "set by", "oom"]
    if budget:
        figures = [
            "waves", "median", "max", "under", "beyond", "excess", "admitted", "refused", "fits",
            "ooms",
        ]  # fmt: skip
    if orders:
        figures += ["orders under", "orders median"]
    for name in figures:
        table.add_column(name, justify="right", no_wrap=True)
    previous = None
    for r in summary.iter_rows(named=True):
        names = tuple(r[k] for k in keys)
        shown = [""] * len(keys) if names == previous else [cell(n) for n in names]
        cells = _table_cells(r)
        table.add_row(*shown, cell(r["policy"]), *[cells[name] for name in figures])
        previous = names
    together = overall(summary)
    if together is not None:  # the results taken together (see overall())
        table.add_section()
        for i, r in enumerate(together.iter_rows(named=True)):
            label = [cell(r[keys[0]]) if i == 0 else "", *[""] * (len(keys) - 1)]
            cells = _table_cells(r)
            table.add_row(*label, cell(r["policy"]), *[cells.get(name, "") for name in figures])
    return table_text(table)


def _table_cells(r: dict[str, Any]) -> dict[str, str]:
    """A result's cells in :func:`to_table`, by column; a row of :func:`overall` has the
    first five only."""
    cells = {
        "waves": str(r["priced_waves"]),
        "median": percent(r["median_over_estimate"], 1),
        "min": percent(r["min_over_estimate"], 1),
        "under": str(r["under_peak"]),
        "beyond": f"{r['under_peak_beyond']}/{r['priced_beyond']}",
    }
    if "max_over_estimate" in r:  # one result's own row
        cells |= {
            "max": percent(r["max_over_estimate"], 1),
            "set by": f"{r['set_by_profile']}/{r['set_by_floor']}",
            "oom": str(r["oom_waves"]),
            "excess": format_bytes(r["median_excess_bytes"]),
            "admitted": str(r.get("admitted")),
            "refused": str(r["priced_waves"] - (r.get("admitted") or 0)),
            "fits": str(r.get("refused_fit")),
            "ooms": str(r.get("admitted_oom")),
        }
    if "under_peak_mean" in r:  # with --permute
        mean = r["under_peak_mean"]
        cells["orders under"] = "—" if mean is None else f"{mean:.1f}/{r['under_peak_worst']}"
        cells["orders median"] = percent(r["median_over_estimate_median"], 1)
    return cells


def summary_report(result: ReplayResult | StreamedReplay) -> Report:
    """A replay's summary as a :class:`~warmfit.report.formats.Report`."""
    summary = result.summary
    return Report(
        table=lambda: to_table(summary, result.safety_factor),
        header=summary.columns,
        rows=summary.iter_rows,
        document=lambda: _document(summary, result.safety_factor),
        markdown=lambda: to_markdown(summary, result.policies),
    )


def render(result: ReplayResult | StreamedReplay, fmt: str) -> str:
    """Render a replay result in one of :data:`FORMATS`."""
    return render_report(summary_report(result), fmt)


def under_peak_warnings(summary: pl.DataFrame, safe: dict[str, float | None]) -> list[str]:
    """One line per policy that put any wave under its peak: how many, how many of those
    were beyond every size their profile had seen (SPEC §8), and the smallest safety
    factor that puts none under on these traces (``safe``, exact; None: no factor can).
    For ``recorded``, the trainer's own prices, which no safety factor scales: what
    those waves mean instead."""
    totals = (
        summary.group_by("policy", maintain_order=True)
        .agg(pl.col("under_peak").sum(), pl.col("under_peak_beyond").sum())
        .filter(pl.col("under_peak") > 0)
    )
    lines = []
    for policy, under, beyond in totals.iter_rows():
        factor = safe.get(policy)
        fix = (
            "the trainer's own prices (the trace's estimate_bytes, which no safety factor "
            "scales) would have run out of memory there"
            if policy == RECORDED
            else "no safety factor covers them (a wave was priced at 0 bytes)"
            if factor is None
            else f"the smallest safety factor that puts none under on these traces is "
            f"{factor:.4f} (exactly {factor!r})"
        )
        lines.append(
            f"warning: {printable(policy)} put {waves_under(under)}, {beyond} of them beyond "
            f"every size its profile had seen; {fix}."
        )
    return lines


# --------------------------------------------------------------------------- sweep


def sweep_report(result: SweepResult) -> Report:
    """A safety-factor sweep as a :class:`~warmfit.report.formats.Report`: json with every
    grid point, csv, markdown or table."""
    keys = group_keys(result.by)
    columns = [*keys, "policy", "safe_factor", "median_over_estimate_at_safe", "under_peak_at_1"]
    header = [*keys, "policy", "safe factor", "median at safe", "under at 1.0"]
    rows = [
        [
            *[str(row[k]) for k in keys],
            str(row["policy"]),
            "—" if row["safe_factor"] is None else f"{row['safe_factor']:#.6g}",
            percent(row["median_over_estimate_at_safe"], 1),  # type: ignore[arg-type]
            str(row["under_peak_at_1"]),
        ]
        for row in result.results
    ]

    def markdown() -> str:
        lines = ["| " + " | ".join(markdown_cell(h) for h in header) + " |"]
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(markdown_cell(c) for c in cells) + " |" for cells in rows]
        return "\n".join(lines) + "\n"

    def table() -> str:
        shown = plain_table(
            "safe factor = the smallest safety factor with no wave under its peak (exact); "
            "median at safe = the median over-estimate there; under at 1.0 = waves under "
            "their peak with no safety margin"
        )
        for i, name in enumerate(header):
            shown.add_column(name, no_wrap=True, justify="left" if i <= len(keys) else "right")
        previous: tuple[str, ...] | None = None
        for cells in rows:
            names = tuple(cells[: len(keys)])
            first = [""] * len(keys) if names == previous else [cell(n) for n in names]
            shown.add_row(*first, cell(cells[len(keys)]), *cells[len(keys) + 1 :])
            previous = names
        return table_text(shown)

    return Report(
        table=table,
        header=columns,
        rows=lambda: ([row[c] for c in columns] for row in result.results),
        document=lambda: {"schema": SWEEP_JSON_SCHEMA, "results": result.results},
        markdown=markdown,
    )


def render_sweep(result: SweepResult, fmt: str) -> str:
    """Render a safety-factor sweep: json (with every grid point), csv, markdown or table."""
    return render_report(sweep_report(result), fmt)
