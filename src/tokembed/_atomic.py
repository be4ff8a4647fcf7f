"""Writing files so that nothing a user prepared is ever lost or half-written.

Every file goes to a temporary name in the same folder (``.NAME.tmp-XXXX``), is fsync'ed, then renamed
over its final name with ``os.replace`` (atomic on POSIX), and the folder is fsync'ed so the rename
survives a crash. A reader sees the old file or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "atomic_create",
    "atomic_open",
    "atomic_write",
    "atomic_write_json",
    "check_target",
    "fsync_dir",
    "is_temp_file",
]


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (no-op where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def is_temp_file(name: str) -> bool:
    """Whether ``name`` is a temporary file left by an interrupted atomic write."""
    return name.startswith(".") and ".tmp-" in name


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """Open a temporary file beside ``path``; when the block ends without error, fsync it and rename it to ``path``.

    On any error the temporary file is removed and ``path`` is left as it was. Text modes write UTF-8 with
    ``\\n`` line ends.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the mode open() would
    try:
        text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write(path: str | os.PathLike, data: bytes | memoryview | np.ndarray) -> None:
    """Write ``data`` (bytes, or an array's raw bytes) to ``path`` atomically."""
    buf = memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else memoryview(data)
    with atomic_open(path, "wb") as f:
        f.write(buf)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented, key-ordered JSON (stable bytes for equal content) atomically."""
    atomic_write(path, (json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_target(path: Path, overwrite: bool) -> None:
    """Refuse an existing ``path`` unless ``overwrite``, and a folder always."""
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} already exists; choose another name or pass overwrite=True (--force) to replace it"
        )
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; give a file name")


@contextlib.contextmanager
def atomic_create(path: str | os.PathLike, mode: str = "w", *, overwrite: bool = False):
    """`atomic_open` for a file the user names (an export, a report, a figure).

    Refuses an existing ``path`` unless ``overwrite``; on any error ``path`` is left as it was.
    """
    check_target(Path(path), overwrite)
    with atomic_open(path, mode) as f:
        yield f
