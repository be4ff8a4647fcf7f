"""The loader's known order, told to the block caches of remote sources: Belady's eviction and prefetch.

A loader knows every window it will read: position ``p`` of an epoch's global order is window ``perm(p)``
(a mixture's slot, a source's window), and step ``t`` deals positions ``[t*G, (t+1)*G)`` to the ranks. For a
dataset with remote sources (``dataset.streamed``), each process that gathers batches (the rank's main process,
or each DataLoader worker) follows that order with a `Follow`:

- **Eviction.** It turns the next positions of the ranks that share this machine's cache (torchrun's
  ``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` name them; all ranks otherwise) into a block trace (``dataset.block_reads``)
  and gives the cache a `tokembed.storage.future.NextUse` over it: the cache evicts the block needed furthest in
  the future. The trace covers a horizon of up to ``HORIZON_WINDOWS`` positions and moves with the reader.
  ``now`` lags the process's own batch by one step per other DataLoader worker, so another worker's current
  batch counts as needed now.
- **Prefetch.** Before each batch it hands the blocks of its own next batches, in order of need, to a few
  threads (``TOKEMBED_PREFETCH_THREADS``, default 8), which fetch each one only if that evicts nothing needed
  sooner (`tokembed.storage.cache.FolderBlocks.ensure`). A process prefetches at most its share of half the
  cache (the processes of the machine's ranks share it). A block another process is fetching is waited for,
  never fetched twice.

Nothing here changes which windows a batch holds: it only decides when bytes move.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from tokembed.storage.cache import Reservation
from tokembed.storage.future import NextUse

__all__ = ["HORIZON_WINDOWS", "Follow", "follow", "local_ranks"]

HORIZON_WINDOWS = 1 << 18  # positions in a trace: ~10 MB of arrays, refreshed when half of it is read
_AHEAD_BATCHES = 8  # own batches whose blocks are prefetched


def local_ranks(rank: int, world_size: int) -> list[int]:
    """The ranks that share this machine's cache: torchrun's node-local ranks, else all ranks."""
    try:
        local, n_local = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    except (KeyError, ValueError):
        return list(range(world_size))
    first = rank - local
    if n_local < 1 or first < 0 or first + n_local > world_size:
        return list(range(world_size))
    return list(range(first, first + n_local))


class Follow:
    """One process's follower of the order (see the module's notes).

    Args:
        dataset: a window dataset with remote sources.
        epoch: the loader's epoch arithmetic for this rank (``windows(ts)`` -> (K, B) windows or codes).
        ts: the batches this process gathers, in order.
        workers: DataLoader workers of the rank (0: the main process).
    """

    def __init__(self, dataset: Any, epoch: Any, ts: range, *, workers: int = 0) -> None:
        self.dataset, self.epoch, self.ts = dataset, epoch, ts
        plan = epoch.plan
        self.batch, self.global_batch = plan.batch_size, plan.batch_size * plan.world_size
        self.ranks = local_ranks(epoch.rank, plan.world_size)
        self.lag = max(0, workers - 1) * self.global_batch  # the other workers' batches count as needed now
        self.processes = max(1, workers) * len(self.ranks)  # that gather batches on this machine
        self.future = NextUse()
        self.horizon = (0, 0)  # steps whose reads the trace holds
        self.threads = int(os.environ.get("TOKEMBED_PREFETCH_THREADS", "8"))
        self._pool: ThreadPoolExecutor | None = None
        self._finalizing = sys.is_finalizing  # kept here: at exit `close` may run after module globals are cleared
        self._pending: dict[tuple[str, str, int], Future] = {}
        self._sets: dict[str, Any] = {}  # folder version -> its RemoteShardSet
        self._planned_until = 0  # index in ts before which the prefetch is planned

    # -- the trace -------------------------------------------------------------------------------------

    def _positions(self, steps: np.ndarray, ranks: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Positions and windows of ``ranks``' batches at full ``steps``: (M,), (M,)."""
        pos, win = [], []
        for r in ranks:
            e = copy.copy(self.epoch)
            e.rank = r  # the same arithmetic for another rank
            pos.append((steps[:, None] * self.global_batch + r * self.batch + np.arange(self.batch)).ravel())
            win.append(e.windows(steps).ravel())
        return np.concatenate(pos), np.concatenate(win)

    def _reads(self, windows: np.ndarray) -> list[tuple[Any, np.ndarray, np.ndarray, np.ndarray]]:
        """``(remote set, window number, file ids, block)`` of every block read of ``windows``."""
        out = []
        for ss, rows, keys, shard, block in self.dataset.block_reads(windows):
            self._sets[ss.version] = ss
            fids = np.array([self.future.file_id(ss.version, k) for k in keys], dtype=np.int64)
            out.append((ss, rows, fids[shard], block))
        return out

    def _refresh(self, step: int) -> None:
        """A new horizon from ``step``: the reads of every local rank over the next steps."""
        full = self.epoch.plan.full_steps
        n = max(1, HORIZON_WINDOWS // (self.batch * len(self.ranks)))
        stop = min(full, step + n)
        steps = np.arange(step, stop, dtype=np.int64)
        pos, win = self._positions(steps, self.ranks) if len(steps) else (np.zeros(0, np.int64),) * 2
        times, fids, blocks = [], [], []
        for _, rows, f, b in self._reads(win):
            times.append(pos[rows])
            fids.append(f)
            blocks.append(b)
        lo, hi = step * self.global_batch, max(stop, step + 1) * self.global_batch
        cat = lambda x: np.concatenate(x) if x else np.zeros(0, np.int64)  # noqa: E731
        self.future.set_trace(cat(times), cat(fids), cat(blocks), start=lo, stop=hi)
        self.horizon = (step, stop)
        for ss in self._sets.values():
            ss.use_future(self.future)

    # -- following -------------------------------------------------------------------------------------

    def at(self, t: int) -> None:
        """Batch ``t`` of this rank is gathered next: move ``now``, the horizon, and the prefetch."""
        first, stop = self.horizon
        if t >= self.epoch.plan.full_steps:
            return  # the shared-out last batch: read on demand
        if not first <= t < stop or (t - first) * 2 >= stop - first and stop < self.epoch.plan.full_steps:
            self._refresh(t)
        self.future.advance(t * self.global_batch + self.epoch.rank * self.batch - self.lag)
        self._prefetch(t)

    def _prefetch(self, t: int) -> None:
        if self.threads < 1:
            return
        i = self.ts.index(t) if t in self.ts else 0
        if i < self._planned_until:  # planned at an earlier batch: the blocks are on their way
            return
        self._planned_until = i + _AHEAD_BATCHES // 2  # plan again halfway through the lookahead
        mine = np.asarray(self.ts[i : i + _AHEAD_BATCHES], dtype=np.int64)
        mine = mine[mine < self.epoch.plan.full_steps]
        if not len(mine):
            return
        pos, win = self._positions(mine, [self.epoch.rank])
        needs: dict[tuple[str, str, int], int] = {}
        for ss, rows, fids, blocks in self._reads(win):
            for r, f, b in zip(pos[rows].tolist(), fids.tolist(), blocks.tolist()):
                key = (ss.version, self.future.names[f][1], b)
                needs[key] = min(needs.get(key, r), r)
        self._pending = {k: f for k, f in self._pending.items() if not f.done()}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="tokembed-prefetch")
        budget = None
        for key, when in sorted(needs.items(), key=lambda kv: kv[1]):  # reserved in order of need, filled in parallel
            folder = self._sets[key[0]].blocks()
            if budget is None:  # each process prefetches into its share of half the cache
                budget = folder.cache.cache_bytes // (2 * self.processes)
            start, end = folder.specs[key[1]].span(key[2])
            budget -= end - start
            if budget < 0 or len(self._pending) >= 2 * self.threads:
                break
            if key in self._pending:
                continue
            r = folder.reserve_prefetch(key[1], key[2], when)
            if r == "refused":
                break  # the cache is full of blocks needed sooner
            if isinstance(r, Reservation):
                self._pending[key] = self._pool.submit(_fill, folder, r)

    def close(self) -> None:
        if self._finalizing():  # a loader left half read at exit: the executor's exit hook stopped its threads,
            return  # the modules shutdown needs are gone (globals too), and the OS drops the blocks' locks
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for ss in self._sets.values():
            ss.use_future(None)
            ss.release()  # the last batch's blocks are no longer in use


def _fill(folder: Any, r: Reservation) -> None:
    # A failed prefetch is dropped: the read that needs the block fetches it again and raises with the reason.
    with contextlib.suppress(Exception):
        folder.fill(r)


def follow(dataset: Any, epoch: Any, ts: range, *, workers: int = 0) -> Follow | None:
    """A `Follow` when ``dataset`` reads remote folders, else None (a local dataset pays nothing)."""
    if not getattr(dataset, "streamed", False) or not hasattr(dataset, "block_reads"):
        return None
    return Follow(dataset, epoch, ts, workers=workers)
