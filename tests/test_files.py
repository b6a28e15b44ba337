"""warmfit.format.files: which paths are read, and how outputs are written.

Each function is checked on real files made in tmp_path (a FIFO, a socket, links,
a path through a file), the answers spelled out, not compared with the code's own
helpers.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from warmfit.errors import TraceError
from warmfit.format.files import (
    find_trace_files,
    missing_path,
    not_regular,
    same_file,
    write_atomically,
    write_bytes_atomically,
    written_over,
)


def test_a_regular_file_and_a_link_to_one_are_regular(tmp_path: Path) -> None:
    data = tmp_path / "t.parquet"
    data.write_bytes(b"x")
    link = tmp_path / "link.parquet"
    link.symlink_to(data)
    assert (not_regular(data), not_regular(link)) == (None, None)


def test_what_is_not_a_regular_file_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(sock))
        assert not_regular(sock) == "is a socket, not a regular file"
    assert not_regular(folder) == "is a directory, not a regular file"
    assert not_regular(fifo) == "is a FIFO (named pipe), not a regular file"
    assert not_regular("/dev/null") == "is a character device, not a regular file"


def test_a_missing_path_and_a_broken_link_do_not_exist(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.symlink_to(tmp_path / "gone")
    said = "does not exist (or is a broken symbolic link)"
    assert not_regular(tmp_path / "missing") == said
    assert not_regular(broken) == said


def test_a_path_through_a_file_cannot_be_examined(tmp_path: Path) -> None:
    data = tmp_path / "t.parquet"
    data.write_bytes(b"x")
    assert not_regular(data / "inside") == "cannot be examined (Not a directory)"


def test_same_file_through_links_dots_and_hard_links(tmp_path: Path) -> None:
    a = tmp_path / "a"
    a.write_bytes(b"x")
    b = tmp_path / "b"
    b.write_bytes(b"x")
    (tmp_path / "sub").mkdir()
    hard = tmp_path / "hard"
    os.link(a, hard)
    soft = tmp_path / "soft"
    soft.symlink_to(a)
    assert same_file(a, tmp_path / "sub" / ".." / "a")
    assert same_file(a, hard) and same_file(soft, a)
    assert not same_file(a, b)  # equal bytes, two files
    assert not same_file(a, tmp_path / "missing")  # an error is "not the same"


def test_written_over_names_the_input_a_target_would_replace(tmp_path: Path) -> None:
    a = tmp_path / "a.parquet"
    a.write_bytes(b"x")
    b = tmp_path / "b.parquet"
    b.write_bytes(b"y")
    hard = tmp_path / "hard.parquet"
    os.link(b, hard)
    assert written_over(tmp_path / "new.csv", [a, b]) is None  # nothing there yet
    # a target that does not exist yet still names the input, once 'missing' is made
    assert written_over(tmp_path / "missing" / ".." / "a.parquet", [a]) == a
    (tmp_path / "sub").mkdir()
    assert written_over(tmp_path / "sub" / ".." / "a.parquet", [b, a]) == a
    assert written_over(hard, [a, b]) == b  # the same file under another name
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "later.parquet")  # a link to an input not made yet
    assert written_over(dangling, [tmp_path / "later.parquet"]) == tmp_path / "later.parquet"


def test_an_atomic_write_makes_its_folders_with_the_umask_and_replaces_the_target(
    tmp_path: Path,
) -> None:
    target = tmp_path / "new" / "deeper" / "out.csv"
    old = os.umask(0o027)
    try:
        assert write_bytes_atomically(target, b"first") == target
        mode = stat.S_IMODE(target.stat().st_mode)
        folder_mode = stat.S_IMODE(target.parent.stat().st_mode)
    finally:
        os.umask(old)
    assert target.read_bytes() == b"first"
    assert (mode, folder_mode) == (0o640, 0o750)  # 0o666 and 0o777 less the umask
    write_bytes_atomically(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.csv"]  # no temporary file


def test_a_failed_write_leaves_the_target_and_removes_what_it_made(tmp_path: Path) -> None:
    kept = tmp_path / "kept.csv"
    kept.write_bytes(b"old")

    def fails(sink: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomically(kept, fails)
    assert kept.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["kept.csv"]
    (tmp_path / "there").mkdir()
    with pytest.raises(OSError, match="No space"):
        write_atomically(tmp_path / "there" / "a" / "b" / "out.csv", fails)
    # the folders it made are gone; the one that was there stays
    assert sorted(os.listdir(tmp_path)) == ["kept.csv", "there"]
    assert os.listdir(tmp_path / "there") == []


def test_before_replace_is_called_once_with_the_temporary_file_whole_and_the_target_old(
    tmp_path: Path,
) -> None:
    """The hook a command starts holding its signals with: called once, after the
    contents are written and before the rename; if it raises, nothing is replaced."""
    target = tmp_path / "out.csv"
    target.write_bytes(b"old")
    seen: list[tuple[bytes, list[bytes]]] = []

    def look() -> None:
        temporary = [p.read_bytes() for p in tmp_path.iterdir() if p != target]
        seen.append((target.read_bytes(), temporary))

    write_bytes_atomically(target, b"new", look)
    assert seen == [(b"old", [b"new"])] and target.read_bytes() == b"new"

    def refuses() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_bytes_atomically(target, b"newer", refuses)
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["out.csv"]


def test_a_folder_contributes_its_parquet_files_sorted_and_a_file_is_read_by_name(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace"
    (trace / "rank=1").mkdir(parents=True)
    (trace / "rank=0").mkdir()
    for name in ["rank=1/b.parquet", "rank=0/a.parquet", "rank=0/notes.txt"]:
        (trace / name).write_bytes(b"x")
    other = tmp_path / "other.bin"
    other.write_bytes(b"x")
    found = find_trace_files([trace, other, trace / "rank=0" / "a.parquet"])
    # sorted below the folder, then the file named (any suffix); a file named twice once
    assert found == [trace / "rank=0/a.parquet", trace / "rank=1/b.parquet", other]


@pytest.mark.parametrize(
    ("make", "said"),
    [
        ("nothing", "no trace path given"),
        ("missing", "no such file or directory"),
        ("empty", "directory holds no *.parquet trace files"),
        ("logs", "run 'warmfit recover"),
        ("fifo", "is a FIFO (named pipe), not a regular file; warmfit reads only regular"),
    ],
)
def test_what_cannot_be_read_as_a_trace_is_an_error(tmp_path: Path, make: str, said: str) -> None:
    paths: list[Path] = []
    if make == "missing":
        paths = [tmp_path / "true"]
    elif make in ("empty", "logs"):
        folder = tmp_path / "run"
        folder.mkdir()
        if make == "logs":
            (folder / "rank=0.arrows").write_bytes(b"x")
        paths = [folder]
    elif make == "fifo":
        folder = tmp_path / "run"
        folder.mkdir()
        os.mkfifo(folder / "t.parquet")
        paths = [folder]
    with pytest.raises(TraceError) as raised:
        find_trace_files(paths)
    assert said in str(raised.value)
    if make == "missing":  # 'true' may have been meant as a flag's value
        assert "a flag takes no value" in str(raised.value)
    if make == "empty":  # no logs there: nothing to recover
        assert "recover" not in str(raised.value) and "-o directory" in str(raised.value)


def test_folders_made_before_one_that_fails_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``a/b/c/out.csv`` where making ``c`` fails (a quota, a race): ``a`` and ``b``,
    made for the write, are removed too, deepest first."""
    made = []
    real_mkdir = Path.mkdir

    def mkdir(self: Path, *args: object, **kwargs: object) -> None:
        if self.name == "c":
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self.name)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(PermissionError):
        write_bytes_atomically(tmp_path / "a" / "b" / "c" / "out.csv", b"x")
    assert made == ["a", "b"] and os.listdir(tmp_path) == []


def made_meanwhile(monkeypatch: pytest.MonkeyPatch, path: Path, make: Callable[[], object]) -> None:
    """Another writer makes ``path`` (``make()``) between this write's look (it is missing)
    and its ``mkdir``."""
    import warmfit.format.files as files

    real_lexists = os.path.lexists

    def racing(seen: object) -> bool:
        if Path(str(seen)) == path and not real_lexists(path):
            make()
            return False
        return real_lexists(seen)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os.path, "lexists", racing)


def test_a_folder_another_writer_makes_meanwhile_is_used_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers into one new folder: the folder is missing when this one looks, and
    there when it makes it (the other made it meanwhile). The write goes on."""
    shared = tmp_path / "shared"
    made_meanwhile(monkeypatch, shared, shared.mkdir)
    assert write_bytes_atomically(shared / "out.csv", b"x").read_bytes() == b"x"


def test_a_failed_write_leaves_the_folder_another_writer_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, and this write then fails (a full disk): the folder is the other
    writer's, who may be about to write into it; it stays. The folder this write made
    below it is removed. A file made there meanwhile is an error, not a folder."""
    shared = tmp_path / "shared"

    def fails(sink: object) -> None:
        raise OSError(28, "No space left on device")

    made_meanwhile(monkeypatch, shared, shared.mkdir)
    with pytest.raises(OSError, match="No space"):
        write_atomically(shared / "mine" / "out.csv", fails)
    assert os.listdir(tmp_path) == ["shared"] and os.listdir(shared) == []
    made_meanwhile(monkeypatch, tmp_path / "f", (tmp_path / "f").touch)
    with pytest.raises(FileExistsError):
        write_bytes_atomically(tmp_path / "f" / "out.csv", b"x")


def test_a_missing_paths_fix_names_a_flags_value_and_the_commands_guess() -> None:
    plain = str(missing_path(Path("traces/mine"), None))
    assert plain.endswith("Check the path.")
    assert "flag" not in plain
    flag = str(missing_path(Path("TRUE"), None))
    assert "If 'TRUE' was meant as the value of a flag (--force), leave it out" in flag
    guessed = str(missing_path(Path("traces/mine"), "Did you mean traces/mine.parquet?"))
    assert guessed.endswith("Check the path. Did you mean traces/mine.parquet?")


def test_a_temporary_file_removed_by_someone_else_keeps_the_writes_own_error(
    tmp_path: Path,
) -> None:
    """A cleaner (tmpreaper, a person) removes the temporary file while the write fails:
    the error raised is the write's own, not a FileNotFoundError from the clean-up."""

    def removed_then_full(sink: object) -> None:
        for stray in tmp_path.glob(".out.csv.*.tmp"):
            stray.unlink()
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(tmp_path / "out.csv", removed_then_full)
    assert os.listdir(tmp_path) == []
