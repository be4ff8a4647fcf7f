"""A bounded, verified block cache on local disk, shared by every process of one machine.

Remote files are read in *blocks* (byte ranges of a few MiB). A block is fetched, checked against the sha256
the manifest records for it, written to a temporary file, fsync'ed and renamed into place: a block file that
exists is a verified block, whatever moment a process was killed at (``kill -9`` leaves at most a temporary
file, which the next admission removes). Layout::

    CACHE/.tokembed-cache.lock            admissions (flock, held for the bookkeeping only)
    CACHE/v-<manifest sha256>/            one folder version: blocks of another version never mix in
        source.json                       the folder's URL (no credentials) and manifest hash
        .locks/NN                         fetch locks (striped): a block is fetched by one process at a time
        train/00000.bin.000017            block 17 of train/00000.bin (bytes 17 * block_bytes ...)

**The bound.** Every admission runs under the cache lock: it counts the bytes of block and temporary files
and makes room by evicting before it creates the block's temporary file at its full size, so the files never
hold more than ``cache_bytes``, except for blocks *in use* (a process reading a block holds a shared flock on
it, and an eviction takes the block only when it can lock it exclusively). A read that needs a block when
everything else is in use admits it anyway: the cache then holds ``cache_bytes`` plus blocks in use, also when
it is smaller than one shard or one block.

**Eviction** asks the process's `future` (the loader's known order, `tokembed.storage.future.NextUse`) when
each cached block is next needed and evicts the one needed furthest in the future (Belady's rule); blocks the
future does not mention (another folder's, or not needed again) go first. A prefetch is admitted only if it
evicts nothing needed sooner than the block it brings, and prefetches are admitted in the order of need
(`FolderBlocks.reserve_prefetch`, then `fill` in parallel): prefetching then never costs an extra fetch. Without a future (a plain `ShardSet.read`), the least
recently used block goes (``policy="lru"`` forces that, for comparisons).

Several processes and threads share the cache: a block being fetched holds its stripe lock, so another
process that needs it waits and then finds it in place (a block is fetched once per machine).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import secrets
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tokembed._atomic import atomic_write_json, fsync_dir
from tokembed._lock import NO_LOCKS
from tokembed.storage.options import format_size
from tokembed.storage.stores import RemoteError, Store

__all__ = ["BLOCK_BYTES", "NEVER", "BlockCache", "BlockSpec", "CorruptBlockError", "FolderBlocks", "Pin", "Reservation"]

BLOCK_BYTES = 4 << 20  # 4 MiB: a ranged GET long enough to reach the server's bandwidth, short enough to waste little
NEVER = np.int64(1) << np.int64(62)  # the next use of a block the future does not mention
_LOCK = ".tokembed-cache.lock"
_STRIPES = 256  # fetch-lock files per folder version: few files, rare waits between unrelated blocks


class CorruptBlockError(ValueError):
    """A block that does not match its manifest hash even when fetched again: the object changed."""


class Future(Protocol):
    """When blocks are needed next: the loader's knowledge of its order (see `tokembed.storage.future`)."""

    def next_use(self, version: str, key: str, blocks: np.ndarray) -> np.ndarray:
        """Next-use times of ``blocks`` of file ``key`` of folder ``version``: int64, `NEVER` when not needed."""
        ...


@dataclass(frozen=True)
class BlockSpec:
    """The blocks of one remote file.

    Attributes:
        key: the file, relative to the folder (``"train/00000.bin"``).
        size: its size in bytes.
        block_bytes: the block size; the last block may be shorter. A whole-file spec (a manifest without
            block hashes) has one block of the whole file.
        sha256: the sha256 of each block, in order.
    """

    key: str
    size: int
    block_bytes: int
    sha256: tuple[str, ...]

    def __post_init__(self) -> None:
        n = max(1, -(-self.size // self.block_bytes)) if self.block_bytes else 1
        if len(self.sha256) != n:
            raise ValueError(
                f"{self.key}: {len(self.sha256)} block hashes for {self.size} bytes in blocks of {self.block_bytes}"
            )

    @property
    def n_blocks(self) -> int:
        return len(self.sha256)

    def span(self, b: int) -> tuple[int, int]:
        """Bytes ``[start, end)`` of block ``b``."""
        start = b * self.block_bytes
        return start, min(self.size, start + self.block_bytes)


@dataclass
class Stats:
    """What this process's cache did: fetches, bytes fetched, hits, blocks refetched after a bad hash."""

    fetched_blocks: int = 0
    fetched_bytes: int = 0
    hits: int = 0
    waits: int = 0
    refetched: int = 0
    evicted_blocks: int = 0
    prefetched_blocks: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Reservation:
    """Room made for a block about to be fetched: its fetch lock, its temporary file (open, at full size)."""

    lock: int
    fd: int
    tmp: Path
    key: str
    block: int


class Pin:
    """A block in use: its file is open under a shared lock (no eviction takes it) and mapped."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else None

    def array(self, dtype: np.dtype) -> np.ndarray:
        """The block's bytes as a read-only array of ``dtype``: (size // itemsize,)."""
        if self._map is None:
            return np.zeros(0, dtype)
        return np.frombuffer(self._map, dtype=dtype)

    def release(self) -> None:
        if self.fd >= 0:
            if self._map is not None:
                with contextlib.suppress(BufferError):  # an array still refers to it: the GC closes it later
                    self._map.close()
            os.close(self.fd)  # releases the shared lock
            self.fd = -1


@dataclass
class _Entry:
    """A block or temporary file found by a scan."""

    path: Path
    size: int
    version: str
    key: str
    block: int
    mtime: float
    temp: bool = False


@dataclass
class BlockCache:
    """The machine's block cache at ``root``, holding at most ``cache_bytes`` (plus blocks in use).

    Args:
        root: the cache folder (created when missing).
        cache_bytes: the bound.
        policy: ``"belady"`` (the future's next uses; LRU where there is no future) or ``"lru"``.
        fetch_log: append ``version key block bytes`` per fetch to this file (tests and benchmarks count with it).
    """

    root: Path
    cache_bytes: int
    policy: str = "belady"
    fetch_log: Path | None = None
    future: Future | None = None
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        if self.policy not in ("belady", "lru"):
            raise ValueError(f"policy must be 'belady' or 'lru', got {self.policy!r}")
        if self.cache_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {self.cache_bytes}")
        self.root = Path(self.root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OSError(
                e.errno,
                f"cannot create the cache folder {self.root} ({os.strerror(e.errno or 0)}); give --cache-dir on a writable disk",
            ) from None
        self._mutex = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "future": None, "stats": Stats()}
        state.pop("_mutex", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._mutex = threading.Lock()

    # -- locks ----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _admission(self) -> Iterator[None]:
        fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _flock(fd, fcntl.LOCK_EX, self.root)
            yield
        finally:
            os.close(fd)

    # -- bookkeeping ----------------------------------------------------------------------------------

    def scan(self) -> list[_Entry]:
        """Every block and temporary file in the cache (stale temporary files of dead processes are removed)."""
        out: list[_Entry] = []
        for vdir in _subdirs(self.root):
            if not vdir.name.startswith("v-"):
                continue
            for sdir in _subdirs(vdir):
                if sdir.name == ".locks":
                    continue
                with os.scandir(sdir) as it:
                    for e in it:
                        entry = _entry(Path(e.path), vdir.name[2:], sdir.name)
                        if entry is not None and not (entry.temp and _unlink_unlocked(entry.path)):
                            out.append(entry)
        return out

    def usage(self) -> int:
        """Bytes held by blocks and fetches in flight."""
        return sum(e.size for e in self.scan())

    def _victims(self, entries: list[_Entry], keep_after: int | None) -> list[_Entry]:
        """Evictable blocks, the best victim first (the furthest next use; never-needed first)."""
        blocks = [e for e in entries if not e.temp]
        if not blocks:
            return []
        if self.policy == "lru" or self.future is None:  # least recently used first (a pin touches its block)
            return sorted(blocks, key=lambda e: e.mtime)
        nxt = np.empty(len(blocks), dtype=np.int64)
        groups: dict[tuple[str, str], list[int]] = {}
        for i, e in enumerate(blocks):
            groups.setdefault((e.version, e.key), []).append(i)
        for (version, key), idx in groups.items():
            nb = np.array([blocks[i].block for i in idx], dtype=np.int64)
            nxt[idx] = self.future.next_use(version, key, nb)
        order = np.argsort(-nxt, kind="stable")
        if keep_after is not None:  # a prefetch: evict only blocks needed later than the one it brings
            order = order[nxt[order] > keep_after]
        return [blocks[i] for i in order.tolist()]

    def _make_room(self, need: int, entries: list[_Entry], keep_after: int | None) -> bool:
        """Evict until ``need`` more bytes fit; False when a prefetch cannot without harm (nothing is evicted)."""
        used = sum(e.size for e in entries)
        if used + need <= self.cache_bytes:
            return True
        victims = self._victims(entries, keep_after)
        if keep_after is not None and used + need - sum(v.size for v in victims) > self.cache_bytes:
            return False  # not enough blocks needed later than this one: keep what is there
        for v in victims:
            if used + need <= self.cache_bytes:
                break
            if _unlink_unlocked(v.path):
                used -= v.size
                self.stats.evicted_blocks += 1
        return keep_after is None or used + need <= self.cache_bytes

    def _reserve(self, path: Path, size: int, keep_after: int | None) -> tuple[int, Path] | None:
        """Under the cache lock: make room and create ``path``'s temporary file at full size, locked.

        Returns the temporary file (open descriptor, path), or None when a prefetch was refused or the block
        is already in place.
        """
        with self._admission():
            if path.exists():
                return None
            if not self._make_room(size, self.scan(), keep_after):
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            _flock(fd, fcntl.LOCK_EX, self.root)  # alive: a scan leaves a locked temporary file alone
            try:
                os.ftruncate(fd, size)  # counted at its full size from now on
            except OSError:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            return fd, tmp

    # -- blocks ---------------------------------------------------------------------------------------

    def folder(self, version: str, store: Store, specs: Sequence[BlockSpec]) -> FolderBlocks:
        """The blocks of one folder version (its manifest's hash) read from ``store``."""
        return FolderBlocks(self, version, store, {s.key: s for s in specs})

    def describe(self) -> str:
        return f"the cache {self.root} (bound {format_size(self.cache_bytes)})"


class FolderBlocks:
    """The cached blocks of one folder version: `pin` for reading, `prefetch` ahead of use."""

    def __init__(self, cache: BlockCache, version: str, store: Store, specs: dict[str, BlockSpec]) -> None:
        self.cache, self.version, self.store, self.specs = cache, version, store, specs
        self._checked: dict[tuple[str, int], tuple[int, int, int]] = {}  # blocks this process found intact
        self.dir = cache.root / f"v-{version}"
        (self.dir / ".locks").mkdir(parents=True, exist_ok=True)
        source = self.dir / "source.json"
        if not source.exists():
            atomic_write_json(source, {"url": store.where(), "manifest_sha256": version})

    def path(self, key: str, b: int) -> Path:
        return self.dir / f"{key}.{b:06d}"

    def pin(self, key: str, b: int) -> Pin:
        """Block ``b`` of ``key``, fetched and verified if it is not in the cache, held in use until released."""
        for _ in range(4):
            pin = self._open(key, b)
            if pin is None:
                pin = self.ensure(key, b)
            if pin is not None and not self._intact(key, b, pin):
                pin.release()
                pin = None
            if pin is not None:
                self.cache.stats.hits += 1
                return pin
        raise RemoteError(
            f"{self.store.where(key, self.specs[key].span(b))}: the block was evicted four times before use"
        )

    def _open(self, key: str, b: int) -> Pin | None:
        path = self.path(key, b)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            _flock(fd, fcntl.LOCK_SH, self.cache.root)
        except OSError:
            os.close(fd)
            raise
        st = os.fstat(fd)
        if st.st_nlink == 0:  # evicted between open and lock: not in the cache any more
            os.close(fd)
            return None
        if self.cache.policy == "lru" or self.cache.future is None:
            now = time.time_ns()  # given explicitly: the kernel's own timestamps are as coarse as a clock tick
            with contextlib.suppress(OSError):
                os.utime(path, ns=(now, now))  # recency, for LRU
        return Pin(fd, st.st_size)

    def _intact(self, key: str, b: int, pin: Pin) -> bool:
        """Whether a cached block still holds its verified bytes: checked against the manifest's hash on this
        process's first use of the file (a disk can damage it after it arrived); a damaged one is removed."""
        st = os.fstat(pin.fd)
        ident = (st.st_dev, st.st_ino, st.st_size)
        if self._checked.get((key, b)) == ident:
            return True
        spec = self.specs[key]
        start, end = spec.span(b)
        data = pin._map if pin._map is not None else b""
        if st.st_size == end - start and hashlib.sha256(data).hexdigest() == spec.sha256[b]:
            self._checked[(key, b)] = ident
            return True
        path = self.path(key, b)
        with contextlib.suppress(OSError):
            now = os.stat(path)
            if (now.st_dev, now.st_ino) == ident[:2]:
                path.unlink()  # fetched again by `ensure`
        warnings.warn(
            f"the cached block {path} ({self.store.where(key, (start, end))}) was damaged on disk; fetched it again "
            f"(check the disk of {self.cache.root})",
            stacklevel=3,
        )
        return False

    def _lock_fd(self, key: str, b: int, *, wait: bool) -> int | None:
        """The fetch lock of block ``b`` (a stripe file, flock'ed): its descriptor, or None when ``wait`` is False
        and another fetch holds it."""
        stripe = int(hashlib.blake2b(f"{key}:{b}".encode(), digest_size=2).hexdigest(), 16) % _STRIPES
        fd = os.open(self.dir / ".locks" / f"{stripe:03d}", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB), self.cache.root)
        except OSError as e:
            os.close(fd)
            if wait or e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # held: busy; else raise
                raise
            return None
        return fd

    def ensure(self, key: str, b: int) -> Pin | None:
        """Have block ``b`` of ``key`` in the cache, fetched now if missing (evicting as Belady's rule says), and
        pinned: None only when it was evicted again before it could be (a damaged file removed meanwhile)."""
        path = self.path(key, b)
        lock = self._lock_fd(key, b, wait=True)
        assert lock is not None
        try:
            reserved = None
            if path.exists():  # fetched meanwhile by another process or thread
                self.cache.stats.waits += 1
            else:
                start, end = self.specs[key].span(b)
                reserved = self.cache._reserve(path, end - start, None)
                if reserved is not None:
                    try:
                        self._fill(reserved[0], reserved[1], key, b, path)
                    except BaseException:
                        os.close(reserved[0])
                        raise
            # Evictions run under the admission lock: taken here, no other reader's admission can evict the block
            # between its arrival and its pin (a cache smaller than the blocks in use would lose it every time).
            with self.cache._admission():
                if reserved is not None:
                    os.close(reserved[0])  # its exclusive lock goes with it: readers may take the block
                return self._open(key, b)
        finally:
            os.close(lock)

    def reserve_prefetch(self, key: str, b: int, when: int) -> Reservation | str:
        """Start prefetching block ``b`` (next needed at ``when``): ``"present"``, ``"busy"`` (another fetch of
        it, or of a block sharing its lock, is running), ``"refused"`` (it would evict a block needed sooner), or
        the `Reservation` to `fill` (its room is made and held, and its fetch lock taken)."""
        path = self.path(key, b)
        if path.exists():
            return "present"
        lock = self._lock_fd(key, b, wait=False)
        if lock is None:
            return "busy"
        try:
            start, end = self.specs[key].span(b)
            reserved = None if path.exists() else self.cache._reserve(path, end - start, when)
        except BaseException:
            os.close(lock)
            raise
        if reserved is None:
            os.close(lock)
            return "present" if path.exists() else "refused"
        return Reservation(lock, reserved[0], reserved[1], key, b)

    def fill(self, r: Reservation) -> None:
        """Fetch a reserved block into place (a prefetch thread's work); the reservation is released either way."""
        try:
            self._fill(r.fd, r.tmp, r.key, r.block, self.path(r.key, r.block))
            self.cache.stats.prefetched_blocks += 1
        finally:
            os.close(r.fd)
            os.close(r.lock)

    def _fill(self, fd: int, tmp: Path, key: str, b: int, path: Path) -> None:
        """Fetch, verify (once more on a mismatch) and write block ``b`` into the reserved file, then rename it."""
        spec = self.specs[key]
        span = spec.span(b)
        try:
            data = self._verified(spec, b, span)
            try:
                os.pwrite(fd, data, 0)
                os.fsync(fd)
            except OSError as e:
                raise self._disk_error(e) from None
            st = os.fstat(fd)
            os.replace(tmp, path)  # a block file that exists is a verified block
            self._checked[(key, b)] = (st.st_dev, st.st_ino, st.st_size)
            fsync_dir(path.parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.cache.stats.fetched_blocks += 1
        self.cache.stats.fetched_bytes += len(data)
        if self.cache.fetch_log is not None:
            with open(self.cache.fetch_log, "a", encoding="utf-8") as log:
                log.write(f"{self.version} {key} {b} {len(data)} {os.getpid()}\n")

    def _verified(self, spec: BlockSpec, b: int, span: tuple[int, int]) -> bytes:
        got = ""
        for attempt in range(2):
            data = self.store.read(spec.key, *span)
            got = hashlib.sha256(data).hexdigest()
            if got == spec.sha256[b]:
                return data
            self.cache.stats.refetched += attempt == 0
        raise CorruptBlockError(
            f"{self.store.where(spec.key, span)} does not match the manifest (sha256 {got[:16]}..., expected "
            f"{spec.sha256[b][:16]}...), fetched twice: the object was changed after the manifest was written; "
            f"restore it, or prepare the folder again (`tokembed check {self.store.where()}` lists every damaged object)"
        )

    def _disk_error(self, e: OSError) -> OSError:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return OSError(
                e.errno,
                f"the disk of the cache {self.cache.root} is full ({os.strerror(e.errno)}); give a smaller "
                f"--cache-bytes (now {format_size(self.cache.cache_bytes)}) or a --cache-dir on a larger disk",
            )
        return e


# ----------------------------------------------------------------------------------------------- helpers


def _flock(fd: int, op: int, root: Path) -> None:
    """``fcntl.flock(fd, op)``; on a file system without locks, an error that names the cache and the fix (the
    processes sharing the cache coordinate by these locks: unlike packing's rows it cannot run unlocked)."""
    try:
        fcntl.flock(fd, op)
    except OSError as e:
        if e.errno not in NO_LOCKS:
            raise
        raise OSError(
            e.errno,
            f"the cache {root} is on a file system without file locks ({os.strerror(e.errno)}); its processes share "
            "it by locks: give --cache-dir on a local disk (or TOKEMBED_CACHE_DIR)",
        ) from None


def _subdirs(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            return [Path(e.path) for e in it if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _entry(path: Path, version: str, split: str) -> _Entry | None:
    name = path.name
    temp = name.startswith(".") and ".tmp-" in name
    base = name[1:].split(".tmp-", 1)[0] if temp else name
    stem, dot, num = base.rpartition(".")
    if not dot or not num.isdigit():
        return None
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _Entry(path, st.st_size, version, f"{split}/{stem}", int(num), st.st_mtime, temp)


def _unlink_unlocked(path: Path) -> bool:
    """Remove ``path`` unless a process holds its lock: a block being read, or a temporary file whose fetch is
    running (a stale one's writer is gone, so its lock is free); whether it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # in use
    try:
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # in use
    try:
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True
