"""The command line end to end on small traces: outputs others rely on (SPEC §5)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.command_line import warmfit_stdout
from warmfit.cli import app
from warmfit.replay import PER_WAVE_SCHEMA, SUMMARY_COLUMNS

REPO = Path(__file__).resolve().parent.parent
PR991 = str(REPO / "traces/pr991")


def test_markdown_reads_like_the_pr_table() -> None:
    assert warmfit_stdout("replay", PR991, "--format", "markdown") == (
        "| run | max-merge median (min) | warm-fit median (min) | envelope median (min) "
        "| waves under their peak | under beyond the seen range |\n"
        "|---|---|---|---|---|---|\n"
        "| EP1 | +35% (+24%) | +16% (+9%) | +10% (+5%) | 0 of 25 | 0 of 5 |\n"
        "| EP2 | +43% (+14%) | +43% (+14%) | +43% (+14%) | 0 of 17 | 0 of 1 |\n"
        "| **all 2 runs** | +39% (+14%) | +29% (+9%) | +26% (+5%) | 0 of 42 | 0 of 6 |\n"
        "\n"
        "All 2 runs: the median of their medians (the least of their minima); waves counted "
        "over all of them.\n"
    )


def test_json_follows_the_spec() -> None:
    doc = json.loads(warmfit_stdout("replay", PR991, "-f", "json", "--safety", "1.1"))
    assert doc["schema"] == "warmfit.replay/1" and doc["safety_factor"] == 1.1
    assert [tuple(r) for r in doc["results"]] == [SUMMARY_COLUMNS] * 6  # 2 runs, 3 policies
    ep1_warm = doc["results"][1]
    assert (ep1_warm["run"], ep1_warm["policy"], ep1_warm["priced_waves"]) == (
        "EP1",
        "warm-fit",
        25,
    )
    assert isinstance(ep1_warm["median_over_estimate"], float)


def test_json_has_null_figures_for_a_run_without_priced_waves(tmp_path: Path) -> None:
    from warmfit.format.trace import readings_frame, write_trace

    write_trace(
        readings_frame(
            [dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)]
        ),
        tmp_path / "t.parquet",
    )
    doc = json.loads(warmfit_stdout("replay", str(tmp_path), "-f", "json", "-p", "max-merge"))
    assert doc["results"] == [
        {
            "run": "run", "policy": "max-merge", "priced_waves": 0,
            "median_over_estimate": None, "min_over_estimate": None, "max_over_estimate": None,
            "under_peak": 0, "set_by_profile": 0, "set_by_floor": 0, "oom_waves": 0,
            "median_excess_bytes": None, "priced_beyond": 0, "under_peak_beyond": 0,
        }
    ]  # fmt: skip


def test_csv_carries_the_same_figures_as_json() -> None:
    doc = json.loads(warmfit_stdout("replay", PR991, "-f", "json"))
    rows = list(csv.DictReader(io.StringIO(warmfit_stdout("replay", PR991, "-f", "csv"))))
    assert len(rows) == len(doc["results"])
    for row, result in zip(rows, doc["results"], strict=True):
        assert float(row["median_over_estimate"]) == result["median_over_estimate"]
        assert int(row["under_peak"]) == result["under_peak"]


def test_table_fits_an_80_column_terminal() -> None:
    out = warmfit_stdout("replay", PR991)
    assert "EP1" in out and "warm-fit" in out and "+15.8%" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_per_wave_parquet_follows_the_spec_and_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "waves.parquet"
    warmfit_stdout("replay", PR991, "--per-wave", str(target))
    per_wave = pl.read_parquet(target)
    assert per_wave.schema == pl.Schema(PER_WAVE_SCHEMA)
    assert per_wave.height == 3 * (26 + 17)  # every wave, thrice: one row per policy
    result = CliRunner().invoke(app, ["replay", PR991, "--per-wave", str(target)])
    assert (
        result.exit_code == 2 and f"will not overwrite without --force: {target}" in result.output
    )
    warmfit_stdout("replay", PR991, "--per-wave", str(target), "--force")


def test_a_user_policy_replays_by_module_and_class() -> None:
    out = warmfit_stdout("replay", PR991, "-p", "tests.example_policy:LastWhole", "-f", "csv")
    assert out.splitlines()[1].startswith("EP1,last-whole,25,")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["replay", PR991, "-p", "nope"], "unknown policy 'nope'"),
        (["replay", PR991, "--safety", "-1"], "--safety must be a positive number"),
        (["replay", PR991, "--format", "html"], "html"),
        (["replay"], "missing argument"),
    ],
)
def test_bad_usage_exits_2_with_a_message(args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert words in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["replay", PR991, "--format", "html"],
            "warmfit: error: replay: invalid value for '--format' / '-f': 'html' is not one of "
            "'table', 'markdown', 'csv', 'json'. See 'warmfit replay -h'.",
        ),
        (
            ["record", "true"],
            "warmfit: error: record: missing option '--output' / '-o'. See 'warmfit record -h'.",
        ),
        (
            ["plot", PR991],
            "warmfit: error: plot: missing option '--output' / '-o'. See 'warmfit plot -h'.",
        ),
        (
            ["replay", PR991, "--by"],
            "warmfit: error: replay: option '--by' requires an argument. See 'warmfit replay -h'.",
        ),
        (
            ["sweep", PR991, "--zzz"],
            "warmfit: error: sweep: no such option: --zzz. See 'warmfit sweep -h'.",
        ),
        (["nosuch"], "warmfit: error: no such command 'nosuch'. See 'warmfit -h'."),
        (
            ["check", PR991, "--format"],
            "warmfit: error: check: option '--format' requires an argument. "
            "See 'warmfit check -h'.",
        ),
    ],
)
def test_usage_errors_click_finds_are_one_line_like_warmfit_s_own(
    args: list[str], line: str
) -> None:
    """Issue 29 item 9: no box, no usage block; one line naming the command, exit 2."""
    result = CliRunner().invoke(app, args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", line + "\n")


def test_no_arguments_still_show_the_help() -> None:
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 2 and "Usage: warmfit [OPTIONS] COMMAND" in result.output


def test_validate_prints_a_summary() -> None:
    out = warmfit_stdout("validate", PR991)
    assert "valid warmfit trace (format v1)" in out
    counts = {
        line.split()[0]: int(line.split()[1].replace(",", "")) for line in out.splitlines()[1:7]
    }
    assert counts == {
        "files": 2,
        "runs": 2,
        "ranks": 2,
        "signatures": 2,
        "waves": 43,
        "readings": 86,
    }


def test_policies_lists_each_registered_policy_on_one_line() -> None:
    """Names padded to the longest (``warm-affine``, 11 characters), two spaces, summary."""
    assert warmfit_stdout("policies").splitlines() == [
        "max-merge    highest rate and sharing ever seen (before ART PR #991)",
        "warm-fit     max-merge lowered by a fit over the warm waves (ART PR #991)",
        "warm-affine  warm-fit lowered by a fixed cost + per-token rate over the warm waves",
        "envelope     interpolate between measured sizes, never below a smaller size's cost",
    ]


def test_every_command_has_a_one_line_help_and_an_example() -> None:
    group = __import__("typer").main.get_command(app)
    for name, command in group.commands.items():
        text = command.help or ""
        first, _, rest = text.partition("\n\n")
        assert first and "\n" not in first.strip(), name
        assert "Example: warmfit " + name in rest, name
        assert warmfit_stdout(name, "--help")


@pytest.mark.parametrize("make", ["dir", "parent-is-file"])
def test_an_unwritable_per_wave_target_is_a_usage_error(tmp_path: Path, make: str) -> None:
    target = tmp_path / "out"
    if make == "dir":
        target.mkdir()
    else:
        target.write_text("x")
        target = target / "waves.parquet"
    result = CliRunner().invoke(app, ["replay", PR991, "--per-wave", str(target), "--force"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert str(target) in result.output


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (":", "cannot load policy ':'"),
        ("warmfit.policies:Policy", "has no 'name'"),
        ("tests.example_policy:Abstract", "does not implement observe"),
    ],
)
def test_a_policy_spec_that_cannot_be_used_is_named(spec: str, words: str) -> None:
    result = CliRunner().invoke(app, ["replay", PR991, "-p", spec])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert words in result.output


def test_estimates_beyond_int64_are_refused_with_the_wave_named() -> None:
    result = CliRunner().invoke(app, ["replay", PR991, "--safety", "1e308"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "prices wave 1 (run 'EP1', rank 0) above 2**63 bytes" in result.output


def test_a_policy_module_in_the_current_directory_is_found(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "mypricing.py").write_text(
        (REPO / "tests/example_policy.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        # the console script, as a user runs it: it does not put the current directory
        # on sys.path by itself (python -c would)
        [str(Path(sys.executable).parent / "warmfit"), "replay", PR991,
         "-p", "mypricing:LastWhole", "-f", "csv"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "EP1,last-whole,25," in done.stdout


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["sweep", PR991, "--force"],
            "warmfit: error: --force overwrites the --plot file; give --plot FILE, or drop "
            "--force.",
        ),
        (
            ["replay", PR991, "--force"],
            "warmfit: error: --force overwrites the --per-wave file; give --per-wave FILE, or "
            "drop --force.",
        ),
        (
            ["check", PR991, "--expect", "traces/expectations.toml", "--force"],
            "warmfit: error: --force overwrites the --write-expect file; give --write-expect "
            "FILE, or drop --force.",
        ),
    ],
)
def test_force_without_an_output_is_refused(args: list[str], line: str) -> None:
    """Issue 29 item 10: --force that would overwrite nothing is not silently ignored."""
    result = CliRunner().invoke(app, args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", line + "\n")


def test_a_per_wave_parquet_beside_an_input_file_is_refused(tmp_path: Path) -> None:
    """Issue 29 item 10: traces/x/EP1.parquet given alone; --per-wave traces/x/pw.parquet
    would be read as a trace by the next replay of traces/x, as inside a directory."""
    folder = tmp_path / "x"
    folder.mkdir()
    shutil.copy(Path(PR991) / "EP1.parquet", folder / "EP1.parquet")
    target = folder / "pw.parquet"
    result = CliRunner().invoke(
        app, ["replay", str(folder / "EP1.parquet"), "--per-wave", str(target)]
    )
    assert result.exit_code == 2 and not target.exists()
    assert f"it lies inside the trace directory {folder}" in result.stderr
    beside = tmp_path / "pw.parquet"  # outside the folder: written
    result = CliRunner().invoke(
        app, ["replay", str(folder / "EP1.parquet"), "--per-wave", str(beside)]
    )
    assert result.exit_code == 0 and beside.exists()


@pytest.mark.parametrize(
    ("cores", "load", "jobs"),
    [(2, 10.0, 1), (2, 0.3, 2), (2, 0.6, 1), (2, 1.4, 1), (16, 3.6, 12), (16, 0.0, 16)],
)
def test_the_default_jobs_are_the_free_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float, jobs: int
) -> None:
    """Issue 29 item 8: usable cores less the 1-minute load, rounded, at least 1 (2 cores
    at a load of 10: one job, where two took 19-26 s against 11.5 s)."""
    from warmfit.run.workers import default_jobs

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr("os.getloadavg", lambda: (load, load, load))
    assert default_jobs() == jobs


def test_without_a_load_average_every_core_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmfit.run.workers import default_jobs

    def no_load() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr("os.getloadavg", no_load)
    assert default_jobs() == 3


def test_the_free_cores_are_read_once_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load average moves: the workers started early and the replay must use one
    count, so the command reads it once and hands it on."""
    import warmfit.run.workers

    reads: list[int] = []

    def free_cores() -> int:
        reads.append(3)
        return 3

    monkeypatch.setattr(warmfit.run.workers, "default_jobs", free_cores)
    result = CliRunner().invoke(app, ["replay", PR991, "-v"])
    assert result.exit_code == 0, result.output
    assert reads == [3] and "jobs: 3 (the free cores" in result.stderr


def test_a_command_that_fails_ends_its_early_workers_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker pool started beside the command's imports (any trace counts as large
    here) is killed when the command fails before its replay took it, not left to wind
    down."""
    import warmfit.run.workers

    ended: list[object] = []
    end_workers = warmfit.run.workers.end_workers

    def spy(pool: object) -> None:
        ended.append(pool)
        end_workers(pool)  # type: ignore[arg-type]

    monkeypatch.setattr(warmfit.run.workers, "WORKER_BYTES", 0)
    monkeypatch.setattr(warmfit.run.workers, "end_workers", spy)
    result = CliRunner().invoke(app, ["replay", PR991, "-p", "no-such-policy", "--jobs", "2"])
    assert result.exit_code == 2 and "unknown policy 'no-such-policy'" in result.stderr
    assert len(ended) == 1


def test_verbose_says_how_many_jobs_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr("os.getloadavg", lambda: (10.0, 9.0, 8.0))
    result = CliRunner().invoke(app, ["replay", PR991, "-v", "-f", "csv"])
    assert result.exit_code == 0
    assert result.stderr == (
        "jobs: 1 (the free cores: 2 usable, load 10.0): replayed in this process\n"
    )
    result = CliRunner().invoke(app, ["replay", PR991, "-v", "-j", "2", "-f", "csv"])
    size = sum(p.stat().st_size for p in Path(PR991).glob("*.parquet"))
    assert result.stderr == (
        f"jobs: 2 (--jobs), but the trace's {size:,} bytes are under 32 MiB: replayed in "
        "this process\n"
    )
    assert CliRunner().invoke(app, ["replay", PR991, "-f", "csv"]).stderr == ""  # quiet


def test_verbose_names_the_cluster_and_lists_no_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --cluster the batches go to its workers: --verbose names it (escaped), before
    the replay finds nothing listening there (1 s here) and says so."""
    pytest.importorskip("distributed")
    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "0.1")
    result = CliRunner().invoke(
        app, ["replay", PR991, "-v", "--cluster", "tcp://127.0.0.1:9\x1b", "-f", "csv"]
    )
    assert result.exit_code == 2 and result.stdout == ""
    first, *rest = result.stderr.splitlines()
    assert first == "jobs: on the Dask cluster at tcp://127.0.0.1:9\\x1b"
    assert len(rest) == 1 and "cannot reach the Dask scheduler" in rest[0]
