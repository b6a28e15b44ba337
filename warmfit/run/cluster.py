"""A Dask cluster address, checked before Dask's client is given it, with a deadline.

Dask's client trusts what answers at an address: a TCP server that accepts the
connection and says nothing held ``replay --cluster`` forever, and an HTTP server
(or anything whose first bytes are not a Dask frame) made the client allocate
whatever its first 8 bytes read as (3.07 EiB: a traceback). A Dask scheduler
speaks first: on a new connection it writes its handshake, a frame whose first 8
bytes are its length (little-endian). :func:`probe` reads those 8 bytes, with a
deadline, and refuses an address that says nothing or something else;
:func:`connect` then starts the client with a deadline of its own.

Nothing here imports Dask; :mod:`warmfit.run.tasks` calls :func:`connect`.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any
from urllib.parse import urlsplit

from warmfit.errors import UsageError

#: Seconds an address has to answer, and the client to connect (times the patience).
ANSWER_SECONDS = 10.0
#: The largest first frame a scheduler's handshake is taken to be (it is a few hundred
#: bytes); anything larger is not Dask's protocol.
LARGEST_HANDSHAKE = 2**26


def _where(address: str) -> tuple[str, int] | None:
    """The host and port of a plain TCP address (``tcp://host:port`` or ``host:port``);
    None for another scheme (TLS, in-process), which is left to Dask."""
    text = address if "://" in address else f"tcp://{address}"
    parts = urlsplit(text)
    if parts.scheme != "tcp":
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.hostname is None or port is None:
        return None
    return parts.hostname, port


def probe(address: str, seconds: float) -> None:
    """Refuse (:class:`UsageError`) a TCP address that does not answer as a Dask
    scheduler does within ``seconds``: its first 8 bytes, the length of its
    handshake. Connection errors are left to Dask's client, which names them."""
    where = _where(address)
    if where is None:
        return
    try:
        sock = socket.create_connection(where, timeout=seconds)
    except OSError:
        return  # refused, unreachable: the client's own message says so
    try:
        sock.settimeout(seconds)
        head = b""
        while len(head) < 8:
            chunk = sock.recv(8 - len(head))
            if not chunk:
                break
            head += chunk
    except TimeoutError:
        raise UsageError(
            f"the address {address!r} accepted a connection but said nothing for "
            f"{seconds:g} s: a Dask scheduler answers at once (a web server waits for a "
            "request: is it one?). Check the address (the "
            "scheduler's, as 'dask scheduler' prints it: tcp://HOST:8786), or run without "
            "--cluster."
        ) from None
    except OSError:
        return
    finally:
        sock.close()
    if len(head) < 8 or struct.unpack("<Q", head)[0] > LARGEST_HANDSHAKE:
        raise UsageError(
            f"the address {address!r} answers, but not as a Dask scheduler (its first bytes: "
            f"{head[:8]!r}); is it a web server or another service? Give the scheduler's "
            "address, as 'dask scheduler' prints it (tcp://HOST:8786), or run without "
            "--cluster."
        )


def connect(client_class: Any, address: str, seconds: float) -> Any:
    """``client_class(address)`` (Dask's ``Client``), given ``seconds`` to connect and
    after :func:`probe`; a :class:`UsageError` naming the address otherwise. The client
    is started in a thread, so that a scheduler that stops answering part-way cannot
    hold the command past the deadline."""
    probe(address, seconds)
    made: list[Any] = []
    failed: list[BaseException] = []

    def start() -> None:
        try:
            made.append(client_class(address, timeout=f"{seconds:g}s"))
        except BaseException as exc:  # reported by the command's thread
            failed.append(exc)

    thread = threading.Thread(target=start, name="warmfit-cluster-connect", daemon=True)
    thread.start()
    thread.join(seconds + 5)
    if thread.is_alive():
        raise UsageError(
            f"cannot reach the Dask scheduler at {address!r}: it did not finish connecting "
            f"within {seconds + 5:g} s; check that the scheduler runs and answers, or run "
            "without --cluster."
        )
    if failed:
        exc = failed[0]
        if isinstance(exc, (OSError, TimeoutError, ValueError, MemoryError)):
            raise UsageError(
                f"cannot reach the Dask scheduler at {address!r} ({type(exc).__name__}: "
                f"{short_message(exc)}); start one ('dask scheduler', then 'dask worker ADDRESS' on "
                "each machine) or check the address."
            ) from None
        raise exc
    return made[0]


def short_message(exc: BaseException, limit: int = 200) -> str:
    """``exc``'s message on one line, cut to ``limit`` characters (a Dask error can run to
    pages): what a one-line error quotes of it."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
