"""When each block is needed next, from the reader's known order: Belady's eviction and the prefetch list.

A *trace* lists block reads in the order a loader will make them: ``(time, file, block)``, where time is the
position of the reading window in the epoch's global order (every rank's windows, step after step). `NextUse`
holds the trace over a horizon of positions ``[start, stop)`` and answers, for any blocks, the first time at or
after ``now`` that they are read (`NEVER` when not within the horizon): the cache evicts the block with the
largest answer (Belady's rule), and prefetches the blocks with the smallest (`upcoming`).

Files are named by ``(folder version, key)`` and numbered here, so a trace is three int64 arrays.
"""

from __future__ import annotations

import numpy as np

from tokembed.storage.cache import NEVER

__all__ = ["NEVER", "NextUse"]


class NextUse:
    """The next use of every block over a horizon of the known order.

    Attributes:
        now: the reader's current time (the position of the earliest window still to be read).
        start, stop: the horizon: times ``[start, stop)`` are known.
    """

    def __init__(self) -> None:
        self.files: dict[tuple[str, str], int] = {}
        self.names: list[tuple[str, str]] = []
        self.now = 0
        self.start = self.stop = 0
        self._ids = np.zeros(0, np.int64)  # (U,) sorted distinct block codes of the horizon
        self._keys = np.zeros(0, np.int64)  # (N,) sorted dense-code * span + (time - start)
        self._span = 1

    def file_id(self, version: str, key: str) -> int:
        """The number of file ``key`` of folder ``version`` (given on first sight)."""
        ident = (version, key)
        fid = self.files.get(ident)
        if fid is None:
            fid = self.files[ident] = len(self.names)
            self.names.append(ident)
        return fid

    def set_trace(self, times: np.ndarray, fids: np.ndarray, blocks: np.ndarray, *, start: int, stop: int) -> None:
        """Replace the horizon by ``[start, stop)`` and its reads (times within it; any order, repeats allowed)."""
        times = np.asarray(times, np.int64)
        if times.size and (times.min() < start or times.max() >= stop):
            raise ValueError(f"trace times must lie in the horizon [{start}, {stop})")
        codes = (np.asarray(fids, np.int64) << np.int64(32)) | np.asarray(blocks, np.int64)
        self._ids, dense = np.unique(codes, return_inverse=True)
        self._span = max(1, stop - start)
        self._keys = np.unique(dense.astype(np.int64) * self._span + (times - start))
        self.start, self.stop = int(start), int(stop)

    def advance(self, now: int) -> None:
        self.now = int(now)

    def next_use(self, version: str, key: str, blocks: np.ndarray) -> np.ndarray:
        """The first time ``>= now`` at which each of ``blocks`` of ``(version, key)`` is read: int64, `NEVER` when
        it is not read within the horizon."""
        blocks = np.asarray(blocks, np.int64)
        out = np.full(blocks.shape, NEVER, np.int64)
        fid = self.files.get((version, key))
        if fid is None or not self._ids.size:
            return out
        codes = (np.int64(fid) << np.int64(32)) | blocks
        d = np.searchsorted(self._ids, codes)
        known = (d < self._ids.size) & (self._ids[np.minimum(d, self._ids.size - 1)] == codes)
        since = max(self.now, self.start) - self.start
        q = d[known].astype(np.int64) * self._span + since
        i = np.searchsorted(self._keys, q)
        hit = i < self._keys.size
        found = np.full(q.shape, NEVER, np.int64)
        same = hit.copy()
        same[hit] = self._keys[i[hit]] // self._span == d[known][hit]
        found[same] = self._keys[i[same]] % self._span + self.start
        out[known] = found
        return out

    def upcoming(self, limit: int) -> list[tuple[str, str, int, int]]:
        """Up to ``limit`` blocks read at or after ``now``, in order of their next read:
        ``(version, key, block, time)``."""
        if not self._keys.size:
            return []
        dense, rel = np.divmod(self._keys, self._span)
        live = rel >= max(self.now, self.start) - self.start
        dense, rel = dense[live], rel[live]
        first = np.full(self._ids.size, NEVER, np.int64)
        np.minimum.at(first, dense, rel)
        order = np.argsort(first, kind="stable")[:limit]
        order = order[first[order] < NEVER]
        out = []
        for d in order.tolist():
            code = int(self._ids[d])
            version, key = self.names[code >> 32]
            out.append((version, key, code & 0xFFFFFFFF, int(first[d]) + self.start))
        return out
