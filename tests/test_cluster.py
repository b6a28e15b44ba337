"""``replay --cluster`` at an address that is not a Dask scheduler: one line, exit 2.

Issue 42: a TCP server that accepts and says nothing held the command forever;
an HTTP server made Dask's client allocate 3.07 EiB (a traceback). The servers
here are real, in threads of the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def serve(answer: bytes | None) -> Iterator[str]:
    """A TCP server on localhost: it accepts, reads what comes, and answers ``answer``
    once it has read something (None: never says anything); its address."""
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
            if answer is not None:
                threading.Thread(target=reply, args=(conn,), daemon=True).start()

    def reply(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(answer or b"")
        except OSError:
            pass

    threading.Thread(target=run, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[str]:
    yield from serve(None)


@pytest.fixture
def http() -> Iterator[str]:
    yield from serve(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")


@pytest.fixture
def banner() -> Iterator[str]:
    """A service that speaks first, as SSH does: its first 8 bytes are no Dask frame."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)

    def run() -> None:
        while True:
            try:
                conn, _ = server.accept()
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            except OSError:
                return

    threading.Thread(target=run, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()


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
