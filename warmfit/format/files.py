"""Reading only regular files, and writing every output atomically.

Every file warmfit writes (traces, ``--per-wave``, ``--write-expect``,
``plot -o``) goes through :func:`write_atomically`: the bytes go to a new
temporary file in the target's directory, created with the mode the umask
allows (``0o666 & ~umask``, as ``open()`` would, not ``mkstemp``'s 0600),
fsynced and renamed over the target. A write that fails half-way (a full
disk, a file-size limit, an interrupt) removes the temporary file and leaves
the target as it was, so a rerun works.

Every file warmfit reads is checked with :func:`not_regular` first, so a
FIFO or a device is refused instead of blocking or reading forever.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

from warmfit.errors import TraceError


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a data file, or ``None`` when it is a regular file.

    Symbolic links are followed.

    >>> not_regular("/dev/null")
    'is a character device, not a regular file'
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist (or is a broken symbolic link)"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((word for test, word in kinds if test(mode)), "a special file")
    return f"is {kind}, not a regular file"


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two existing paths name one file (through links, ``..`` or hard links)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def written_over(target: str | os.PathLike[str], inputs: Iterable[Path]) -> Path | None:
    """The input that writing ``target`` would replace, if any. A target that does not
    exist yet may still name one: ``missing/../trace.data`` once ``missing`` is made."""
    resolved = Path(target).resolve()
    for path in inputs:
        if same_file(target, path) or path.resolve() == resolved:
            return path
    return None


def write_atomically(
    path: str | os.PathLike[str],
    write: Callable[[BinaryIO], None],
    before_replace: Callable[[], object] | None = None,
) -> Path:
    """Write a file atomically: ``write(sink)`` fills a temporary file, then it is renamed.

    The temporary file lives in the target's directory (so the rename is
    atomic) and is created exclusively with mode ``0o666`` less the umask.
    Missing parent folders are created first (as ``mkdir -p``, with the
    umask's mode). On any failure the temporary file and the folders created
    for it are removed and the exception re-raised; the target is then
    untouched. The directory is fsynced after the rename. ``before_replace`` is called
    when the temporary file is whole, just before the rename (a command starts holding
    its signals there: :func:`warmfit.run.signals.deferred`).
    """
    target = Path(path)
    created = _make_parents(target.parent)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
    except BaseException:
        _remove_empty(created)
        raise
    try:
        with os.fdopen(fd, "wb") as sink:
            write(sink)
            sink.flush()
            os.fsync(sink.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        _remove_empty(created)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; return those created, deepest first."""
    missing = []
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    created = []
    try:
        for each in reversed(missing):
            try:
                each.mkdir()
            except FileExistsError:  # another writer made it meanwhile: theirs, never removed
                if not each.is_dir():
                    raise
                continue
            created.append(each)
    except BaseException:
        _remove_empty(created[::-1])
        raise
    return created[::-1]


def _remove_empty(folders: list[Path]) -> None:
    """Remove folders this module created (deepest first), where they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def write_bytes_atomically(
    path: str | os.PathLike[str], data: bytes, before_replace: Callable[[], object] | None = None
) -> Path:
    """:func:`write_atomically` for bytes already in memory."""

    def write(sink: BinaryIO) -> None:
        sink.write(data)

    return write_atomically(path, write, before_replace)


#: Files below a trace directory that are read as trace files.
TRACE_SUFFIX = ".parquet"
#: Words a newcomer may write after a flag (``--force true``), read as a path.
_FLAG_VALUES = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0"})


def find_trace_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and directories into the list of trace files to read.

    A directory contributes every ``*.parquet`` below it, sorted; a file named
    directly is read whatever its suffix. A missing path, a directory with no
    Parquet file, a directory that cannot be listed, and anything that is not
    a regular file (a FIFO, a device) are errors: nothing is skipped silently.
    """
    files: list[Path] = []
    seen: set[Path] = set()
    given = list(paths)
    if not given:
        raise TraceError(
            "no trace path given.", fix="Name one or more Parquet files or directories."
        )
    for raw in given:
        path = Path(raw)
        if path.is_dir():
            found = _parquet_below(path)
            if not found:
                hint = (
                    "Pass the -o directory of a 'warmfit record' run, or a folder of v1 "
                    "Parquet files (docs/reference/trace-format.md)."
                )
                if any(path.rglob("*.arrows")):
                    hint = (
                        "It holds write-ahead logs of a recording that did not finish: "
                        f"run 'warmfit recover {path}' first."
                    )
                raise TraceError("directory holds no *.parquet trace files.", path=path, fix=hint)
        elif os.path.lexists(path):
            found = [path]
        else:
            raise missing_path(path)
        for f in found:
            problem = not_regular(f)
            if problem is not None:
                raise TraceError(
                    f"{problem}; warmfit reads only regular files.",
                    path=f,
                    fix="Name the Parquet files themselves, or remove it from the trace folder.",
                )
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(f)
    return files


def missing_path(path: Path, hint: str | None = None) -> TraceError:
    """The error of a trace path that does not exist, with what it may have been meant as:
    the value of a flag (``--force true``), or ``hint``, the command's own guess."""
    fix = "Check the path."
    if path.name.lower() in _FLAG_VALUES:
        fix += (
            f" If {path.name!r} was meant as the value of a flag (--force), leave it "
            "out: a flag takes no value."
        )
    if hint:
        fix += f" {hint}"
    return TraceError("no such file or directory.", path=path, fix=fix)


def _parquet_below(directory: Path) -> list[Path]:
    """Every ``*.parquet`` entry below ``directory`` (not only regular files), sorted.

    Symbolic links to directories are not followed (as ``Path.rglob``); a
    directory that cannot be listed is an error naming it.
    """

    def unreadable(exc: OSError) -> None:
        where = exc.filename or directory
        raise TraceError(
            f"cannot be listed ({exc.strerror or exc}), so the trace would be incomplete.",
            path=where,
            fix="Make it readable (chmod a+rx), or name the readable parts of the trace.",
        )

    found = []
    for root, _dirs, names in os.walk(directory, onerror=unreadable):
        found += [Path(root, name) for name in names if name.endswith(TRACE_SUFFIX)]
    return sorted(found)
