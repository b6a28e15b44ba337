"""``warmfit --help`` and ``warmfit replay`` start without torch, matplotlib or the trainers (issues 4, 15).

Each command runs in a fresh interpreter; after it finishes, the interpreter
reports which heavy modules it imported. The recorder and the plots import
them lazily, so a replay starts fast and works where they are not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from warmfit.format.trace import readings_frame, write_trace

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "matplotlib", "lightning", "transformers", "accelerate")

_PROBE = """
import json, sys
args, watched = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
sys.argv = ["warmfit", *args]
from warmfit.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted({name.split(".")[0] for name in sys.modules} & watched)
from multiprocessing import forkserver
workers = forkserver._forkserver._forkserver_pid is not None
print("\\nPROBE " + json.dumps({"code": code, "heavy": heavy, "workers": workers}))
"""


def _run(args: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("PROBE ")]
    assert line, done.stdout + done.stderr
    result: dict[str, object] = json.loads(line[-1].removeprefix("PROBE "))
    return result


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """traces/pr991 when it is there, else a small trace of the same shape."""
    pr991 = REPO / "traces" / "pr991"
    if pr991.is_dir() and any(pr991.rglob("*.parquet")):
        return pr991
    folder = tmp_path_factory.mktemp("trace")
    rows: list[dict[str, object]] = [
        {"seq": i, "wave": i // 2, "signature": "s", "packed_tokens": 100 + i,
         "logical_tokens": 200 + i, "peak_bytes": 10_000 + 50 * i,
         "phase": "forward" if i % 2 == 0 else "caller", "whole": i % 2 == 1}
        for i in range(40)
    ]  # fmt: skip
    write_trace(readings_frame(rows), folder / "trace.parquet")
    return folder


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["replay", "--help"], ["recommend", "--help"]]
)
def test_help_imports_no_heavy_module(args: list[str]) -> None:
    result = _run(args)
    assert result == {"code": 0, "heavy": [], "workers": False}


def test_replay_imports_no_heavy_module(small_trace: Path) -> None:
    """... and a small trace is replayed in this process: no fork server is started."""
    result = _run(["replay", str(small_trace)])
    assert result == {"code": 0, "heavy": [], "workers": False}


def test_replay_with_every_format_and_engine_imports_no_heavy_module(small_trace: Path) -> None:
    result = _run(["replay", str(small_trace), "--format", "json", "--engine", "vectorized"])
    assert result == {"code": 0, "heavy": [], "workers": False}


def test_recommend_imports_no_heavy_module(small_trace: Path) -> None:
    result = _run(["recommend", str(small_trace), "--budget", "1GB", "--format", "json"])
    assert result == {"code": 0, "heavy": [], "workers": False}
    assert _run(["recommend", str(small_trace), "--budget", "1GB"])["heavy"] == []


def test_the_recorder_imports_neither_polars_nor_torch() -> None:
    # A trainer imports warmfit.recorder: it writes its log and its trace with
    # pyarrow alone; polars is loaded only when a log is compacted and read back.
    done = subprocess.run(
        [sys.executable, "-c", "import sys, warmfit.recorder; "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'polars', 'torch'}))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


_ENDING = """
import atexit, sys
from pathlib import Path
marker = Path(sys.argv[1])
atexit.register(lambda: marker.write_text("ran"))
sys.argv = ["warmfit", *sys.argv[2:]]
from warmfit.cli import run
run()
"""


@pytest.mark.parametrize(
    ("args", "status"), [(["replay", "--format", "json"], 0), (["replay", "missing"], 2)]
)
def test_the_program_ends_at_once_after_its_exit_handlers(
    small_trace: Path, tmp_path: Path, args: list[str], status: int
) -> None:
    """``warmfit`` skips the interpreter's teardown (warmfit.cli.run), but not what
    an exit must do: the exit handlers run, the output is flushed whole (no
    newline needed), and the status is the command's."""
    marker = tmp_path / "atexit-ran"
    if args[-1] != "missing":
        args = [*args[:1], str(small_trace), *args[1:]]
    done = subprocess.run(
        [sys.executable, "-c", _ENDING, str(marker), *args],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == status, done.stderr
    assert marker.read_text() == "ran"
    if status == 0:
        assert json.loads(done.stdout)["results"]
    else:
        assert "missing" in done.stderr and "Traceback" not in done.stderr


def test_the_console_script_and_python_m_run_the_program() -> None:
    """Both ways of starting warmfit run warmfit.__main__.run, then warmfit.cli.run, which ends at once."""
    text = (REPO / "pyproject.toml").read_text()
    assert 'warmfit = "warmfit.__main__:run"' in text
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "replay", "missing"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "missing" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
