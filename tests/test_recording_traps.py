"""What a newcomer tripped on (issue 14): the recorder's part.

A trainer without whole readings is warned about by record, validate and
replay; recording never changes the training run; validate shows how the
trace was recorded; record of a command that recorded nothing says so and
leaves nothing; the reserved pool's peak is an optional column.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.command_line import warmfit_cli, warmfit_process
from tests.conftest import torch_script
from warmfit.format.trace import (
    no_whole_warning,
    pairs_without_whole,
    read_trace,
    reading_counts,
    readings_frame,
    without_whole,
    write_trace,
)

REPO = Path(__file__).resolve().parent.parent


def reading(seq: int, wave: int, **kw) -> dict[str, object]:
    return dict(seq=seq, wave=wave, packed_tokens=4, logical_tokens=4, peak_bytes=400, **kw)


def mixed_frame() -> pl.DataFrame:
    """(a, whole) has a whole reading; (a, none) none; (b, oom) only an OOM whole one;
    (c, fwd) only forward-only waves, which never have one."""
    return readings_frame(
        [
            reading(0, 0, run="a", signature="whole", phase="forward"),
            reading(1, 0, run="a", signature="whole", whole=True),
            reading(2, 1, run="a", signature="none", phase="forward"),
            reading(3, 1, run="a", signature="none"),
            reading(0, 0, run="b", signature="oom", whole=True, oom=True),
            reading(0, 0, run="c", signature="fwd", kind="dp_rank_forward", phase="forward"),
        ]
    )


# --------------------------------------------------------------------------- 1. no whole readings


def test_without_whole_names_the_sorted_pairs_with_flat_readings_but_no_whole_one() -> None:
    assert without_whole(mixed_frame()).rows() == [("a", "none"), ("b", "oom")]
    assert without_whole(mixed_frame().filter(pl.col("signature") == "whole")).height == 0


def test_without_whole_is_right_on_parts_and_their_counts_add_up() -> None:
    frame = mixed_frame()
    first, second = frame.slice(0, 1), frame.slice(1)  # the whole reading is in the second part
    assert without_whole(first).rows() == [("a", "whole")]  # right for that part alone
    counts = pl.concat([reading_counts(first), reading_counts(second)])
    assert pairs_without_whole(counts).equals(without_whole(frame))


def test_the_warning_names_run_signature_and_the_fix_escaped() -> None:
    assert no_whole_warning([]) == ""
    text = no_whole_warning([("ep\x1b[31m1", "sig\n2")])
    assert "run 'ep\\x1b[31m1' signature 'sig\\n2'" in text
    assert "\x1b" not in text and "\n" not in text
    assert "wave.forward_done()" in text and "docs/reference/recorder.md" in text
    many = no_whole_warning([("r", f"s{i}") for i in range(8)], shown=5)
    assert "and 3 more" in many and "s5" not in many


@pytest.fixture
def no_whole_trace(tmp_path: Path) -> Path:
    frame = readings_frame(
        [reading(2 * w + p, w, run="mine", signature="train", phase=ph) for w in range(3)
         for p, ph in enumerate(("forward", "caller"))]
    )  # fmt: skip
    write_trace(frame, tmp_path / "t.parquet")
    return tmp_path


def test_replay_warns_on_stderr_without_changing_its_output_or_exit_code(no_whole_trace) -> None:
    result = warmfit_cli("replay", no_whole_trace, "-f", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["results"]  # stdout is untouched
    assert "no whole reading in run 'mine' signature 'train'" in result.stderr
    assert "forward_done()" in result.stderr
    assert "no whole reading" not in warmfit_cli("replay", REPO / "traces/pr991").stderr


def test_validate_warns_on_stderr_and_exits_0(no_whole_trace) -> None:
    result = warmfit_cli("validate", no_whole_trace)
    assert result.exit_code == 0
    assert "no whole reading in run 'mine' signature 'train'" in result.stderr
    assert "no whole reading" not in result.stdout


# --------------------------------------------------------------------------- 6. validate


def test_validate_shows_how_the_trace_was_recorded() -> None:
    out = warmfit_cli("validate", REPO / "traces/cpu-demo").stdout
    import torch  # noqa: F401  (the demo trace says which torch recorded it)

    meta = pq.read_schema(next((REPO / "traces/cpu-demo").rglob("*.parquet"))).metadata
    assert "  meter       warmfit.cpu-storages\n" in out
    assert f"  torch       {meta[b'warmfit.torch_version'].decode()}\n" in out
    assert f"  device      {meta[b'warmfit.device'].decode()}\n" in out
    assert "  recovered   no\n" in out
    assert "reserved peak" not in out


def test_validate_counts_waves_whole_and_oom_readings_per_run_and_signature(tmp_path) -> None:
    write_trace(mixed_frame(), tmp_path / "t.parquet")
    out = warmfit_cli("validate", tmp_path).stdout
    table = {tuple(line.split()[:2]): line.split()[2:] for line in out.splitlines()}
    #                  waves readings whole oom
    assert table[("a", "whole")] == ["1", "2", "1", "0"]
    assert table[("a", "none")] == ["1", "2", "0", "0"]
    assert table[("b", "oom")] == ["1", "1", "0", "1"]
    assert table[("c", "fwd")] == ["1", "1", "0", "0"]


def test_validate_shows_recovered_files_lost_readings_and_mixed_metadata(tmp_path) -> None:
    frame = mixed_frame()
    write_trace(frame.filter(pl.col("run") == "a"), tmp_path / "a.parquet",
                {"warmfit.meter": "torch.cuda", "warmfit.recovered": "true",
                 "warmfit.readings_lost": "30", "warmfit.skipped_waves": "2"})  # fmt: skip
    write_trace(frame.filter(pl.col("run") != "a"), tmp_path / "b.parquet", {"warmfit.meter": "x"})
    out = warmfit_cli("validate", tmp_path).stdout
    assert "  meter       torch.cuda (1 of 2 files); x (1 of 2 files)\n" in out
    assert (
        "  not known   device, torch, recorder (no warmfit.device, warmfit.torch_version, "
        "warmfit.recorder metadata: written by another tool or imported)\n" in out
    )
    assert "  recovered   yes, 1 of 2 files" in out
    assert "30 readings lost" in out and "2 waves skipped" in out


# --------------------------------------------------------------------------- 10. reserved


def test_validate_shows_the_reserved_peak_where_the_trace_has_one(tmp_path) -> None:
    frame = mixed_frame().with_columns(
        reserved_peak_bytes=pl.Series([2_000_000, 3_000_000, None, None, 5_000, 7], dtype=pl.Int64)
    )
    write_trace(frame, tmp_path / "t.parquet")
    assert read_trace([tmp_path])["reserved_peak_bytes"].to_list()[:2] == [2_000_000, 3_000_000]
    out = warmfit_cli("validate", tmp_path).stdout
    assert "reserved peak" in out
    rows = {tuple(line.split()[:2]): line.split()[6:] for line in out.splitlines()}
    assert rows[("a", "whole")] == ["3.00", "MB"]
    assert rows[("a", "none")] == ["—"]
    assert rows[("b", "oom")] == ["5.00", "KB"]


def test_replay_ignores_the_reserved_column(tmp_path) -> None:
    plain = tmp_path / "plain"
    extra = tmp_path / "extra"
    write_trace(mixed_frame(), plain / "t.parquet")
    write_trace(mixed_frame().with_columns(reserved_peak_bytes=pl.lit(10**9)), extra / "t.parquet")
    assert (
        warmfit_cli("replay", plain, "-f", "json").stdout
        == warmfit_cli("replay", extra, "-f", "json").stdout
    )


# --------------------------------------------------------------------------- 3 and 9: record

#: A real small training loop. Its waves: good ones, 0 tokens, negative tokens,
#: logical below packed; argv[1] == "float" adds a float count after two steps.
TRAINER = textwrap.dedent(
    """
    import sys
    import torch
    from warmfit.recorder import Recorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder.from_env(device="cpu")
    shapes = [(8, 8), (0, 0), (5, 9), (-2, 4), (6, 3), (12, 12)]  # (packed, logical)
    forward_done = sys.argv[1:] != ["no-forward-done"]
    for step in range(4):
        for packed, logical in shapes:
            if sys.argv[1:] == ["float"] and step == 2:
                packed = float(max(packed, 1))
            rows = max(int(packed), 1)
            x = torch.randn(rows, 16)
            with rec.wave("train/mlp", packed, logical) as wave:
                out = model(x)
                if forward_done:
                    wave.forward_done()
                loss = (out ** 2).mean()
                loss.backward()
            print(step, packed, loss.item().hex(), flush=True)
        opt.step()
        opt.zero_grad()
        rec.step()
    print("weights", sum(p.double().sum().item() for p in model.parameters()).hex())
    rec.close()
    """
)


@pytest.fixture
def trainer(tmp_path: Path) -> Path:
    return torch_script(tmp_path, TRAINER)


def plain_run(trainer: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("WARMFIT_")}
    return subprocess.run(
        [sys.executable, str(trainer), *args], capture_output=True, text=True, env=env
    )


@pytest.mark.torch
def test_recording_gives_bit_identical_training_with_bad_wave_values(trainer, tmp_path) -> None:
    plain = plain_run(trainer)
    recorded = warmfit_process("record", "-o", tmp_path / "rec", "--", sys.executable, trainer)
    assert plain.returncode == recorded.returncode == 0, recorded.stderr
    assert plain.stdout == recorded.stdout  # every loss and the final weights, bit for bit
    assert plain.stdout.count("\n") == 4 * 6 + 1
    for problem in ("packed_tokens=0 is not positive", "logical_tokens=3 is below"):
        assert problem in plain.stderr and problem in recorded.stderr  # the same warnings
    assert "skipped" in recorded.stderr and "12" in recorded.stderr  # 3 bad waves x 4 steps
    trace = read_trace([tmp_path / "rec"])
    assert trace.height == 4 * 3 * 2  # the 3 good waves of each step, two readings each


@pytest.mark.torch
def test_a_float_count_fails_the_same_way_with_and_without_recording(trainer, tmp_path) -> None:
    plain = plain_run(trainer, "float")
    recorded = warmfit_process(
        "record", "-o", tmp_path / "rec", "--", sys.executable, trainer, "float"
    )
    assert plain.returncode == recorded.returncode == 1
    assert plain.stdout == recorded.stdout and plain.stdout.count("\n") == 2 * 6
    last = [line for line in plain.stderr.splitlines() if "UsageError" in line]
    assert last and "packed_tokens must be an integer" in last[-1]
    assert last[-1] in recorded.stderr


@pytest.mark.torch
def test_record_warns_when_the_trainer_never_calls_forward_done(trainer, tmp_path) -> None:
    done = warmfit_process(
        "record", "-o", tmp_path / "rec", "--", sys.executable, trainer, "no-forward-done"
    )
    assert done.returncode == 0
    assert "no whole reading in run 'rec' signature 'train/mlp'" in done.stderr
    assert "wave.forward_done()" in done.stderr


def test_record_of_a_command_that_fails_exits_with_its_code_without_the_hint(tmp_path) -> None:
    out = tmp_path / "new" / "rec"
    done = warmfit_process(
        "record", "-o", out, "--", sys.executable, "-c", "import no_such_module_xyz"
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError" in done.stderr
    assert "Recorder.from_env" not in done.stderr and "did you" not in done.stderr
    assert "nothing was recorded: the command failed" in done.stderr
    assert not (tmp_path / "new").exists()  # every folder warmfit made is gone


def test_record_of_a_command_that_records_nothing_says_so_and_exits_2(tmp_path) -> None:
    out = tmp_path / "rec"
    out.mkdir()  # the user's folder: kept
    (out / "run=other").mkdir()  # another run's folder: kept
    done = warmfit_process("record", "-o", out, "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    assert "nothing was recorded" in done.stderr and "Recorder.from_env()" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["run=other"]


def test_a_recorder_that_records_nothing_leaves_no_folder(tmp_path) -> None:
    code = "from warmfit.recorder import Recorder; Recorder.from_env(device='cpu').close()"
    pytest.importorskip("torch")
    done = warmfit_process("record", "-o", tmp_path / "rec", "--", sys.executable, "-c", code)
    assert done.returncode == 2 and "nothing was recorded" in done.stderr
    assert not (tmp_path / "rec").exists()
