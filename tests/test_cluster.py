"""``replay --cluster`` at an address that is not a Dask scheduler: one line, exit 2.

Issue 42: a TCP server that accepts and says nothing held the command forever;
an HTTP server made Dask's client allocate 3.07 EiB (a traceback). The servers
here are real, in threads of the test.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.command_line import warmfit_output

REPO = Path(__file__).resolve().parent.parent


def listening(on_connect: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on localhost that hands each connection to ``on_connect`` (in its
    thread); its address. Its connections and socket are closed at the end."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def run() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            on_connect(conn)

    threading.Thread(target=run, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def serve(answer: bytes | None) -> Iterator[str]:
    """A TCP server on localhost: it accepts, reads what comes, and answers ``answer``
    once it has read something (None: never says anything); its address."""

    def reply(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(answer or b"")
        except OSError:
            pass

    def on_connect(conn: socket.socket) -> None:
        if answer is not None:
            threading.Thread(target=reply, args=(conn,), daemon=True).start()

    yield from listening(on_connect)


@pytest.fixture
def silent() -> Iterator[str]:
    yield from serve(None)


@pytest.fixture
def http() -> Iterator[str]:
    yield from serve(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")


@pytest.fixture
def banner() -> Iterator[str]:
    """A service that speaks first, as SSH does: its first 8 bytes are no Dask frame."""
    yield from speaker(b"SSH-2.0-OpenSSH_9.6\r\n")


def replay_at(address: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("distributed")
    return subprocess.run(
        [sys.executable, "-m", "warmfit", "replay", "traces/pr991", "--cluster", address],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "WARMFIT_WORKER_PATIENCE": "0.2"},
    )  # fmt: skip


@pytest.mark.parametrize("server, said", [
    ("silent", "said nothing for 2 s"),
    ("http", "said nothing for 2 s"),
    ("banner", "not as a Dask scheduler"),
])  # fmt: skip
def test_an_address_that_is_no_scheduler_is_one_line_and_exit_2(
    request: pytest.FixtureRequest, server: str, said: str
) -> None:
    address = request.getfixturevalue(server)
    done = replay_at(address)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and address in lines[0], done.stderr


# --------------------------------------------------------------------------- in this process
# probe and connect run here, so that a mutant of warmfit.run.cluster is seen by the tests
# that trace it (the command above runs in a process of its own).


def speaker(*parts: bytes, pause: float = 0.05, hold: bool = True) -> Iterator[str]:
    """A server that speaks first, as a Dask scheduler does: on each connection it
    sends ``parts`` one after another (``pause`` s apart), then holds the connection
    open (``hold``) or closes it; its address."""

    def speak(conn: socket.socket) -> None:
        try:
            for i, part in enumerate(parts):
                if i:
                    time.sleep(pause)
                conn.sendall(part)
        except OSError:
            return
        if not hold:
            conn.close()

    yield from listening(speak)


def frame(length: int) -> bytes:
    """A handshake frame's first 8 bytes: its length, little-endian."""
    return struct.pack("<Q", length)


@pytest.mark.parametrize(
    ("address", "where"),
    [
        ("tcp://10.0.0.7:8786", ("10.0.0.7", 8786)),
        ("10.0.0.7:8786", ("10.0.0.7", 8786)),  # no scheme: TCP, as Dask takes it
        ("scheduler.example:1", ("scheduler.example", 1)),
        ("tls://10.0.0.7:8786", None),  # left to Dask
        ("inproc://10.0.0.7/1/2", None),
        ("tcp://10.0.0.7:notaport", None),  # urlsplit's ValueError
        ("tcp://10.0.0.7", None),  # no port
        ("tcp://:8786", None),  # no host
    ],
)
def test_where_is_the_host_and_port_of_a_tcp_address_only(
    address: str, where: tuple[str, int] | None
) -> None:
    from warmfit.run.cluster import _where

    assert _where(address) == where


@pytest.mark.parametrize(
    "parts",
    [
        (frame(300) + b"x" * 300,),  # at once, with the handshake after its length
        (frame(300)[:3], frame(300)[3:] + b"x" * 300),  # its length in two pieces
        (frame(300)[:1], frame(300)[1:5], frame(300)[5:]),  # in three, nothing more
        (frame(2**26),),  # the largest handshake taken for Dask's
        (frame(1),),
    ],
    ids=["whole", "two-pieces", "three-pieces", "largest", "smallest"],
)
def test_probe_takes_a_server_whose_first_8_bytes_are_a_frames_length(
    parts: tuple[bytes, ...],
) -> None:
    """The first 8 bytes, however they come, read as a length up to 2**26: a scheduler.
    The connection stays open after them (a scheduler waits for the client): probe
    must stop reading at 8 bytes, not wait for a 9th."""
    from warmfit.run.cluster import LARGEST_HANDSHAKE, probe

    assert LARGEST_HANDSHAKE == 2**26  # 64 MiB: a handshake is a few hundred bytes
    for address in speaker(*parts):
        probe(address, 2.0)


@pytest.mark.parametrize(
    ("parts", "hold", "said"),
    [
        ((frame(2**26 + 1),), True, "not as a Dask scheduler"),  # one byte past the largest
        ((frame(2**63),), True, "not as a Dask scheduler"),
        ((b"SSH-2.0-",), True, "not as a Dask scheduler"),
        ((frame(300)[:3],), False, "not as a Dask scheduler"),  # 3 bytes, then closed
        ((b"",), False, "not as a Dask scheduler"),  # closed at once
        ((frame(300)[:5],), True, "said nothing for 0.5 s"),  # 5 bytes, then silence
        ((), True, "said nothing for 0.5 s"),
    ],
    ids=["past-largest", "2**63", "banner", "short-closed", "closed", "short-silent", "silent"],
)
def test_probe_refuses_a_server_that_does_not_answer_as_a_scheduler(
    parts: tuple[bytes, ...], hold: bool, said: str
) -> None:
    from warmfit.errors import UsageError
    from warmfit.run.cluster import probe

    for address in speaker(*parts, hold=hold):
        with pytest.raises(UsageError) as raised:
            probe(address, 0.5)
        assert said in str(raised.value) and repr(address) in str(raised.value)


def test_probe_leaves_other_schemes_and_refused_connections_to_the_client() -> None:
    """An address that is not plain TCP, or where nothing listens, is not probed: the
    client's own error names it."""
    from warmfit.run.cluster import probe

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    assert probe(f"tcp://127.0.0.1:{port}", 1.0) is None
    assert probe("tls://127.0.0.1:1", 1.0) is None
    assert probe("inproc://127.0.0.1/1/2", 1.0) is None


#: The timeouts :class:`Recorded` threads were joined with.
joined: list[float | None] = []


class Recorded(threading.Thread):
    """A thread whose ``join`` records its timeout (in :data:`joined`) and waits at most
    0.2 s of it."""

    def join(self, timeout: float | None = None) -> None:
        joined.append(timeout)
        super().join(None if timeout is None else min(timeout, 0.2))


def test_connect_starts_the_client_with_the_deadline_and_returns_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from warmfit.run import cluster

    made: list[tuple[str, str]] = []

    class Client:
        def __init__(self, address: str, timeout: str) -> None:
            made.append((address, timeout))

    monkeypatch.setattr(cluster, "threading", SimpleNamespace(Thread=Recorded))
    joined.clear()
    client = cluster.connect(Client, "tls://10.0.0.7:8786", 2.5)
    assert isinstance(client, Client)
    assert made == [("tls://10.0.0.7:8786", "2.5s")]
    assert joined == [7.5]  # the deadline and 5 s more for the thread


def test_a_client_that_never_connects_ends_at_the_deadline_it_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's thread is waited for ``seconds + 5`` s, the figure the message says,
    and is left behind as a daemon, so that it cannot hold the process's exit."""
    from warmfit.errors import UsageError
    from warmfit.run import cluster

    release = threading.Event()
    threads: list[threading.Thread] = []

    class Stuck(Recorded):
        def start(self) -> None:
            threads.append(self)
            super().start()

    def client(address: str, timeout: str) -> None:
        release.wait(30)

    monkeypatch.setattr(cluster, "threading", SimpleNamespace(Thread=Stuck))
    joined.clear()
    try:
        with pytest.raises(UsageError) as raised:
            cluster.connect(client, "tls://10.0.0.7:8786", 1.0)
        assert "did not finish connecting within 6 s" in str(raised.value)
        assert joined == [6.0]
        assert [t.daemon for t in threads] == [True]
    finally:
        release.set()
        for thread in threads:
            threading.Thread.join(thread)


@pytest.mark.parametrize("error", [OSError, TimeoutError, ValueError, MemoryError])
def test_a_client_that_fails_to_connect_is_one_usage_error_naming_the_address(
    error: type[BaseException],
) -> None:
    from warmfit.errors import UsageError
    from warmfit.run.cluster import connect

    def client(address: str, timeout: str) -> None:
        raise error("no route\n  to   host")

    with pytest.raises(UsageError) as raised:
        connect(client, "tls://10.0.0.7:8786", 1.0)
    said = str(raised.value)
    assert "'tls://10.0.0.7:8786'" in said and f"({error.__name__}: no route to host)" in said


def test_another_error_of_the_client_is_raised_as_it_is() -> None:
    from warmfit.run.cluster import connect

    def client(address: str, timeout: str) -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):
        connect(client, "tls://10.0.0.7:8786", 1.0)


@pytest.mark.parametrize(
    ("text", "short"),
    [
        ("x" * 200, "x" * 200),  # at the limit: whole
        ("x" * 201, "x" * 197 + "..."),  # one past: 200 characters with the dots
        ("a  b\n\tc", "a b c"),  # whitespace made single spaces
    ],
)
def test_short_keeps_a_message_to_one_line_of_200_characters(text: str, short: str) -> None:
    from warmfit.run.cluster import short_message

    assert short_message(OSError(text)) == short
    assert short_message(OSError("y" * 50), limit=10) == "y" * 7 + "..."


def test_a_replay_gives_an_address_10_s_times_the_patience_to_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command's runner probes the address with ANSWER_SECONDS (10 s) times
    WARMFIT_WORKER_PATIENCE: 2 s at 0.2 (the command above, in this process)."""
    pytest.importorskip("distributed")
    from warmfit.errors import UsageError
    from warmfit.run.tasks import Runner

    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "0.2")
    for address in speaker():
        with pytest.raises(UsageError, match=r"said nothing for 2 s: "):
            Runner(1, address).workers()


@pytest.mark.parametrize(("command", "needed"), [
    ("replay", []), ("sweep", []), ("recommend", ["--budget", "80GiB"]),
    ("plot", ["-o", "{tmp}/p.png"]), ("check", ["--write-expect", "{tmp}/e.toml"]),
])  # fmt: skip
def test_cluster_and_jobs_together_are_a_usage_error(
    tmp_path: Path, command: str, needed: list[str]
) -> None:
    """Refused before the cluster is reached (the address answers nothing here) and
    before anything is written."""
    args = [a.format(tmp=tmp_path) for a in needed]
    code, output = warmfit_output(
        command, str(REPO / "traces/pr991"), *args, "--cluster", "tcp://x:1", "--jobs", "2"
    )
    assert (code, output) == (2, (
        "warmfit: error: --cluster runs the batches on the cluster's workers, --jobs on this "
        "machine's cores: give one of them.\n"
    ))  # fmt: skip
    assert list(tmp_path.iterdir()) == []
