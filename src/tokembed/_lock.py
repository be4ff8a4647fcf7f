"""One writer per output folder: an advisory ``fcntl.flock`` on a lock file of tokembed's own.

The lock file (``DIR/.tokembed.lock``) stays empty and is never removed: removing a lock file
while another process waits on it would let two processes hold "the" lock on two different files.
The kernel drops the lock when its holder exits, however it exits (kill -9 included), so a crash
never leaves the folder locked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LOCK_NAME", "NO_LOCKS", "folder_lock", "waiting_lock"]

LOCK_NAME = ".tokembed.lock"
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # what flock raises on a file system without locks

_log = logging.getLogger(__name__)


def _holder(path: Path) -> str:
    """The process holding a lock on ``path``, from ``/proc/locks`` (Linux); "another process" elsewhere."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks", encoding="ascii") as f:
            for line in f:
                fields = line.split()  # 1: FLOCK ADVISORY WRITE 4242 08:01:1234 0 EOF
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                    return f"process {fields[4]}"
    except (OSError, ValueError):
        pass
    return "another process"


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike, *, what: str, shared: bool = False) -> Iterator[None]:
    """Hold the lock of ``folder`` (which must exist) for the block.

    Args:
        folder: the output folder.
        what: the command, for the message (``"tokembed prepare"``).
        shared: a shared lock (ranks of one run write the same folder together); an exclusive lock
            excludes every other holder.

    Raises:
        BlockingIOError: another process holds the lock; the message names it.
    """
    path = Path(folder) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise BlockingIOError(
                f"{folder} is being written by {_holder(path)} (it holds {path}); wait for it to finish, or use another output folder"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def waiting_lock(path: str | os.PathLike) -> Iterator[bool]:
    """Hold an exclusive lock on the file ``path`` (created empty when absent, never removed) for the block,
    waiting while another process or thread holds it: one of them makes a shared file, the others then read it.

    Only an economy: on a file system without locks (ENOLCK, EOPNOTSUPP) the block runs unlocked, so what it
    writes must be safe to write twice (atomically, as `tokembed._atomic` writes). The block is given whether the
    lock is held (False: unlocked), e.g. to clear what a killed holder left only when no one else can be writing.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        yield _lock_waiting(fd, Path(path))
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _lock_waiting(fd: int, path: Path) -> bool:
    """An exclusive flock on ``fd``, saying who holds it before waiting (a stuck holder is then found, not guessed):
    True; False (nothing) on a file system without locks."""
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log.info("waiting for %s, which holds %s", _holder(path), path)
            fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        if e.errno not in (*NO_LOCKS, errno.EINVAL):
            raise
        return False
    return True
