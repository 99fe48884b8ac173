"""Atomic file replacement: a reader (or a resumed run) sees the old file or the new one, never half.

Every file bgp4 replaces in place (settings, checkpoints, split, metrics log, trajectories, MD
replica states) goes through `atomic_write`: write a temporary file beside the target, fsync it,
rename it over the target, fsync the directory so the rename itself survives a power cut.
Logs that grow a record at a time (metrics, sweep task records) are JSON lines: `append_record`
writes them and `read_records` reads them back, each surviving a kill in the middle of a line.
`exclusive` keeps two bgp4 processes of one machine from writing one output at once (a resume
started while the first run still goes on).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

from bgp4.errors import InputError

__all__ = [
    "append_record",
    "atomic_write",
    "check_output_file",
    "check_output_name",
    "exclusive",
    "file_fingerprint",
    "read_records",
    "temporary_path",
]

Content = Union[bytes, str, Callable[[Path], None]]


def temporary_path(path: str | os.PathLike) -> Path:
    """The temporary name `atomic_write` uses for `path`: same directory, same suffix (mdtraj and
    numpy look at the suffix), e.g. `model.pt` -> `model.tmp.pt`."""
    path = Path(path)
    return path.with_name(f"{path.stem}.tmp{path.suffix}")


def check_output_name(out: Path) -> None:
    """Refuse (InputError) an output that is no mdtraj HDF5 file name (`.h5`), or is a directory;
    touches nothing, so that it can run before any other check of an existing output."""
    if out.suffix != ".h5":
        raise InputError(f"output must be an mdtraj HDF5 file ending in .h5, got {out}")
    if out.is_dir():
        raise InputError(f"output {out} is a directory")


def check_output_file(out: Path) -> None:
    """Refuse (InputError) an output that is no writable mdtraj HDF5 file path (`.h5`); creates its
    directory."""
    check_output_name(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create directory {parent}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise InputError(f"cannot write to directory {parent}")


def atomic_write(path: str | os.PathLike, content: Content) -> Path:
    """Replace `path` atomically with `content`.

    content: bytes or text (UTF-8), or a function that writes the file at the path it is given
    (e.g. `lambda p: torch.save(obj, p)`). Returns `path`. On any error the target is left as it
    was and the temporary file is removed.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        if callable(content):
            content(tmp)
        else:
            data = content.encode() if isinstance(content, str) else content
            with open(tmp, "wb") as f:
                f.write(data)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return path


def append_record(path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """Append `record` as one JSON line to a log. A last line cut off by a kill is ended first, so
    it stays one unreadable line that `read_records` skips, instead of swallowing the new one."""
    with open(path, "ab+") as f:
        if f.tell() > 0:  # "a" mode starts at the end
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(json.dumps(record).encode() + b"\n")


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a log written by `append_record`, in order; lines cut off by a kill are left
    out, and a missing log has none."""
    path = Path(path)
    records = []
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory if str(directory) else ".", os.O_RDONLY)
    except OSError:  # not every platform can open a directory (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_fingerprint(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """A cheap identity of a file's content: its size and a SHA-256 of its first and last `chunk`
    bytes. A copied or moved file keeps it; other MD data differs in its first frames already."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(chunk))
        if size > chunk:
            f.seek(max(chunk, size - chunk))
            digest.update(f.read(chunk))
    return f"{size}:{digest.hexdigest()[:32]}"


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[None]:
    """Hold this user's lock on the output `path` (a file or a directory) for the block.

    A second process asking for the same path, say a resume started while the first run still
    goes on, gets InputError naming the holder instead of writing beside it. The lock (`filelock`,
    as the sweep's task locks) is a file in this user's folder of the temporary directory, named
    by a hash of the resolved path, so nothing is written beside the output; the kernel drops it
    with the process, so a killed run never leaves it held. It sees the processes of this user
    that share the temporary directory on this machine, not other users, jobs given their own
    TMPDIR, or other machines; and the path itself only, not outputs inside it.
    """
    from filelock import FileLock, Timeout

    folder = _lock_folder()
    key = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:24]
    lock, holder = FileLock(str(folder / f"{key}.lock")), folder / f"{key}.pid"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise InputError(
            f"{path} is in use by {_holder(holder)}: let it finish, or stop it and run the command again to resume"
        ) from None
    try:
        with contextlib.suppress(OSError):  # the pid only names the holder in the message
            atomic_write(holder, str(os.getpid()))
        yield
    finally:
        with contextlib.suppress(OSError):  # before the release, so never a later holder's
            holder.unlink()
        lock.release()


def _lock_folder() -> Path:
    """This user's lock folder in the temporary directory; refused unless a directory of this user
    that no one else may write (another user could hold or redirect its locks)."""
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    folder = Path(tempfile.gettempdir()) / f"bgp4-locks-{user}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    if not (stat.S_ISDIR(info.st_mode) and mine and info.st_mode & 0o022 == 0):
        raise InputError(f"{folder} is not a directory of this user that only it may write: remove it, or set TMPDIR")
    return folder


def _holder(pid_file: Path) -> str:
    """'bgp4 process PID' of a live holder, else 'another process' (its pid not yet or no longer on file)."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return "another process"
    return f"bgp4 process {pid}"
