"""Batches of sliding windows: an epoch order by formula, ranks, workers and exact mid-epoch resume.

An epoch is a sequence of *positions* ``0 .. N-1`` (``N`` windows). Position ``p`` holds window
``perm(p)``, where ``perm`` is a pseudo-random permutation of ``[0, N)`` computed by formula (a keyed
Feistel network with cycle walking, `FeistelPermutation`), so that no rank ever materialises an
O(N) permutation: torch's ``DistributedSampler`` builds ``randperm(N).tolist()`` on every rank,
2.6 GB at 50 M windows; here a batch costs O(batch_size) arithmetic.

Positions are dealt out in *steps* of ``world_size * batch_size``: step ``t`` gives rank ``r`` the
positions ``[t*W*B + r*B, t*W*B + (r+1)*B)``, and that rank's batch ``t``. DataLoader workers of a
rank take its batches round-robin (worker ``w`` of ``n`` makes batches ``t = w, w+n, ...``), which
is the order in which torch's DataLoader hands them back, so the batches do not depend on the
number of workers.

The tail, fewer than ``W*B`` positions after the last full step, is
- dropped with ``drop_last=True``: every rank yields ``N // (W*B)`` full batches;
- shared with ``drop_last=False``: each rank gets ``ceil(R/W)`` of the ``R`` tail positions in one
  last, shorter batch; positions past ``N-1`` wrap around to the epoch's first windows (the padding,
  at most ``W-1`` positions: a window is seen twice, or more when the epoch has fewer windows than
  ranks, e.g. 1 window over W ranks is seen W times), so every rank takes the same number of steps.

Each batch is gathered in one vectorized step by `SlidingWindowDataset.gather`.

Elastic resume. A step is one *global batch* of ``G = W*B`` positions and rank ``r`` reads its part
``[r*B, (r+1)*B)`` of it, so the positions of step ``t`` do not depend on how they are dealt out:
``state_dict()`` records the epoch and the steps done, which is a position in the global order, and
a loader with another world size ``M`` and ``batch_size = G / M`` resumes it. Together its ranks read
exactly the windows the ``W`` ranks would have read next (with ``drop_last=False`` the last, shared-out
step pads a different number of windows: ``ceil(R/M)*M - R``). ``global_batch_size=G`` in
`create_dataloader` works out ``B`` from the world size.

A `tokembed.Mixture` has no tail: its global order never ends, and epoch ``e`` is its steps
``[e*S, (e+1)*S)`` with ``S = len(dataset) // G``; position ``p`` of the order is a window of one
source, chosen by the mixture's quota schedule (`tokembed.data.mixture_windows`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tokembed._checks import check_bool, check_int, check_positive_int
from tokembed.data import streaming
from tokembed.data.mixture_windows import MixtureWindows
from tokembed.data.packed import PackedWindows
from tokembed.data.plan import RankPlan, rank_plan
from tokembed.data.shuffle import FeistelPermutation, GroupedPermutation
from tokembed.data.windows import SlidingWindowDataset, WindowSource

__all__ = ["LoaderConfig", "WindowDataLoader", "WindowLoader", "create_dataloader", "resolve_rank"]

_log = logging.getLogger(__name__)

STATE_FORMAT = "tokembed-loader"
STATE_VERSION = 1
_PERM_POSITIONS = 65536  # positions permuted per vectorized call (~0.1 us each; 2 MB of temporaries)
_CHUNK_TOKENS = 65536  # small batches are gathered together up to this many tokens (2 x 512 KiB of int64)
# Tokens whose document metadata is laid out together: 256 batches of 8 x 1024 (a few KiB of metadata per batch;
# fewer per-call costs than 64 batches: ~1 us a batch), and a bounded block of a mixture's packed tokens.
_LAYOUT_TOKENS = 1 << 21


# ------------------------------------------------------------------------------------------- ranks


def resolve_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: the ones given, else torch.distributed's when initialised, else ``(0, 1)``."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither, got rank={rank!r}, world_size={world_size!r}")
    if rank is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    world_size = check_positive_int("world_size", world_size)
    check_int("rank", rank)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world_size={world_size}: ranks are 0..{world_size - 1}")
    return int(rank), world_size


# ------------------------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class LoaderConfig:
    """How a `WindowLoader` cuts and serves batches; validated at construction.

    Attributes:
        batch_size: windows per batch (``B``).
        shuffle: a new pseudo-random order each epoch, fixed by ``(seed, epoch)``.
        seed: selects the orders (int >= 0).
        drop_last: drop each epoch's tail (< B x world_size windows) instead of sharing it out.
        num_workers: DataLoader worker processes for this rank (0: gather in this process).
        pin_memory: copy batches to page-locked memory (when CUDA is available).
        prefetch_factor: batches each worker prepares ahead (torch's default when None).
        multiprocessing_context: how workers start (``"fork"``, ``"spawn"``, ...; torch's default when None).
        shuffle_group: the locality option: shuffle groups of this many consecutive windows, then the windows
            within each group (`tokembed.data.shuffle.GroupedPermutation`), instead of all windows at once. Each
            epoch is still a permutation of all windows, resumable exactly and elastically. For a remote folder
            read through a cache much smaller than the corpus: a group whose tokens fill about a quarter of the
            cache (``cache_bytes / 4 / (2 * stride)`` windows of uint16 tokens) is fetched once per epoch.
        output: what each batch is: ``"pairs"`` ``(inputs, targets)``, (B, T) each; ``"rows"`` one (B, T+1)
            tensor (inputs ``[:, :-1]``, targets ``[:, 1:]``: litgpt's and nanoGPT's layout); ``"documents"`` a
            `tokembed.data.batch.DocumentBatch` (position_ids, cu_seqlens, max_seqlen, doc_lens).
        max_documents: with ``output="documents"``, pad ``cu_seqlens`` to ``max_documents + 1`` entries and
            ``doc_lens`` to (B, max_documents), so every batch has the same shapes (``torch.compile``).
    """

    batch_size: int
    shuffle: bool = True
    seed: int = 0
    drop_last: bool = True
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    multiprocessing_context: str | None = None
    shuffle_group: int | None = None
    output: str = "pairs"
    max_documents: int | None = None

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(map(repr, OUTPUTS))}, got {self.output!r}")
        if self.shuffle_group is not None:
            check_positive_int("shuffle_group", self.shuffle_group)
            if not self.shuffle:
                raise ValueError(
                    f"shuffle_group={self.shuffle_group} shuffles groups of windows: it needs shuffle=True; leave it out"
                )
        if self.max_documents is not None:
            check_positive_int("max_documents", self.max_documents)
            if self.output != "documents":
                raise ValueError(
                    f"max_documents={self.max_documents} pads the document metadata: it needs output='documents' "
                    "(or return_documents=True); leave it out otherwise"
                )
        check_positive_int("batch_size", self.batch_size)
        for name in ("shuffle", "drop_last", "pin_memory"):
            check_bool(name, getattr(self, name))
        check_int("seed", self.seed, min=0, noun="an integer")
        check_int("num_workers", self.num_workers, min=0, noun="an integer")
        if self.prefetch_factor is not None:
            check_positive_int("prefetch_factor", self.prefetch_factor)
            if self.num_workers == 0:
                raise ValueError(
                    f"prefetch_factor={self.prefetch_factor} needs num_workers >= 1 (workers prefetch); leave it out or add workers"
                )


OUTPUTS = ("pairs", "rows", "documents")  # what a loader yields (LoaderConfig.output)


class _Epoch:
    """The arithmetic of one epoch for one rank: which windows make batch ``t``."""

    def __init__(
        self, n: int, plan: RankPlan, rank: int, *, shuffle: bool, seed: int, epoch: int, group: int | None = None
    ) -> None:
        self.n, self.plan, self.rank = n, plan, rank
        self.perm: Any = None
        if shuffle:
            self.perm = (
                FeistelPermutation(n, seed=seed, epoch=epoch)
                if group is None
                else GroupedPermutation(n, group, seed=seed, epoch=epoch)
            )

    def windows(self, ts: np.ndarray) -> np.ndarray:
        """Window indices of this rank's full batches ``ts``: (K, B)."""
        p = self.plan
        b, w = p.batch_size, p.world_size
        pos = ts[:, None] * (w * b) + self.rank * b + np.arange(b)  # (K, B) positions of the epoch
        return pos if self.perm is None else self.perm(pos)

    def tail(self) -> np.ndarray:
        """Window indices of this rank's shared-out last batch: (last_batch_size,)."""
        p = self.plan
        m = p.last_batch_size
        pos = (p.full_steps * p.world_size * p.batch_size + self.rank * m + np.arange(m)) % self.n  # wraps: padding
        return pos if self.perm is None else self.perm(pos)

    def chunks(self, ts: range, per_chunk: int) -> Iterator[np.ndarray]:
        """Window indices of batches ``ts`` (an increasing range), ``per_chunk`` batches at a time: (K, B)."""
        full = range(ts.start, min(ts.stop, self.plan.full_steps), ts.step)
        for i in range(0, len(full), per_chunk):
            yield self.windows(np.asarray(full[i : i + per_chunk], dtype=np.int64))
        last = self.plan.full_steps
        if self.plan.batches > last and last in ts:
            yield self.tail()[None]


class _MixtureEpoch(_Epoch):
    """Epoch ``e`` of a mixture for one rank: global steps ``[e*S, (e+1)*S)`` of the never-ending order."""

    def __init__(
        self, dataset: MixtureWindows, plan: RankPlan, rank: int, *, shuffle: bool, seed: int, epoch: int, group=None
    ):
        self.n, self.plan, self.rank, self.perm = plan.windows, plan, rank, None
        self.dataset, self.shuffle, self.seed, self.group = dataset, shuffle, seed, group
        self.first = epoch * plan.windows  # the epoch's first slot (plan.windows = S * G, no tail)

    def windows(self, ts: np.ndarray) -> np.ndarray:
        """Coded windows (`MixtureWindows.codes`) of this rank's batches ``ts``: (K, B)."""
        slots = self.first + super().windows(ts)  # (K, B) slots of the global order
        return self.dataset.codes(slots, shuffle=self.shuffle, seed=self.seed, group=self.group)


class _BufferPool:
    """Output arrays recycled once nothing outside the pool refers to them any more.

    A fresh 512 KiB array costs page faults each time (glibc hands large blocks back to the system);
    a batch's tensors keep their array alive (``torch.from_numpy``), so an array whose only
    references are the pool's is free: no batch the caller still holds is ever overwritten.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.pairs: list[list[np.ndarray]] = []

    def get(self, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        for pair in self.pairs:
            # Free when the only references are the pair list and getrefcount's own argument.
            if pair[0].shape == shape and sys.getrefcount(pair[0]) == 2 and sys.getrefcount(pair[1]) == 2:
                return pair[0], pair[1]
        new = [np.empty(shape, np.int64), np.empty(shape, np.int64)]
        if len(self.pairs) < self.size:
            self.pairs.append(new)
        return new[0], new[1]


class _RankBatches(torch.utils.data.IterableDataset):
    """What each DataLoader worker runs: its share (every n-th batch) of one epoch of one rank."""

    def __init__(
        self, dataset: SlidingWindowDataset, epoch: _Epoch, start: int, config: LoaderConfig | None = None
    ) -> None:
        self.dataset, self.epoch, self.start = dataset, epoch, start
        self.output = "pairs" if config is None else config.output
        self.max_documents = None if config is None else config.max_documents

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        ts = range(self.start + wid, self.epoch.plan.batches, nw)
        b = self.epoch.plan.batch_size
        # Small batches are gathered several at a time (one fancy index for up to _CHUNK_TOKENS
        # tokens), then handed out as contiguous slices of the chunk. Not in workers: a slice sent
        # to the main process would carry its whole chunk through shared memory.
        per_chunk = max(1, _CHUNK_TOKENS // (b * self.dataset.max_length)) if info is None else 1
        if getattr(self.dataset, "streamed", False):  # remote blocks are pinned per gather: one batch's at a time
            per_chunk = 1
        # The permutation is evaluated for blocks of positions, small at first (the first batch comes
        # at once) and doubling up to _PERM_POSITIONS (amortising numpy's per-call overhead).
        pool = _BufferPool() if info is None else None
        step = max(1, 1024 // (b * per_chunk)) * per_chunk  # batches per block, a multiple of per_chunk
        most = max(per_chunk, _PERM_POSITIONS // b // per_chunk * per_chunk)
        # Document metadata is laid out for up to _LAYOUT_TOKENS tokens at once (numpy's per-call costs spread
        # over them), their tokens still gathered per_chunk batches at a time.
        layout = _LAYOUT_TOKENS // (b * self.dataset.max_length) // per_chunk * per_chunk
        per_call = per_chunk if self.output != "documents" else max(per_chunk, layout)
        if getattr(self.dataset, "streamed", False):
            per_call = per_chunk  # one batch's remote blocks pinned at a time
        order = streaming.follow(self.dataset, self.epoch, ts, workers=nw if info else 0)  # remote sources only
        try:
            yield from self._blocks(ts, (step, most, per_chunk, per_call), pool, order)
        finally:
            if order is not None:
                order.close()

    def _blocks(
        self, ts: range, sizes: tuple[int, int, int, int], pool: _BufferPool | None, order: streaming.Follow | None
    ) -> Iterator[Any]:
        """The batches ``ts``: ``sizes`` = (batches per block of positions, most per block, per chunk, per call)."""
        step, most, per_chunk, per_call = sizes
        while len(ts):
            head, ts, step = ts[:step], ts[step:], min(2 * step, most)
            for block in self.epoch.chunks(head, len(head)):  # (K', B); the shorter last batch apart
                for i in range(0, len(block), per_call):
                    if order is not None:  # the remote caches learn what comes next, and fetch ahead
                        order.at(head[i] if i < len(head) else head[-1])
                    yield from self._batches(block[i : i + per_call], pool, per_chunk)  # (K, B) windows

    def _batches(self, ks: np.ndarray, pool: _BufferPool | None, per_chunk: int) -> Iterator[Any]:
        """The batches of windows ``ks`` (K, B), gathered together (documents: ``per_chunk`` at a time)."""
        ds, b = self.dataset, ks.shape[1]
        if self.output == "rows":
            yield from ds._gather_rows(ks.ravel()).split(b)  # (B, T+1) each
            return
        if self.output == "documents":
            yield from ds._document_batches(
                ks.ravel(),
                batch_size=b,
                chunk=per_chunk,
                max_documents=self.max_documents,
                buffers=None if pool is None else pool.get,
            )
            return
        out = None if pool is None else pool.get((ks.size, ds.max_length))
        inputs, targets = ds._gather(ks.ravel(), out)  # (K*B, T), (K*B, T)
        if len(ks) == 1:
            yield inputs, targets
        else:
            yield from zip(inputs.split(b), targets.split(b))  # (B,T), (B,T) each


class WindowLoader:
    """Batches of sliding windows for one rank: shuffled by formula, resumable mid-epoch.

    Iterating yields ``(inputs, targets)``, int64 tensors (batch_size, max_length), for one epoch.
    An epoch that runs to its end advances the loader to the next epoch; ``set_epoch(e)`` selects
    one explicitly (as with ``DistributedSampler``). ``state_dict()`` at any point records the epoch
    and how many batches were handed out; a loader given it with ``load_state_dict`` yields exactly
    the batches that remained, with any number of workers.

    Build it with `create_dataloader`, or from a dataset and a `LoaderConfig`:
    ``WindowLoader(dataset, LoaderConfig(batch_size=8), rank=None, world_size=None)``.
    """

    def __init__(
        self,
        dataset: SlidingWindowDataset,
        config: LoaderConfig,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if config.output == "rows" and dataset.rows_refusal:
            raise ValueError(dataset.rows_refusal)
        self.dataset, self.config = dataset, config
        self.batch_size, self.shuffle, self.seed, self.drop_last = (
            config.batch_size,
            config.shuffle,
            config.seed,
            config.drop_last,
        )
        self.num_workers = config.num_workers
        self.rank, self.world_size = resolve_rank(rank, world_size)
        self.global_batch_size = self.batch_size * self.world_size
        n = len(dataset)
        if isinstance(dataset, MixtureWindows):  # whole steps only: the order goes on into the next epoch
            n = n // self.global_batch_size * self.global_batch_size
        self.plan = rank_plan(n, batch_size=self.batch_size, world_size=self.world_size, drop_last=self.drop_last)
        if self.plan.batches == 0:
            raise ValueError(_too_few_windows(dataset, self.batch_size, self.world_size))
        self._epoch = 0
        self._done = 0  # batches of the current epoch handed out by the live iterator
        self._resume_at = 0  # where the next iterator starts (set by load_state_dict)
        self._iter_id = 0
        self.resume_notes: list[str] = []  # what a phased mixture's schedule changed at the last load_state_dict

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self.plan.batches

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its order). The same epoch as now keeps a loaded resume point."""
        check_int("epoch", epoch, min=0, noun="an integer")
        if epoch != self._epoch:
            self._epoch, self._done, self._resume_at = int(epoch), 0, 0
            self._iter_id += 1  # an iterator of the previous epoch no longer updates the state

    def _epoch_arith(self) -> _Epoch:
        shuffle, seed, epoch, group = self.shuffle, self.seed, self._epoch, self.config.shuffle_group
        if isinstance(self.dataset, MixtureWindows):
            return _MixtureEpoch(
                self.dataset, self.plan, self.rank, shuffle=shuffle, seed=seed, epoch=epoch, group=group
            )
        return _Epoch(len(self.dataset), self.plan, self.rank, shuffle=shuffle, seed=seed, epoch=epoch, group=group)

    def __iter__(self) -> Iterator[Any]:
        self.dataset.check_unchanged()  # each epoch: the folder it opened, not one prepared again since
        start, self._resume_at = self._resume_at, 0
        self._iter_id += 1
        self._done = start
        return self._run(self._iter_id, start)

    def _run(self, my_id: int, start: int) -> Iterator[Any]:
        stream = _RankBatches(self.dataset, self._epoch_arith(), start, self.config)
        cfg = self.config
        if self.num_workers == 0:
            source: Any = iter(stream)
        else:
            kw: dict[str, Any] = {} if cfg.prefetch_factor is None else {"prefetch_factor": cfg.prefetch_factor}
            source = iter(
                torch.utils.data.DataLoader(
                    stream,
                    batch_size=None,
                    num_workers=self.num_workers,
                    pin_memory=cfg.pin_memory,
                    multiprocessing_context=cfg.multiprocessing_context,
                    **kw,
                )
            )
        pin = cfg.pin_memory and self.num_workers == 0 and torch.cuda.is_available()  # workers pin in their DataLoader
        for batch in source:
            if pin:
                batch = batch.pin_memory() if not isinstance(batch, tuple) else tuple(t.pin_memory() for t in batch)
            if my_id == self._iter_id:
                self._done += 1
            yield batch  # (B,T), (B,T); (B,T+1); or a DocumentBatch
        if my_id == self._iter_id:  # the epoch ran to its end: the next pass is the next epoch
            self._epoch, self._done = self._epoch + 1, 0

    # -- resumable state ---------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        ds = self.dataset
        return {
            "data": ds.fingerprint(),
            "n_tokens": ds.n_tokens,
            "windows": len(ds),
            "max_length": ds.max_length,
            "stride": ds.stride,
            "within_documents": ds.within_documents,
            "packing": getattr(ds, "packing", None),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "shuffle_group": self.config.shuffle_group,
            "world_size": self.world_size,
            **(ds.state_entries() if isinstance(ds, MixtureWindows) else {}),
            "global_batch_size": self.global_batch_size,
        }

    def state_dict(self) -> dict[str, Any]:
        """Where this rank is: ``{"epoch", "batches_done", "config", ...}`` (plain JSON-able values).

        ``batches_done`` counts the batches of the epoch this loader has handed out; batches that
        workers prefetched but the loop has not received yet are not counted.
        """
        done = self._resume_at if self._resume_at else self._done
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "batches_done": done,
            "config": self._config(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iteration yields exactly the batches that remained when ``state`` was taken.

        Raises:
            ValueError: a state from another dataset or other options (names what differs), or not a
                loader state at all.
        """
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ValueError(
                f"not a tokembed loader state (format {state.get('format') if isinstance(state, dict) else type(state).__name__!r}); pass what WindowLoader.state_dict() returned"
            )
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"loader state version {state.get('version')!r} is not {STATE_VERSION}; it was saved by another tokembed version"
            )
        mine, theirs = self._config(), dict(state.get("config", {}))
        if "global_batch_size" not in theirs and {"batch_size", "world_size"} <= theirs.keys():  # older states
            theirs["global_batch_size"] = theirs["batch_size"] * theirs["world_size"]
        # A phased mixture checks its data and schedule itself (after the rest): see _check_schedule.
        handled = self.dataset.resume_keys(theirs) if isinstance(self.dataset, MixtureWindows) else ()
        diff = [k for k in mine if k not in handled and theirs.get(k) != mine[k]]
        if theirs.get("global_batch_size") == mine["global_batch_size"]:
            diff = [k for k in diff if k not in ("batch_size", "world_size")]  # elastic: the same global order
        if diff:
            what = ", ".join(f"{k}={theirs.get(k)!r} (this loader: {mine[k]!r})" for k in diff)
            other = "another dataset: " if "data" in diff or "n_tokens" in diff else ""
            raise ValueError(
                f"the state was saved by a loader over {other}{what}; resume with the same data and options, or start afresh without load_state_dict"
            )
        epoch, done = state.get("epoch"), state.get("batches_done")
        if not isinstance(epoch, int) or epoch < 0 or not isinstance(done, int) or not 0 <= done <= self.plan.batches:
            raise ValueError(
                f"the state's position (epoch={epoch!r}, batches_done={done!r}) is not within an epoch of {self.plan.batches} batches"
            )
        self.resume_notes = self._check_schedule(theirs, epoch, done) if handled else []
        self._epoch, self._done, self._resume_at = epoch, done, done
        self._iter_id += 1

    def _check_schedule(self, saved: dict[str, Any], epoch: int, done: int) -> list[str]:
        """A phased mixture's state: its started phases must be the same; what changed after them is returned
        (and logged). The position is the saved one: its epoch of ``windows // G`` steps, and its steps done."""
        g, ds = self.global_batch_size, self.dataset
        slot = (epoch * (int(saved.get("windows") or 0) // g) + done) * g
        notes = ds.resume_check(saved, slot=slot) if isinstance(ds, MixtureWindows) else []
        for note in notes:
            _log.info("resuming at step %d: %s", slot // g, note)
        return notes

    def as_dataloader(self) -> WindowDataLoader:
        """This loader as a ``torch.utils.data.DataLoader`` (for trainers that check ``isinstance``: Fabric,
        litgpt): the same batches, ``len``, ``batch_size``, ``set_epoch``, ``state_dict`` and ``load_state_dict``.
        With accelerate use `tokembed.integrations.accelerate.prepare_dataloader` (``Accelerator.prepare`` would
        shard the batches again)."""
        return WindowDataLoader(self)


class _Batches(torch.utils.data.IterableDataset):
    """A `WindowLoader`'s batches as an ``IterableDataset`` (the ``dataset`` of a `WindowDataLoader`).

    Only code that builds a new DataLoader from that ``dataset`` iterates it, and such a DataLoader would batch
    tokembed's batches again (``batch_size``) and deal them out across processes again (accelerate's
    ``Accelerator.prepare``): iterating it raises an error that says what to do instead.
    """

    def __init__(self, loader: WindowLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        ld = self.loader
        raise ValueError(
            f"a DataLoader was built again from a tokembed WindowDataLoader's dataset (batches of {ld.batch_size} "
            f"windows, already rank {ld.rank} of {ld.world_size}'s share): it would batch them again and, across "
            "processes, keep only part of each rank's share. Iterate the WindowDataLoader itself; with accelerate, "
            "use tokembed.integrations.accelerate.prepare_dataloader(accelerator, loader) instead of "
            "accelerator.prepare(loader.as_dataloader())"
        )

    def __len__(self) -> int:
        return len(self.loader)


class WindowDataLoader(torch.utils.data.DataLoader):
    """A `WindowLoader` seen as a ``torch.utils.data.DataLoader`` (`WindowLoader.as_dataloader`).

    Iterating, ``len()``, ``set_epoch``, ``state_dict`` and ``load_state_dict`` are the `WindowLoader`'s
    (``loader``); ``batch_size`` is its windows per batch on this rank, ``drop_last`` and ``num_workers`` its own. Its ``dataset``
    is an ``IterableDataset``, so trainers that would put in a ``DistributedSampler`` of their own (Lightning
    Fabric) leave it alone: the loader deals ranks itself. A DataLoader built again from that dataset (accelerate's
    ``Accelerator.prepare``) is refused when iterated: see `tokembed.integrations.accelerate`.
    """

    def __init__(self, loader: WindowLoader) -> None:
        # num_workers: the loader's (what trainers read and log; its own iterator starts them, not DataLoader's)
        super().__init__(
            _Batches(loader), batch_size=loader.batch_size, drop_last=loader.drop_last, num_workers=loader.num_workers
        )
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)


def _too_few_windows(dataset: SlidingWindowDataset, batch_size: int, world_size: int) -> str:
    """Why a dataset gives no batch, and the options that give some: a packed dataset takes no stride (a smaller
    max_length packs more windows), and a mixture's epoch is whole steps whatever drop_last says."""
    mixture = isinstance(dataset, MixtureWindows)
    why = "a mixture's epoch is whole steps" if mixture else "drop_last=True drops that incomplete step"
    fixes = [
        "a smaller batch_size",
        "a smaller max_length" if getattr(dataset, "packing", None) else "a smaller stride",
    ]
    if not mixture:
        fixes.append("drop_last=False")
    return (
        f"the source gives {len(dataset)} windows, fewer than batch_size={batch_size} x world_size={world_size}, "
        f"and {why}, leaving nothing; use {', '.join(fixes[:-1])} or {fixes[-1]}"
    )


def _per_rank_batch(batch_size, global_batch_size, rank, world_size) -> int:
    """``batch_size``, or ``global_batch_size / world_size`` (which must divide)."""
    if global_batch_size is None:
        if batch_size is None:
            raise TypeError(
                "create_dataloader() needs batch_size (windows per rank) or global_batch_size (over all ranks)"
            )
        return batch_size
    g = check_positive_int("global_batch_size", global_batch_size)
    _, w = resolve_rank(rank, world_size)
    if g % w:
        raise ValueError(
            f"global_batch_size={g} is not divisible by world_size={w}: every rank reads the same number of windows; "
            f"use a multiple of {w} (e.g. {g // w * w or w}) or another number of ranks"
        )
    if batch_size is not None and batch_size * w != g:
        raise ValueError(
            f"batch_size={batch_size} x world_size={w} is not global_batch_size={g}; give only one of them"
        )
    return g // w


def _refuse_remote_options(remote: dict[str, Any]) -> None:
    given = [k for k, v in remote.items() if v is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} for a Mixture go to the Mixture itself: Mixture(sources, {given[0]}=...), "
            "so that it can read its remote sources' manifests"
        )


def create_dataloader(
    source: WindowSource | SlidingWindowDataset,
    *,
    batch_size: int | None = None,
    max_length: int | None = None,
    stride: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = True,
    num_workers: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    within_documents: bool = False,
    split: str | None = None,
    verify: bool = False,
    pin_memory: bool = False,
    prefetch_factor: int | None = None,
    multiprocessing_context: str | None = None,
    global_batch_size: int | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_bytes: int | str | None = None,
    shuffle_group: int | None = None,
    output: str = "pairs",
    return_documents: bool = False,
    max_documents: int | None = None,
    packing: str | None = None,
    materialize: bool | None = None,
) -> WindowLoader:
    """Batches of the chapter's windows from a shard folder, a token array or a text, at memory speed.

    Args:
        source: a shard folder (``Path``, or ``str`` of an existing folder), a Megatron dataset prefix, a
            `tokembed.Mixture` of those, a 1-D token array, a text, or a `SlidingWindowDataset` (then
            ``max_length``/``stride`` may be left out).
        batch_size: windows per batch on this rank (``B``); or give ``global_batch_size``.
        max_length: tokens per window (``T``).
        stride: tokens between window starts; default ``max_length``.
        shuffle: a new pseudo-random order each epoch, without replacement, fixed by ``(seed, epoch)``.
        seed: selects the orders (int >= 0).
        drop_last: drop the tail (< batch_size x world_size windows) of each epoch; else share it out
            in a last, shorter batch per rank (padded by wrapping around, see the module's notes).
        num_workers: DataLoader worker processes, each gathering a disjoint part of this rank's batches.
        rank, world_size: this process's share; default torch.distributed's when initialised, else 0 of 1.
        within_documents, split, verify: see `SlidingWindowDataset`.
        pin_memory, prefetch_factor, multiprocessing_context: passed to the workers' DataLoader.
        global_batch_size: windows per step over all ranks (``G``); ``batch_size`` is then ``G / world_size``.
            A state saved at one world size resumes at another with the same ``G`` (see the module's notes).
        storage_options, cache_dir, cache_bytes: for a remote shard folder (a URL) or a mixture's remote
            sources: see `SlidingWindowDataset`. The loader tells the cache its order: blocks are fetched ahead
            of use and evicted by Belady's rule (`tokembed.data.streaming`). With ``packing``, ``cache_dir`` is
            also where the packing plan and the materialized windows go (its ``packing/`` folder), local or not.
        shuffle_group: the locality option (see `LoaderConfig`): groups of this many consecutive windows in a
            random order, each group's windows shuffled; every epoch is still a permutation of all windows.
        output: ``"pairs"`` (default), ``"rows"`` (one (B, T+1) tensor) or ``"documents"`` (a `DocumentBatch`
            with ``position_ids``, ``cu_seqlens``, ``max_seqlen``, ``doc_lens``); see `LoaderConfig`.
        return_documents: ``True`` is ``output="documents"``.
        max_documents: pad each `DocumentBatch`'s ``cu_seqlens``/``doc_lens`` to this many documents.
        packing: pack whole documents into windows instead of sliding over the stream: ``"best-fit"``
            (best-fit decreasing; ``"first-fit"`` is the baseline). Documents longer than ``max_length`` are cut
            at window boundaries; targets are -100 where nothing is predicted. See `tokembed.data.packing`.
        materialize: with ``packing`` over a shard folder, write the packed windows once into the cache and read
            them as rows (the speed of sliding windows; as much disk as the split): see `PackedWindows`. None (the
            default): a local folder's split of up to `tokembed.data.packed.AUTO_MATERIALIZE_TOKENS` tokens is
            materialized when the cache can be written and the rows take at most half of its free space; False:
            always gathered. The batches are the same.

    Returns:
        A `WindowLoader`: iterate for ``(inputs, targets)``, int64 (B, T) each (or what ``output`` asks for);
        ``len()``, ``set_epoch``, ``state_dict``, ``load_state_dict``.

    Raises:
        ValueError: sizes below 1, a rank outside world_size, a source too short for one window or for
            one step of batch_size x world_size windows with drop_last, a damaged shard folder, a
            global_batch_size that world_size does not divide.
    """
    batch_size = _per_rank_batch(batch_size, global_batch_size, rank, world_size)
    check_bool("return_documents", return_documents)
    if return_documents and output != "documents":
        if output != "pairs":
            raise ValueError(
                f"return_documents=True asks for output='documents', but output={output!r} was given too; give one"
            )
        output = "documents"
    # Options first: a bad one is reported before a text is tokenized or shards are opened.
    config = LoaderConfig(
        batch_size=batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
        multiprocessing_context=multiprocessing_context,
        shuffle_group=shuffle_group,
        output=output,
        max_documents=max_documents,
    )
    resolve_rank(rank, world_size)
    options: dict[str, Any] = dict(
        max_length=max_length, stride=stride, within_documents=within_documents, split=split, verify=verify
    )
    remote = {"storage_options": storage_options, "cache_dir": cache_dir, "cache_bytes": cache_bytes}
    materialize = None if materialize is None else check_bool("materialize", materialize)
    dataset = _dataset(source, packing=packing, materialize=materialize, remote=remote, **options)
    return WindowLoader(dataset, config, rank=rank, world_size=world_size)


def _dataset(
    source: WindowSource | SlidingWindowDataset,
    *,
    max_length: int | None,
    stride: int | None,
    within_documents: bool,
    split: str | None,
    verify: bool,
    packing: str | None,
    materialize: bool | None,
    remote: dict[str, Any],
) -> SlidingWindowDataset:
    """The windows `create_dataloader` reads: ``source`` itself when it is a dataset, else built from it (``remote``:
    storage_options, cache_dir, cache_bytes, for a URL)."""
    if isinstance(source, SlidingWindowDataset):
        for name, value in (
            ("max_length", max_length),
            ("stride", stride),
            ("packing", packing),
            ("materialize", materialize or None),
        ):
            if value is not None and value != getattr(source, name, None):
                raise ValueError(
                    f"{name}={value!r} differs from the dataset's {name}={getattr(source, name, None)!r}; leave it out or build the dataset with it"
                )
        given = {"within_documents": within_documents, "split": split, "verify": verify, **remote}
        if any(v not in (None, False) for v in given.values()):
            raise ValueError(
                f"{', '.join(f'{k}={v!r}' for k, v in given.items() if v not in (None, False))} applies when "
                "create_dataloader builds the dataset; this one is built already: build it with that option"
            )
        return source
    if max_length is None:
        raise TypeError("create_dataloader() needs max_length (tokens per window), e.g. max_length=256")
    options: dict[str, Any] = dict(
        max_length=max_length, stride=stride, within_documents=within_documents, split=split, verify=verify
    )
    variant = getattr(source, "window_dataset_class", None)
    if variant is not None:  # a Mixture carries its own remote options
        _refuse_remote_options(remote)
    if packing is None:
        if materialize:
            raise ValueError(
                "materialize=True applies with packing (it stores packed windows); give packing= or leave it out"
            )
        return SlidingWindowDataset(source, **options, **({} if variant is not None else remote))
    if variant is not None:  # a Mixture: each source packed (MixtureWindows), each materialized or not
        return variant()(source, packing=packing, materialize=materialize, **options)
    return PackedWindows(source, packing=packing, materialize=materialize, **options, **remote)
