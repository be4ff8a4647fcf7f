"""The windows of a `Mixture` or a `PhasedMixture`: slot ``k`` of the global order -> one window of one source.

``SlidingWindowDataset(mixture, max_length=...)`` builds this: one `SlidingWindowDataset` per source
(same window options), and the mixture's slot schedule on top (`Mixture.slot_schedule`: a
`tokembed.data.schedule.QuotaSchedule`, or a phased mixture's `PhaseSchedule`). Slot
``k`` is draw ``j`` of source ``s``; the draw is position ``j mod n_s`` of the source's epoch
``j div n_s``, whose order is a `FeistelPermutation` keyed by (mixture seed, order seed, source, epoch).
Nothing is stored per window or per slot. `codes` gives any slots' windows by arithmetic: it is also the
future order a cache may read ahead of the loader.

``len()`` is a nominal epoch, the sum of the sources' windows (of a phased mixture: its first phase's
sources'); the global order itself never ends.
A loader reads slots ``0, 1, 2, ...`` in order, epoch ``e`` being its next ``len() // global_batch``
steps; the order seed and ``shuffle`` are the loader's (``dataset[k]`` uses seed 0, shuffled).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from tokembed.data.batch import DocumentBatch, DocumentLayout
from tokembed.data.packed import PackedWindows
from tokembed.data.schedule import RESUME_KEYS, check_resume, first_slot, sources_fingerprint
from tokembed.data.shuffle import FeistelFamily, FeistelPermutation, GroupedPermutation
from tokembed.data.windows import SlidingWindowDataset

__all__ = ["MixtureWindows"]

_PERMS_KEPT = 64  # (source, epoch) permutations cached per process: a batch touches one or two per source


class MixtureWindows(SlidingWindowDataset):
    """Sliding windows over a `Mixture` of shard folders, in its global order.

    Args:
        mixture: the `tokembed.Mixture` or `tokembed.PhasedMixture`: sources and weights.
        max_length, stride, within_documents, split, verify: as for `SlidingWindowDataset`, for every source.
        packing: pack each source's whole documents into windows (a `tokembed.data.packing.PACKERS` name,
            see `PackedWindows`); the schedule then draws packed windows. None: sliding windows.
        materialize: with ``packing``, each source's packed windows written once to the cache and read as rows
            (`PackedWindows`' ``materialize``, for each source: None decides per source; the same batches).

    Attributes:
        mixture: the `Mixture`.
        sources: one `SlidingWindowDataset` per source.
        n_windows: the nominal epoch (``len()``): the sum of the sources' windows (a phased mixture's: its
            first phase's sources').
        schedule: slot -> (source, draw), for windows of ``max_length`` tokens.
        phases: the mixture's `tokembed.data.phases.Phase` s (one for a `Mixture`); first_slots: the slot
            each starts at (``ceil(start / max_length)``).
    """

    def __init__(
        self,
        mixture,
        *,
        max_length: int,
        stride: int | None = None,
        within_documents: bool = False,
        split: str = "train",
        verify: bool = False,
        packing: str | None = None,
        materialize: bool | None = None,
        **unused,
    ) -> None:
        if materialize is not None and packing is None:
            raise ValueError(
                "materialize applies with packing (it stores packed windows); give packing= or leave it out"
            )
        if any(v is not None for v in unused.values()):
            raise TypeError(f"{', '.join(unused)} do not apply to a Mixture of shard folders; leave them out")
        kw: dict[str, Any] = dict(
            max_length=max_length, stride=stride, within_documents=within_documents, split=split, verify=verify
        )
        self.mixture, self.packing = mixture, packing
        r = mixture.remote  # for the sources that are URLs
        kw |= dict(storage_options=r.storage_options, cache_dir=r.cache_dir, cache_bytes=r.cache_bytes)
        if packing is None:
            self.sources = [SlidingWindowDataset(p, **kw) for p in mixture.paths]
        else:  # the schedule draws packed windows of each source, exactly as it draws sliding ones
            self.sources = [PackedWindows(p, packing=packing, materialize=materialize, **kw) for p in mixture.paths]
        first = self.sources[0]
        self.max_length, self.stride, self.within_documents = first.max_length, first.stride, first.within_documents
        self.source_kind = "mixture"
        self.n_tokens = sum(s.n_tokens for s in self.sources)
        # The nominal epoch (len()): a Mixture's sources, a PhasedMixture's first phase's (later phases never move it).
        self.n_windows = sum(len(self.sources[i]) for i in mixture.epoch_sources)
        self.schedule = mixture.slot_schedule(max_length=self.max_length)  # slot -> (source, draw)
        self.phases = mixture.phases  # one for a Mixture
        self.first_slots = tuple(first_slot(ph.start, self.max_length) for ph in self.phases)  # where each phase starts
        self.eot_token = first.eot_token
        self._sizes = np.array([len(s) for s in self.sources], dtype=np.int64)  # (S,)
        self._offsets = np.cumsum([0] + [s.n_tokens for s in self.sources], dtype=np.int64)  # (S+1,)
        self._fingerprint = None
        self._perms: dict[tuple[int, int, int], FeistelPermutation] = {}  # (source, epoch, seed)
        self._grouped_perms: dict[tuple[int, int, int, int], GroupedPermutation] = {}  # (source, epoch, seed, group)

    def check_unchanged(self) -> None:
        for source in self.sources:
            source.check_unchanged()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_perms"] = {}
        state["_grouped_perms"] = {}
        state.pop("_segs", None)  # memory maps: reopened in the receiving process
        state.pop("_doc_index", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        packing = f", packing={self.packing!r}" if self.packing else ""
        return f"MixtureWindows({self.mixture!r}, windows={self.n_windows}, max_length={self.max_length}, stride={self.stride}{packing})"

    def _describe(self) -> str:
        return f"the mixture {self.mixture!r}"

    # -- the global order ----------------------------------------------------------------------------

    def _perm(self, source: int, epoch: int, seed: int) -> FeistelPermutation:
        key = (source, epoch, seed)
        perm = self._perms.get(key)
        if perm is None:
            if len(self._perms) >= _PERMS_KEPT:
                self._perms.clear()
            # One key per (mixture seed, order seed, source); the epoch re-keys it (FeistelPermutation).
            words = [self.mixture.seed, seed, source]
            sub = int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0])
            perm = self._perms[key] = FeistelPermutation(int(self._sizes[source]), seed=sub, epoch=epoch)
        return perm

    def codes(self, slots: np.ndarray, *, shuffle: bool = True, seed: int = 0, group: int | None = None) -> np.ndarray:
        """The windows of global slots ``slots``, each coded ``window * S + source``: same shape, int64.

        With ``group`` (the loaders' ``shuffle_group``), each source's epoch visits groups of ``group`` windows in
        a random order (`GroupedPermutation`) instead of all its windows at once."""
        slots = np.asarray(slots, dtype=np.int64)
        source, draw = self.schedule.draws(slots.ravel())  # (K,), (K,)
        epoch, pos = np.divmod(draw, self._sizes[source])
        if not shuffle:
            return (pos * len(self._sizes) + source).reshape(slots.shape)
        if group is not None:
            return (self._grouped(source, epoch, pos, seed, group) * len(self._sizes) + source).reshape(slots.shape)
        perms: list[FeistelPermutation] = []  # one permutation per (source, epoch) in the block
        which = np.empty_like(pos)  # the permutation of each position
        for s in np.flatnonzero(np.bincount(source, minlength=len(self._sizes))).tolist():
            sel = np.flatnonzero(source == s)
            first, last = int(epoch[sel].min()), int(epoch[sel].max())  # one or two epochs in a loader's block
            which[sel] = len(perms) + epoch[sel] - first
            perms += [self._perm(s, e, seed) for e in range(first, last + 1)]
        window = FeistelFamily(perms)(pos, which)
        return (window * len(self._sizes) + source).reshape(slots.shape)

    def _grouped(self, source: np.ndarray, epoch: np.ndarray, pos: np.ndarray, seed: int, group: int) -> np.ndarray:
        """Windows of ``pos`` in each (source, epoch)'s grouped order: (K,)."""
        window = np.empty_like(pos)
        for s in np.flatnonzero(np.bincount(source, minlength=len(self._sizes))).tolist():
            for e in np.unique(epoch[source == s]).tolist():
                sel = np.flatnonzero((source == s) & (epoch == e))
                window[sel] = self._group_perm(s, e, seed, group)(pos[sel])
        return window

    def _group_perm(self, source: int, epoch: int, seed: int, group: int) -> GroupedPermutation:
        key = (source, epoch, seed, group)
        perm = self._grouped_perms.get(key)
        if perm is None:
            if len(self._grouped_perms) >= _PERMS_KEPT:
                self._grouped_perms.clear()
            sub = int(self._perm(source, epoch, seed).keys[0] >> np.uint64(1))  # the source's own key
            perm = self._grouped_perms[key] = GroupedPermutation(int(self._sizes[source]), group, seed=sub, epoch=epoch)
        return perm

    def sources_of(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(source, window)`` of coded windows (what `codes` returns)."""
        window, source = np.divmod(np.asarray(codes, dtype=np.int64), len(self._sizes))
        return source, window

    # -- gathering -----------------------------------------------------------------------------------

    def _check_indices(self, idx: np.ndarray) -> np.ndarray:
        return self.codes(super()._check_indices(idx))

    def starts(self, indices) -> np.ndarray:
        raise TypeError(
            "a mixture's windows start in several token streams; use sources_of(codes(slots)) and each source's starts()"
        )

    def _segments(self) -> tuple[np.ndarray, list[np.ndarray]]:
        """Every source's segments (shards) end to end, as one stream: ``(cumulative (n+1,), flat views)``.

        Made once per process (each worker maps its own files). One search over it places a batch's
        windows from all sources at once.
        """
        pid, segments = self.__dict__.get("_segs", (None, None))
        if pid != os.getpid():
            cum, flats = [0], []
            for ds in self.sources:
                views = ds._views()
                for i, n in enumerate(ds._seg_len.tolist()):
                    flats.append(ds._flat(i, views))
                    cum.append(cum[-1] + n)
            segments = (np.asarray(cum, dtype=np.int64), flats)
            self._segs = (os.getpid(), segments)
        return segments

    def _straddler(self, start: int) -> np.ndarray:
        """The tokens of a window that crosses a shard boundary of its source (a new array)."""
        s = int(np.searchsorted(self._offsets, start, side="right")) - 1
        local = start - int(self._offsets[s])
        return self.sources[s]._read(local, local + self.max_length + 1)

    def _window_starts(self, codes: np.ndarray) -> np.ndarray:
        """Where coded windows start in the sources' streams end to end: (B,) int64."""
        source, window = self.sources_of(codes)  # (B,), (B,)
        if not self.within_documents:  # every source's window k starts at k * stride of its stream
            return window * self.stride + self._offsets[source]
        starts = np.empty(len(codes), dtype=np.int64)
        for s in np.flatnonzero(np.bincount(source, minlength=len(self.sources))).tolist():
            sel = source == s
            starts[sel] = self.sources[s]._starts(window[sel]) + self._offsets[s]
        return starts

    def _rows(self, starts: np.ndarray) -> np.ndarray:
        if self.streamed:  # a remote source: each source gathers its own rows (its blocks pinned in the cache)
            return self._rows_by_source(np.searchsorted(self._offsets, starts, side="right") - 1, starts)
        cum, flats = self._segments()
        w = self.max_length + 1
        seg = np.searchsorted(cum, starts, side="right") - 1  # (B,) the segment of each start
        local = starts - cum[seg]
        inside = local + w <= cum[seg + 1] - cum[seg]
        pieces = [
            flats[i][j : j + w] if ok else self._straddler(a)
            for i, j, ok, a in zip(seg.tolist(), local.tolist(), inside.tolist(), starts.tolist())
        ]
        return np.concatenate(pieces).reshape(len(starts), w)  # (B, T+1): one copy, in the batch's order

    # -- packed sources: each source gathers its own windows, the batch is put together in its order ----------

    def _by_source(self, codes: np.ndarray, part) -> None:
        """Call ``part(rows, source dataset, windows)`` once per source in the batch, with its rows (K,)."""
        source, window = self.sources_of(codes)
        for s in np.flatnonzero(np.bincount(source, minlength=len(self.sources))).tolist():
            rows = np.flatnonzero(source == s)
            part(rows, self.sources[s], window[rows])

    def _gather(
        self, codes: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.packing is None:
            return super()._gather(codes, out)
        shape = (len(codes), self.max_length)
        x, y = out if out is not None else (np.empty(shape, np.int64), np.empty(shape, np.int64))

        def part(rows, ds, windows):
            x[rows], y[rows] = (t.numpy() for t in ds._gather(windows))

        self._by_source(codes, part)
        return torch.from_numpy(x), torch.from_numpy(y)

    def _document_batches(
        self,
        codes: np.ndarray,
        *,
        batch_size: int,
        chunk: int = 1,
        max_documents: int | None = None,
        buffers: Callable[[tuple[int, int]], tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> Iterator[DocumentBatch]:
        if self.packing is None:
            yield from super()._document_batches(
                codes, batch_size=batch_size, chunk=chunk, max_documents=max_documents, buffers=buffers
            )
            return
        # The layout of all the batches at once (each source's segments, moved to its rows), their tokens gathered
        # ``chunk`` batches at a time (into the loader's buffers when given), as for one folder.
        t, step = self.max_length, chunk * batch_size
        segs: list[np.ndarray] = []

        def part(rows, ds, windows):
            flat, row, _ = ds._packed_segments(windows)
            segs.append(flat + (rows[row] - row) * t)  # each source's rows moved to theirs in the batch

        self._by_source(codes, part)
        flat = np.sort(np.concatenate(segs))
        row = flat // t
        segments = (flat, row, np.bincount(row, minlength=len(codes)))
        layout = DocumentLayout(segments, length=t, batch_size=batch_size, max_documents=max_documents)
        for r0 in range(0, len(codes), step):
            part_codes = codes[r0 : r0 + step]
            out = None if buffers is None else buffers((len(part_codes), t))
            inputs, targets = self._gather(part_codes, out)
            yield from layout.batches(inputs, targets, r0 // batch_size)

    def _window_bounds(self, codes: np.ndarray) -> None:
        """No table: coded windows are searched per batch (`SlidingWindowDataset._window_bounds`)."""
        return None

    @property
    def rows_refusal(self) -> str | None:  # type: ignore[override]
        return self.sources[0].rows_refusal if self.packing is not None else None

    def document_starts(self) -> np.ndarray:
        """Every source's document starts, in the sources' streams end to end: sorted int64 (D,)."""
        pid, starts = self.__dict__.get("_doc_index", (None, None))
        if pid != os.getpid():
            starts = np.concatenate([s.document_starts() + o for s, o in zip(self.sources, self._offsets.tolist())])
            self._doc_index = (os.getpid(), starts)
        return starts

    @property
    def streamed(self) -> bool:
        """Whether any source is a remote folder (read in blocks through the cache)."""
        return any(s.streamed for s in self.sources)

    def block_reads(self, codes: np.ndarray) -> list[tuple[Any, np.ndarray, list[str], np.ndarray, np.ndarray]]:
        """The blocks of remote sources that coded windows ``codes`` read (see `SlidingWindowDataset.block_reads`)."""
        source, window = self.sources_of(np.asarray(codes, np.int64).ravel())
        out = []
        for s in np.flatnonzero(np.bincount(source, minlength=len(self.sources))).tolist():
            sel = np.flatnonzero(source == s)
            for ss, rows, keys, shard, block in self.sources[s].block_reads(window[sel]):
                out.append((ss, sel[rows], keys, shard, block))
        return out

    def _rows_by_source(self, source: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """(B, T+1) rows, each source's windows gathered by that source: ``starts`` in the sources' joint stream."""
        rows = np.empty(
            (len(starts), self.max_length + 1), dtype=np.dtype(f"<u{max(s.dtype.itemsize for s in self.sources)}")
        )
        for s in np.flatnonzero(np.bincount(source, minlength=len(self.sources))).tolist():
            sel = np.flatnonzero(source == s)
            rows[sel] = self.sources[s].gather_rows(starts[sel] - self._offsets[s])
        return rows

    def fingerprint(self) -> str:
        """A hash of the sources' data fingerprints (not of their paths, nor of the weights or seed)."""
        if self._fingerprint is None:
            self._fingerprint = sources_fingerprint([s.fingerprint() for s in self.sources])
        return self._fingerprint

    def state_entries(self) -> dict:
        """What a loader's state records of the mixture beside the data (`Mixture.state_entries`)."""
        return self.mixture.state_entries(self.source_records())

    def source_records(self) -> list[dict]:
        """Each source's path, data fingerprint and windows (what a phased mixture's resume compares)."""
        return [
            {"path": str(p), "data": s.fingerprint(), "windows": len(s)}
            for p, s in zip(self.mixture.paths, self.sources)
        ]

    def resume_keys(self, saved: dict) -> tuple[str, ...]:
        """The keys of a saved loader config that `resume_check` compares (the loader compares the rest one by
        one): the data and the schedule when either side has phases (a `PhasedMixture`), else none."""
        phased = "phases" in saved or "phases" in self.mixture.state_entries()
        return RESUME_KEYS if phased else ()

    def resume_check(self, saved: dict, *, slot: int) -> list[str]:
        """A loader state saved at global slot ``slot``: raise if a phase that had started, or the data it read,
        differs here; else what changed in the schedule after it, for the log
        (`tokembed.data.schedule.check_resume`)."""
        return check_resume(saved, self.phases, self.source_records(), slot=slot, max_length=self.max_length)
