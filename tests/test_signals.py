"""Signals that end a command are never lost (issue 42).

``warmfit check --update``, stopped (SIGSTOP), signalled and continued at many
moments, must end with the signal's exit code (130 for SIGINT, 143 for SIGTERM,
129 for SIGHUP, 131 for SIGQUIT) and one line, never a traceback, and leave the
expectations file as it was. Before: SIGTERM was lost 2 times in 40 and SIGINT 4
in 40 (exit 0, the update written: the exception raised by the handler vanished
inside a library during start-up imports, and the SIGTERM handler had set
SIG_IGN before raising), and SIGHUP and SIGQUIT killed the command without a word.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.command_line import python_env
from tests.test_faults import default_signals

REPO = Path(__file__).resolve().parent.parent
TRACES = [str(REPO / "traces" / "pr991"), str(REPO / "traces" / "cpu-demo")]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGQUIT: 131}
SAID = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "terminated (SIGHUP",
    signal.SIGQUIT: "terminated (SIGQUIT)",
}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Expectations of pr991 alone: ``check --update`` on pr991 and cpu-demo adds a run."""
    path = tmp_path_factory.mktemp("signals") / "base.toml"
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "check", TRACES[0], "--write-expect", str(path),
         "--allow-under"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return path


def check_update(expect: Path, **kwargs) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "warmfit", "check", *TRACES, "-e", str(expect), "--update",
         "--allow-under"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=default_signals, **kwargs,
    )  # fmt: skip


def catches_sighup(pid: int) -> bool:
    """Whether the process has a handler for SIGHUP: warmfit's own are installed
    (Python alone catches SIGINT only)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGHUP - 1) & 1)
    except OSError:
        pass
    return False


def stopped(pid: int) -> bool:
    """Whether the process is stopped within 1 s (a process that is exiting never is)."""
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return False
        if state == "T":
            return True
        if state in ("Z", "X"):
            return False
        time.sleep(0.002)
    return False


def stop_signal_continue(process: subprocess.Popen[str], sent: int, delay: float) -> bool:
    """Once warmfit's first line has run (its handlers installed; 5 s at most), wait
    ``delay``, then stop the process, send it ``sent`` and continue it. False when the
    command had ended before the signal."""
    deadline = time.monotonic() + 5
    while not catches_sighup(process.pid) and time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    time.sleep(delay)
    if process.poll() is not None:
        return False
    os.kill(process.pid, signal.SIGSTOP)
    if not stopped(process.pid):  # it was ending (in the kernel's exit): nothing to stop
        os.kill(process.pid, signal.SIGCONT)
        return False
    os.kill(process.pid, sent)
    time.sleep(0.02)
    os.kill(process.pid, signal.SIGCONT)
    return True


def assert_stopped_cleanly(process: subprocess.Popen[str], sent: int, expect: Path, before: bytes):
    try:
        _, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail("the command still ran 120 s after the signal")
    assert "Traceback" not in err, err
    assert process.returncode == EXIT[sent], (process.returncode, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert SAID[sent] in lines[-1], err
    if lines[0].startswith("added run"):  # the update was written whole before the signal
        # its warnings (a file that allows waves under their peak keeps allowing them,
        # spec-notes 31), then the signal's line
        assert all(line.startswith("warning: ") for line in lines[1:-1]), err
        assert expect.read_bytes().startswith(before)
    else:
        assert len(lines) == 1, err
        assert expect.read_bytes() == before  # the update was not written


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]


@pytest.mark.parametrize("sent", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize(
    "tries",
    [pytest.param(3, id="3-tries"), pytest.param(40, id="40-tries", marks=pytest.mark.slow)],
)
def test_a_signal_while_stopped_ends_check_update_every_time(
    base: Path, tmp_path: Path, sent: int, tries: int
) -> None:
    rng = random.Random(f"{sent}-{tries}")
    expect = tmp_path / "e.toml"
    signalled = 0
    for _ in range(tries):
        shutil.copy(base, expect)
        before = expect.read_bytes()
        process = check_update(expect)
        if not stop_signal_continue(process, sent, rng.uniform(0.0, 0.7)):
            process.communicate()
            continue
        signalled += 1
        assert_stopped_cleanly(process, sent, expect, before)
    assert signalled >= tries // 4  # tries came in time (else the test says nothing)


@pytest.fixture
def warmfit_handlers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """warmfit.run.signals as a command starts (nothing received, reported, finished or
    deferred), for an in-process test that installs warmfit's handlers (itself, or
    through ``cli.main``); the test process's handlers are put back after."""
    from warmfit.run import signals

    for name, value in (
        ("_received", None), ("_reported", False), ("_finished", False), ("_deferring", False)
    ):  # fmt: skip
        monkeypatch.setattr(signals, name, value)
    handlers = {s: signal.getsignal(s) for s in signals.ENDING}
    try:
        yield signals
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("thread", ["main", "another"])
def test_a_signal_as_update_replaces_its_file_waits_for_the_lines_that_say_so(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warmfit_handlers: Any, thread: str
) -> None:
    """The moment the test above met now and then under load: a real SIGTERM just after
    ``check --update`` replaced its file. The lines saying what was added come first, then
    the stop's line (exit 143); before, the stop fell between the two, and the file held
    an update no line had mentioned. The system may deliver a process's signal to any of
    its threads (polars has its own): sent to another thread, it must wait too.
    In-process, warmfit's handlers installed (and the test process's put back)."""
    import threading
    import time

    from typer.testing import CliRunner

    import warmfit.report.gate as gate
    from warmfit.cli import app

    expect = tmp_path / "e.toml"
    shutil.copy(base, expect)
    before = expect.read_bytes()
    update = gate.update_expectations
    waiting = threading.Event()
    other = threading.Thread(target=waiting.wait, daemon=True)
    other.start()

    def then_a_signal(*args: object, **kwargs: object) -> object:
        added = update(*args, **kwargs)  # type: ignore[arg-type]
        if thread == "main":  # the file is replaced: its line is not out yet
            signal.raise_signal(signal.SIGTERM)
        else:
            signal.pthread_kill(other.ident or 0, signal.SIGTERM)
            time.sleep(0.2)  # the handler runs in this thread at its next instruction
        return added

    monkeypatch.setattr(gate, "update_expectations", then_a_signal)
    warmfit_handlers.install()
    try:
        args = ["check", *TRACES, "-e", str(expect), "--update", "--allow-under"]
        result = CliRunner().invoke(app, args)
    finally:
        waiting.set()
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == EXIT[signal.SIGTERM], result.stderr
    assert lines[0].startswith("added run 'cpu-demo'"), result.stderr
    assert lines[-1] == f"warmfit: {SAID[signal.SIGTERM]}; nothing more was written."
    assert expect.read_bytes().startswith(before) and expect.read_bytes() != before


def test_a_signal_as_write_expect_writes_its_file_waits_for_the_line_that_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warmfit_handlers: Any
) -> None:
    """As for --update: a real SIGTERM just after ``check --write-expect`` wrote its file
    comes after the line "wrote expectations ... to FILE", not between."""
    from typer.testing import CliRunner

    import warmfit.report.gate as gate
    from warmfit.cli import app

    expect = tmp_path / "e.toml"
    write = gate.write_expectations

    def then_a_signal(*args: object, **kwargs: object) -> None:
        write(*args, **kwargs)  # type: ignore[arg-type]
        signal.raise_signal(signal.SIGTERM)  # the file is written: its line is not out yet

    monkeypatch.setattr(gate, "write_expectations", then_a_signal)
    warmfit_handlers.install()
    result = CliRunner().invoke(app, ["check", TRACES[0], "--write-expect", str(expect)])
    assert result.exit_code == EXIT[signal.SIGTERM], result.output
    assert result.stdout.startswith("wrote expectations for ") and str(expect) in result.stdout
    assert result.stderr == f"\nwarmfit: {SAID[signal.SIGTERM]}; nothing more was written.\n"
    assert expect.is_file()


#: Each command that writes a file and then says so: its arguments (OUT: the file it
#: writes, REPORTS: a folder of one ART report), and the stream of its "wrote" line.
LIGER = REPO / "traces" / "liger-gpu" / "source"
WRITERS = {
    "import table": (
        [
            "import",
            "table",
            str(LIGER / "all_benchmark_data.csv"),
            "--map",
            str(LIGER / "map.toml"),
            "-o",
            "OUT.parquet",
        ],
        "stdout",
    ),
    "import art-misses": (["import", "art-misses", "REPORTS", "-o", "OUT.parquet"], "stdout"),
    "plot": (["plot", TRACES[0], "-o", "OUT.svg"], "stdout"),
    "replay --per-wave": (["replay", TRACES[0], "--per-wave", "OUT.csv"], "stderr"),
    "sweep --plot": (["sweep", TRACES[0], "--plot", "OUT.svg"], "stderr"),
}
#: The commands whose writing is long (a replay, a drawing): a stop before the file is
#: whole still ends them at once. The others write data already in memory, in one go.
STOPPABLE_WHILE_WRITING = {"plot", "replay --per-wave"}


def _signal_as(
    command: str, moment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Path]:
    """``command`` run in-process (warmfit's handlers installed), with a real SIGTERM raised
    as its file is written: ``after`` it is put in place, or ``before`` (its contents
    written, the file not yet in place). The result and the file."""
    from typer.testing import CliRunner

    import warmfit.format.files as files
    import warmfit.format.writer as writer
    from tests.test_import_art_misses import canonical, report
    from warmfit.cli import app

    args, _ = WRITERS[command]
    (tmp_path / "reports").mkdir()
    one = report(1, occurred="2026-01-01T10:00:00+00:00")
    (tmp_path / "reports" / "a.json").write_bytes(canonical(one))
    out = tmp_path / "out" / args[-1].replace("OUT", "written")
    args = [*args[:-1], str(out)]
    args = [str(tmp_path / "reports") if a == "REPORTS" else a for a in args]
    original = files.write_atomically

    def then_a_signal(path: Any, write: Any, before_replace: Any = None) -> Path:
        if Path(path) != out:  # another file (a plot's frames): as usual
            return original(path, write, before_replace)
        if moment == "after":
            written = original(path, write, before_replace)
            signal.raise_signal(signal.SIGTERM)  # the file is in place: its line is not out
            return written

        def write_then_signal(sink: Any) -> None:
            write(sink)
            signal.raise_signal(signal.SIGTERM)  # the contents written, not yet in place

        return original(path, write_then_signal, before_replace)

    monkeypatch.setattr(files, "write_atomically", then_a_signal)
    monkeypatch.setattr(writer, "write_atomically", then_a_signal)
    return CliRunner().invoke(app, args), out


@pytest.mark.parametrize("command", WRITERS)
def test_a_signal_as_a_command_puts_its_file_in_place_waits_for_the_line_that_says_so(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warmfit_handlers: Any
) -> None:
    """As for ``check --update``: a real SIGTERM just after a command put its file in place
    comes after the line "wrote FILE ...", not between (before, the command ended with the
    stop's line alone, and a file no line mentioned)."""
    warmfit_handlers.install()
    result, out = _signal_as(command, "after", tmp_path, monkeypatch)
    said = result.stdout if WRITERS[command][1] == "stdout" else result.stderr
    assert result.exit_code == EXIT[signal.SIGTERM], result.output
    assert f"wrote {out}" in said, result.output
    assert result.stderr.endswith(f"warmfit: {SAID[signal.SIGTERM]}; nothing more was written.\n")
    assert out.is_file()


@pytest.mark.parametrize("command", WRITERS)
def test_a_signal_before_a_commands_file_is_whole_stops_a_long_write_at_once(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warmfit_handlers: Any
) -> None:
    """A SIGTERM while the file is still being written (a replay's rows, a drawing) ends
    ``plot`` and ``replay --per-wave`` there: no file, no "wrote" line, no temporary file
    left. ``import`` and ``sweep --plot`` write data already in memory in one go: the stop
    waits until the file and its line are out."""
    warmfit_handlers.install()
    result, out = _signal_as(command, "before", tmp_path, monkeypatch)
    assert result.exit_code == EXIT[signal.SIGTERM], result.output
    assert result.stderr.endswith(f"warmfit: {SAID[signal.SIGTERM]}; nothing more was written.\n")
    if command in STOPPABLE_WHILE_WRITING:
        assert "wrote" not in result.output
        assert not out.parent.exists()  # neither the file nor the folder made for it
    else:
        assert f"wrote {out}" in result.output and out.is_file()
        assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


#: A finder that loses the signal the way a library can: it sends the signal to its own
#: process as ``WARMFIT_TEST_LOSE`` is first imported, and swallows whatever that raises.
LOSER = textwrap.dedent(
    """
    import os, signal, sys
    lose, sent = os.environ["WARMFIT_TEST_LOSE"], int(os.environ["WARMFIT_TEST_SIGNAL"])

    class Dropped:
        def __del__(self):
            os.kill(os.getpid(), sent)
            for _ in range(10**6):
                pass

    class Loser:
        def find_spec(self, name, path=None, target=None):
            global lose
            if name == lose:
                lose = None
                if os.environ["WARMFIT_TEST_HOW"] == "finalizer":
                    Dropped()  # made and dropped: the stop is raised inside its __del__,
                    return None  # where Python can only print it ("Exception ignored")
                try:
                    os.kill(os.getpid(), sent)
                    for _ in range(10**6):
                        pass
                except BaseException:
                    pass  # a library's except clause: the stop vanishes here
            return None

    sys.meta_path.insert(0, Loser())
    """
)


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("module", ["typer", "polars"], ids=["start-up", "command"])
@pytest.mark.parametrize("how", ["except", "finalizer"])
def test_a_signal_whose_exception_vanishes_still_ends_the_command(
    base: Path, tmp_path: Path, sent: int, module: str, how: str
) -> None:
    """The exception a signal raises, swallowed by code the command runs (while
    ``warmfit.cli`` imports typer, or while the command imports polars), by an except
    clause or by landing in a finalizer (a ``__del__``: Python printed it as "Exception
    ignored in ...", a traceback, once in a CI run): the command still ends with the
    signal's line alone and its exit code, the file as it was."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LOSER)
    expect = tmp_path / "e.toml"
    shutil.copy(base, expect)
    before = expect.read_bytes()
    env = python_env(
        site, WARMFIT_TEST_LOSE=module, WARMFIT_TEST_SIGNAL=str(int(sent)), WARMFIT_TEST_HOW=how
    )
    assert_stopped_cleanly(check_update(expect, env=env), sent, expect, before)


#: A signal that lands while a class is made, in a descriptor's ``__set_name__``: Python
#: 3.11 wraps the stop in ``RuntimeError: Error calling __set_name__`` (issue 42: Ctrl-C
#: to the process group at 0.85 s of ``replay --jobs 2``, a traceback).
WRAPPER = textwrap.dedent(
    """
    import os, signal, sys
    wrap, sent = os.environ["WARMFIT_TEST_WRAP"], int(os.environ["WARMFIT_TEST_SIGNAL"])

    class Field:
        def __set_name__(self, owner, name):
            os.kill(os.getpid(), sent)
            for _ in range(10**6):
                pass

    class Wrapper:
        def find_spec(self, name, path=None, target=None):
            global wrap
            if name == wrap:
                wrap = None

                class Points:
                    x = Field()

            return None

    sys.meta_path.insert(0, Wrapper())
    """
)


def test_a_stop_that_became_another_error_ends_the_command_as_the_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-process, what the wrapper tests below do in a process of their own: a
    SIGTERM was received (as warmfit's handler records it) and the command then fails
    with another error: it ends as the SIGTERM, in its line, exit 143."""
    from typer.testing import CliRunner

    import warmfit.policies
    from warmfit.cli import app
    from warmfit.run import signals

    monkeypatch.setattr(signals, "_received", int(signal.SIGTERM))
    monkeypatch.setattr(signals, "_reported", False)

    def wrapped() -> list[str]:
        raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Points'")

    monkeypatch.setattr(warmfit.policies, "policy_names", wrapped)
    result = CliRunner().invoke(app, ["policies"])
    assert (result.exit_code, result.stdout) == (128 + signal.SIGTERM, "")
    assert result.stderr == "\nwarmfit: terminated (SIGTERM); nothing more was written.\n"


def test_a_signal_whose_stop_vanished_ends_the_program_as_the_signal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], warmfit_handlers: Any
) -> None:
    """In-process ``warmfit.cli.main``: a real SIGTERM lands in the command and its stop
    is swallowed there (a library's ``except BaseException``), so the command ends as if
    nothing happened: the program still ends as the SIGTERM, its line and exit 143. The
    process's handlers are put back after."""
    import tempfile

    import warmfit.policies
    from warmfit import cli
    from warmfit.run import signals

    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)  # main() pins TMPDIR's
    monkeypatch.setattr(sys, "argv", ["warmfit", "policies"])
    names = warmfit.policies.policy_names

    def swallowed() -> list[str]:
        assert signal.getsignal(signal.SIGTERM) is signals._handler  # main() installed it
        with contextlib.suppress(KeyboardInterrupt):  # swallowed
            signal.raise_signal(signal.SIGTERM)  # a real one, to this process
        return names()

    monkeypatch.setattr(warmfit.policies, "policy_names", swallowed)
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 128 + signal.SIGTERM
    out, err = capsys.readouterr()
    assert "warm-fit" in out  # the command ran to its end
    assert err == "\nwarmfit: terminated (SIGTERM); nothing more was written.\n"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 no longer wraps the error")
@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("module", ["typer", "polars"], ids=["start-up", "command"])
def test_a_signal_wrapped_in_another_error_still_ends_the_command(
    base: Path, tmp_path: Path, sent: int, module: str
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WRAPPER)
    expect = tmp_path / "e.toml"
    shutil.copy(base, expect)
    before = expect.read_bytes()
    env = python_env(site, WARMFIT_TEST_WRAP=module, WARMFIT_TEST_SIGNAL=str(int(sent)))
    assert_stopped_cleanly(check_update(expect, env=env), sent, expect, before)


def test_only_a_thread_python_would_join_sends_the_exit_through_python() -> None:
    """cli.run ends with os._exit, after which a late signal is still looked at; it takes
    Python's own exit (where a late SIGTERM killed the process: status -15, no line)
    only for a thread Python would join. The fork server's watcher is a daemon thread,
    alive until the server ends: it must not count (it sent every replay with workers
    through Python's exit, and test_faults' 3.5 s moments met the signal there)."""
    import threading

    from warmfit.cli import _other_threads_to_join

    release = threading.Event()
    daemon = threading.Thread(target=release.wait, daemon=True)
    daemon.start()
    try:
        assert not _other_threads_to_join()
        joined = threading.Thread(target=release.wait)
        joined.start()
        assert _other_threads_to_join()
    finally:
        release.set()
    joined.join()
    daemon.join()
    assert not _other_threads_to_join()


#: ``warmfit.cli.run`` around a stand-in for ``main``, which ends as ``sys.argv[1]`` says.
ENDINGS = textwrap.dedent(
    """
    import atexit, io, os, signal, sys, threading, time
    import warmfit.cli as cli
    from warmfit.run import signals

    def main():
        case = sys.argv[1]
        if case == "returns":
            return
        if case == "thread":  # one Python would join: it finishes its work
            threading.Thread(target=lambda: (time.sleep(0.3), print("joined"))).start()
            sys.exit(0)
        if case == "stdout a pipe no one reads":
            read, write = os.pipe()
            os.close(read)
            sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(write, "w")))
            print("lost")  # held in the buffer until the end's flush
            sys.exit(0)
        if case == "signal in an exit hook":
            signals.install()
            signals.finish()
            atexit.register(os.kill, os.getpid(), signal.SIGTERM)
            sys.exit(0)
        sys.exit({"none": None, "message": "it broke", "three": 3}[case])

    cli.main = main
    cli.run()
    """
)


@pytest.mark.parametrize(("case", "code", "out", "err"), [
    ("returns", 0, "", ""),
    ("none", 0, "", ""),
    ("three", 3, "", ""),
    ("message", 1, "", "it broke\n"),
    ("thread", 0, "joined\n", ""),
    ("stdout a pipe no one reads", 120, "", ""),  # as Python's own exit gives
    ("signal in an exit hook", 143, "", "\nwarmfit: terminated (SIGTERM) as it ended.\n"),
])  # fmt: skip
def test_the_program_ends_with_its_commands_status(
    case: str, code: int, out: str, err: str
) -> None:
    """``warmfit.cli.run`` ends the process as Python would have for every way ``main``
    ends (no status, a number, a message; 120 when stdout cannot be flushed), joins a
    thread Python would join, and reports a signal that lands in an exit hook."""
    done = subprocess.run(
        [sys.executable, "-c", ENDINGS, case],
        cwd=REPO, capture_output=True, text=True, env=python_env(), check=False, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (code, out, err)


#: Raises ``WARMFIT_TEST_RAISE`` when ``typer`` is imported: an error of the start-up's
#: imports that is no signal (a broken install; a KeyboardInterrupt raised by code).
RAISER = textwrap.dedent(
    """
    import os, sys

    class Raiser:
        def find_spec(self, name, path=None, target=None):
            if name == "typer":
                raise {"KeyboardInterrupt": KeyboardInterrupt, "ImportError": ImportError}[
                    os.environ["WARMFIT_TEST_RAISE"]]("raised while typer imports")
            return None

    sys.meta_path.insert(0, Raiser())
    """
)


@pytest.mark.parametrize(
    ("raised", "code", "last_line"),
    [
        (
            "KeyboardInterrupt",
            130,
            "warmfit: interrupted (Ctrl-C) as it started; nothing was written.",
        ),
        ("ImportError", 1, "ImportError: raised while typer imports"),
    ],
)
def test_an_error_while_the_command_line_imports_is_a_stop_or_itself(
    tmp_path: Path, raised: str, code: int, last_line: str
) -> None:
    """``python -m warmfit`` before ``warmfit.cli`` is imported: a KeyboardInterrupt is a
    stop however it came (its one line, exit 130); any other error is no signal, and is
    raised as it is (Python's traceback ends with it), not turned into a stop."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RAISER)
    env = python_env(site, WARMFIT_TEST_RAISE=raised)
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "policies"],
        cwd=REPO, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (code, "")
    assert done.stderr.strip().splitlines()[-1] == last_line
    assert ("Traceback" in done.stderr) == (raised == "ImportError")


# --------------------------------------------------------------------------- in this process
# warmfit.run.signals's own functions, called here: the commands above run in processes of
# their own, which a mutant's run does not trace. Each test takes a fresh copy of the module
# (its state as at a command's start), so that this process's own handlers and state are
# left alone.


def fresh_signals() -> ModuleType:
    """A new instance of warmfit.run.signals, as a command's process starts with it: its
    file run again by the loader that loaded the package's (the mutant runner's, which
    traces it, in its baseline), into a module that is not put in ``sys.modules``."""
    from warmfit.run import signals

    loader = type(signals.__loader__)(signals.__name__, signals.__file__)  # type: ignore[call-arg]
    spec = importlib.util.spec_from_file_location(signals.__name__, signals.__file__, loader=loader)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("sent", "kind"),
    [
        (signal.SIGINT, "Interrupted"),
        (signal.SIGTERM, "Terminated"),
        (signal.SIGHUP, "Terminated"),
        (signal.SIGQUIT, "Terminated"),
    ],
    ids=lambda s: s if isinstance(s, str) else signal.Signals(s).name,
)
def test_each_signal_stops_with_its_exit_code_and_line(sent: int, kind: str) -> None:
    from warmfit.run import signals

    stop = signals.stop_for(sent)
    assert type(stop).__name__ == kind and isinstance(stop, KeyboardInterrupt)
    assert (stop.signum, stop.exit_code) == (sent, EXIT[sent])
    assert stop.said.startswith(SAID[sent])
    assert signals.as_stop(stop) is stop


def test_a_stop_for_another_signal_names_its_number() -> None:
    from warmfit.run import signals

    stop = signals.Terminated(signal.SIGUSR1)
    assert (stop.exit_code, stop.said) == (138, "stopped (signal 10)")
    assert signals.Terminated().signum == signal.SIGTERM


def test_pythons_own_keyboard_interrupt_is_ctrl_c() -> None:
    from warmfit.run import signals

    stop = signals.as_stop(KeyboardInterrupt())
    assert type(stop) is signals.Interrupted and stop.exit_code == 130


def test_a_command_starts_with_no_signal_and_reports_a_stop_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    signals = fresh_signals()
    assert signals.received() is None
    signals.raise_if_received()  # nothing
    assert signals.report(KeyboardInterrupt()) == 130
    assert capsys.readouterr().err == "\nwarmfit: interrupted (Ctrl-C); nothing more was written.\n"
    assert signals.report(signals.Terminated(), " as it ended") == 143  # its own code...
    assert capsys.readouterr().err == ""  # ...but one line a command
    assert signals.received() is None  # reported already


def test_the_handler_raises_the_first_signal_until_the_command_is_over() -> None:
    """The first ending signal is the one raised, every time; a signal that comes while
    a stop unwinds is recorded, not raised; after finish(), none is raised."""
    signals = fresh_signals()
    with pytest.raises(signals.Stopped) as raised:
        signals._handler(signal.SIGHUP, None)
    assert raised.value.signum == signal.SIGHUP
    with pytest.raises(signals.Stopped) as raised:
        signals._handler(signal.SIGINT, None)  # a second signal: the first one's stop
    assert raised.value.signum == signal.SIGHUP
    try:
        raise ValueError("another error being handled")
    except ValueError:
        with pytest.raises(signals.Stopped):
            signals._handler(signal.SIGINT, None)
    try:
        raise signals.Interrupted()
    except KeyboardInterrupt:
        assert signals._handler(signal.SIGTERM, None) is None  # its clean-up runs on
    stop = signals.received()
    assert type(stop) is signals.Terminated and stop.signum == signal.SIGHUP
    with pytest.raises(signals.Stopped):
        signals.raise_if_received()
    signals.finish()
    assert signals._handler(signal.SIGINT, None) is None
    assert signals.received() is not None  # looked at as the program exits


def test_a_deferred_stop_is_raised_as_the_outermost_block_ends_and_none_after_it() -> None:
    """Within ``deferred()`` a signal is recorded; a block inside another one ends without
    raising it (the outer block's lines are not out yet): the outer block raises it as it
    ends. After a block, a signal raises its stop at once again; ``now=False`` defers
    only once the block calls the function it yields."""
    signals = fresh_signals()
    said: list[str] = []
    with pytest.raises(signals.Stopped) as raised, signals.deferred():
        with signals.deferred():
            assert signals._handler(signal.SIGTERM, None) is None  # recorded
            said.append("file written")
        said.append("its line")  # the inner block ended: no stop yet
    assert raised.value.signum == signal.SIGTERM and said == ["file written", "its line"]
    signals = fresh_signals()
    with signals.deferred():
        said.append("nothing came")
    with pytest.raises(signals.Stopped):  # the block is over: a signal stops at once
        signals._handler(signal.SIGINT, None)
    signals = fresh_signals()
    with pytest.raises(signals.Stopped), signals.deferred(now=False):
        signals._handler(signal.SIGINT, None)  # not started: at once
    signals = fresh_signals()
    with pytest.raises(signals.Stopped), signals.deferred(now=False) as start:
        start()
        assert signals._handler(signal.SIGINT, None) is None


def test_a_reported_stop_is_the_signal_a_later_one_raises() -> None:
    """A stop reported before any signal (Python's KeyboardInterrupt) is the command's
    signal: one that comes during the clean-up raises it, not its own."""
    signals = fresh_signals()
    signals.report(signals.Terminated(signal.SIGQUIT), "")
    with pytest.raises(signals.Stopped) as raised:
        signals._handler(signal.SIGINT, None)
    assert raised.value.signum == signal.SIGQUIT
    # and a signal received first stays the command's, whatever stop is reported after
    signals = fresh_signals()
    with pytest.raises(signals.Stopped):
        signals._handler(signal.SIGHUP, None)
    assert signals.report(KeyboardInterrupt(), "") == 130
    with pytest.raises(signals.Stopped) as raised:
        signals._handler(signal.SIGINT, None)
    assert raised.value.signum == signal.SIGHUP


def test_install_handles_the_ending_signals_but_those_ignored_at_start() -> None:
    signals = fresh_signals()
    before = {s: signal.getsignal(s) for s in signals.ENDING}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(signals.install()))
        thread.start()
        thread.join()
        assert done == [None] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signals.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        for sent in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
            assert signal.getsignal(sent) is signals._handler
    finally:
        for sent, handler in before.items():
            signal.signal(sent, handler)


def test_held_names_the_lowest_signal_that_came_while_hold_blocked_it() -> None:
    """In a thread of its own (signals sent to it alone, then taken back): hold blocks
    the ending signals not blocked already, and held names the pending ones among them."""
    signals = fresh_signals()
    seen: dict[str, object] = {}

    def run() -> None:
        me = threading.get_ident()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # blocked before
        try:
            blocked = signals.hold()
            seen["blocked"] = blocked
            seen["none"] = signals.held(blocked)
            signal.pthread_kill(me, signal.SIGTERM)  # pending, but blocked before hold
            seen["before"] = signals.held(blocked)
            signal.pthread_kill(me, signal.SIGQUIT)
            signal.pthread_kill(me, signal.SIGHUP)
            seen["stop"] = signals.held(blocked)
        finally:
            while signal.sigtimedwait(list(signals.ENDING), 0) is not None:
                pass  # taken back: none reaches the process

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["blocked"] == {signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
    assert seen["none"] is None and seen["before"] is None
    stop = seen["stop"]
    assert isinstance(stop, signals.Terminated) and stop.signum == signal.SIGHUP


def test_ctrl_c_is_ignored_inside_the_block_and_handled_as_before_after() -> None:
    from warmfit.run.signals import ctrl_c_ignored

    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_ignored():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is before
    inside: list[object] = []

    def run() -> None:
        with ctrl_c_ignored():  # no handler can be set here: nothing changes
            inside.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert inside == [before]


@pytest.mark.parametrize("error", [AttributeError, OSError, ValueError])
def test_without_signal_masks_nothing_is_held(monkeypatch: pytest.MonkeyPatch, error: type) -> None:
    """Where signals cannot be blocked or looked at (no pthread_sigmask or sigpending),
    hold blocks none and held finds none."""
    signals = fresh_signals()

    def fails(*args: object) -> None:
        raise error("no signal masks here")

    monkeypatch.setattr(signal, "pthread_sigmask", fails)
    assert signals.hold() == set()
    if error is not ValueError:  # what sigpending may raise
        monkeypatch.setattr(signal, "sigpending", fails)
        assert signals.held({int(signal.SIGTERM)}) is None


def test_the_unraisable_hook_quiets_only_stops_and_is_installed_once(
    monkeypatch: pytest.MonkeyPatch, warmfit_handlers: Any
) -> None:
    """install() puts a hook before the one it finds: a stop raised in a finalizer is not
    handed on (it is recorded; the command raises it again), every other unraisable
    exception is, as it came; a second install() does not wrap its own hook again."""
    handed: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", handed.append)
    warmfit_handlers.install()
    hook = sys.unraisablehook
    warmfit_handlers.install()
    assert sys.unraisablehook is hook  # not wrapped twice

    def args(error: BaseException) -> Any:
        return SimpleNamespace(
            exc_type=type(error), exc_value=error, exc_traceback=None, err_msg=None, object=None
        )  # what Python hands a hook (sys.UnraisableHookArgs cannot be made in Python)

    for stop in (warmfit_handlers.Interrupted(), warmfit_handlers.Terminated(signal.SIGHUP)):
        hook(args(stop))
    assert handed == []
    other = args(ValueError("a finalizer's own error"))
    hook(other)
    assert handed == [other]
