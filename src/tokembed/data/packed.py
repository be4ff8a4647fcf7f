"""Windows of whole documents: `PackedWindows`, the loader's dataset when ``packing`` is asked for.

The plan (which pieces of which documents fill each window) is `tokembed.data.packing`'s; this module
reads it: a batch of windows is one vectorized gather of its pieces' tokens, laid out from each row's
first slot, padding after (``eot_token``, or 0 when the source records none). Targets are the next
tokens of the same document; a document's last token and the padding predict nothing (``IGNORE_INDEX``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import json
import logging
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from tokembed._atomic import atomic_open
from tokembed._checks import check_bool
from tokembed._lock import waiting_lock
from tokembed.data.batch import IGNORE_INDEX, DocumentBatch, DocumentLayout
from tokembed.data.packing import PackingPlan, cached_plan, check_packer, plan_key, plan_packing
from tokembed.data.windows import SlidingWindowDataset, WindowSource, _split_rows
from tokembed.shards.reader import RemoteShardSet, ShardSet
from tokembed.storage.options import remote_options

__all__ = ["AUTO_MATERIALIZE_TOKENS", "PackedWindows"]

_log = logging.getLogger(__name__)

# The largest split `PackedWindows` materializes by itself (materialize=None): 2**28 tokens, 512 MiB of uint16 rows in
# the cache plus the padding (up to twice that when every document is just over half a window). Writing them costs
# about one epoch of gathering, once (~3 s at this size; benchmarks/bench_loader.py); every epoch after reads them
# ~3x faster, and every later run on the same data (the file is keyed by the data's sha256s) from its first batch.
# Larger splits are gathered unless materialize=True asks for the disk.
AUTO_MATERIALIZE_TOKENS = 1 << 28


@functools.lru_cache(maxsize=4)
def _arange(n: int) -> np.ndarray:
    a = np.arange(n, dtype=np.int64)
    a.flags.writeable = False
    return a


class PackedWindows(SlidingWindowDataset):
    """Whole documents packed into windows of ``max_length`` tokens (see `tokembed.data.packing`).

    ``SlidingWindowDataset(source, max_length=T, packing="best-fit")`` builds one; so does
    ``create_dataloader(..., packing="best-fit")``. Window ``k`` holds the pieces ``plan.window_first[k]
    ..`` of ``plan``; ``len()`` is the number of windows, and every token of the source is in exactly one.

    Args:
        source, split, verify, eot_token, tokenizer, text: as for `SlidingWindowDataset`.
        max_length: slots per window (``T``).
        packing: the packer, a name of `tokembed.data.packing.PACKERS` (``"best-fit"``: best-fit decreasing).
        materialize: (shard folders) write the packed windows' tokens once into the cache beside the plan, as
            rows of ``max_length + 1`` tokens (as much disk as the split's tokens), and read them as sliding
            windows are read: one row index per batch, several times faster than gathering the pieces. The
            batches are the same either way. None (the default): materialize a local folder's split of at most
            `AUTO_MATERIALIZE_TOKENS` tokens when the cache can be written and the rows take at most half of its
            free space (logged at INFO either way), else gather; False: always gather.
        cache_dir: the cache's root for the plan and the materialized windows (its ``packing/`` folder; default
            `tokembed.storage.options.default_cache_dir`); for a remote folder, the block cache's too.

    Attributes:
        plan: the `PackingPlan`; ``plan.stats()`` gives the padding share.
        packing: the packer's name.
        pad_token: the id that fills the padding.
    """

    _data_key: str  # what the cached plan and materialized windows are keyed by (shard folders)

    def __init__(
        self,
        source: WindowSource | None = None,
        *,
        max_length: int,
        packing: str = "best-fit",
        materialize: bool | None = None,
        stride: int | None = None,
        within_documents: bool = False,
        **options,
    ) -> None:
        self.packing = check_packer(packing)
        self._materialize_asked = None if materialize is None else check_bool("materialize", materialize)
        self.materialize = bool(self._materialize_asked)  # decided (None: automatically) once the plan is known
        if stride is not None or within_documents:
            raise ValueError(
                f"{'stride' if stride is not None else 'within_documents'} does not apply to packed windows "
                "(each window holds whole documents from its first slot); leave it out"
            )
        # The plan and the materialized rows go to ``cache_dir``'s packing/ folder when one is given (for a remote
        # folder it holds the block cache as well), else to tokembed's cache folder.
        # (A "~" is the home folder, as for the block cache; None: the default, found in each process.)
        given = remote_options(cache_dir=options.get("cache_dir")).cache_dir  # the CLI's --cache-dir too
        self._cache_dir = None if given is None else Path(given).expanduser()
        super().__init__(source, max_length=max_length, **options)

    def _plan_windows(self) -> None:
        if self.n_tokens < 1:
            raise ValueError(
                f"{self._describe()} has 0 tokens, so packing gives no window; use another split or source "
                "(`tokembed stats DIR` counts each split's tokens)"
            )
        if self._shards is not None:  # a folder's plan is cached, known by its tokens' and indexes' sha256
            index = [(s.n_documents, getattr(s, "index_sha256", None)) for s in self._shards.shards]
            self._data_key = json.dumps([self.fingerprint(), index])
            self.plan: PackingPlan = cached_plan(
                self._data_key,
                self.document_starts,
                self.n_tokens,
                max_length=self.max_length,
                packer=self.packing,
                cache_dir=self._cache_dir,
            )
            if self._materialize_asked is None:  # automatic: a local split small enough, when the cache takes it
                self.materialize = not self.streamed and self.n_tokens <= AUTO_MATERIALIZE_TOKENS
        else:
            if self.materialize:
                raise ValueError(
                    "materialize applies to shard folders (their packed windows are written to the cache); an array "
                    "or a text is packed in memory: leave materialize out"
                )
            self.plan = plan_packing(
                self.document_starts(), self.n_tokens, max_length=self.max_length, packer=self.packing
            )
        self.n_windows = self.plan.n_windows
        self.dropped_tokens = 0
        self.n_documents = self.plan.n_documents
        self.pad_token = 0 if self.eot_token is None else int(self.eot_token)
        if self.materialize:
            self._materialize()

    def _materialize(self) -> None:
        """The packed windows written to the cache now when absent (the first epoch reads at full speed too).
        Automatic (``materialize=None``): a cache that cannot be written leaves them gathered (the same batches)."""
        try:
            self._stored_files()
        except OSError as e:
            if self._materialize_asked is not None:
                raise
            _log.info("packed windows gathered from the shards: the cache could not take them (%s)", e)
            self.materialize = False

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_stored_pid", None)  # the materialized rows are mapped again in each process
        state.pop("_segment_table", None)  # made again in each process
        return state

    def __repr__(self) -> str:
        return (
            f"PackedWindows({self._describe()}, tokens={self.n_tokens}, documents={self.n_documents}, "
            f"windows={self.n_windows}, max_length={self.max_length}, packing={self.packing!r})"
        )

    def starts(self, indices) -> np.ndarray:
        """Where the first piece of each of windows ``indices`` starts in the stream: int64, same shape."""
        k = self._check_indices(np.asarray(indices, dtype=np.int64))
        return self.plan.piece_start[self.plan.window_first[k]]

    # -- gathering -----------------------------------------------------------------------------------
    #
    # A call lays out many windows at once (`_select`: arrays of one entry per piece or segment, no
    # tokens), then fills their tokens a few batches at a time (`_fill`: one index per slot, two takes).
    # Nothing loops over pieces or windows in Python.

    def _select(self, k: np.ndarray) -> _Selection:
        """The layout of windows ``k`` (R,) as rows of one flattened (R*T,) batch (see `_Selection`)."""
        p, t, r = self.plan, self.max_length, len(k)
        first = p.window_first[k]
        count = p.window_first[k + 1] - first  # (R,) pieces per window, >= 1
        head = np.zeros(r + 1, dtype=np.int64)
        count.cumsum(out=head[1:])  # (R+1,) each row's first piece, then P
        piece = (first - head[:-1]).repeat(count) + np.arange(head[-1])  # (P,)
        length = p.piece_len[piece].astype(np.int64)  # (P,)
        end = length.cumsum()  # (P,) where each piece ends, counting the pieces' tokens only
        row_fill = end[head[1:] - 1] - (end - length)[head[:-1]]  # (R,) filled slots per row
        dst = end - length + (np.arange(r) * t - (end - length)[head[:-1]]).repeat(count)  # (P,) first slot
        pad = np.flatnonzero(row_fill < t)  # (R',) rows with padding: one more segment each
        flat = np.concatenate([dst, pad * t + row_fill[pad]])
        order = flat.argsort(kind="stable")  # (S,) pieces and padding in slot order
        counts = count + (row_fill < t)  # (R,) segments per row
        return _Selection(
            flat=flat[order],
            src=np.concatenate([p.piece_start[piece], np.full(len(pad), -1, dtype=np.int64)])[order],
            length=np.concatenate([length, t - row_fill[pad]])[order],
            more=np.concatenate([~p.piece_last[piece], np.zeros(len(pad), dtype=bool)])[order],
            counts=counts,
            seg_head=np.concatenate([[0], counts.cumsum()]),
        )

    def _fill(self, sel: _Selection, r0: int, r1: int, x: np.ndarray, y: np.ndarray) -> None:
        """Inputs and targets of rows ``[r0, r1)`` of ``sel`` into ``x``, ``y`` ((r1-r0)*T,) int64.

        The pieces' tokens (and the token after each piece whose document goes on) come from the shard
        they lie in, or are first read together when they lie in several (`_read_spans`); then every slot
        is one take from them for its input and one for its target. Padding is ``pad_token`` with target
        -100, as is a document's last target.
        """
        t = self.max_length
        s0, s1 = int(sel.seg_head[r0]), int(sel.seg_head[r1])
        flat, src, length, more = (a[s0:s1] for a in (sel.flat, sel.src, sel.length, sel.more))
        flat = flat - r0 * t  # (S',) segment starts in these rows
        piece = src >= 0
        tokens, first = self._read_spans(src[piece], length[piece] + more[piece])
        at = np.zeros(len(flat), dtype=np.int64)
        at[piece] = first  # (S',) where each segment's tokens begin in ``tokens`` (padding: anywhere)
        idx = (at - flat).repeat(length)  # (n*T,) each slot's token in ``tokens`` ...
        np.add(idx, _arange(len(x)), out=idx)  # ... its segment's first token plus its place in the segment
        x[:] = tokens.take(idx, mode="clip")  # padding reads anything (clipped): overwritten below
        # A target is the next slot's input, but at the end of a piece: the document's next token, or nothing.
        y[:-1] = x[1:]
        end = flat + length - 1
        y[end[piece & more]] = tokens[(at + length)[piece & more]]
        y[end[piece & ~more]] = IGNORE_INDEX
        gaps = ~piece
        if gaps.any():  # padding: pad_token, predicting nothing
            n = length[gaps]
            slots = (flat[gaps] - (n.cumsum() - n)).repeat(n) + _arange(int(n.sum()))
            x[slots] = self.pad_token
            y[slots] = IGNORE_INDEX

    def _read_spans(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[start, start + length)`` of every span (each at most ``max_length + 1`` long):
        ``(tokens, first)``, where span ``i`` is ``tokens[first[i] : first[i] + lengths[i]]`` (source dtype).

        When every span lies in one shard, ``tokens`` is that shard (no copy). Else each span is read as a
        row of ``max_length + 1`` tokens through the shards' row views (as sliding windows are: one fancy
        row index per shard); a span too near its shard's end for a row (a document that goes on into the
        next shard, or the shard's last tokens) is read on its own.
        """
        if self.streamed:
            return self._read_remote_spans(starts, lengths)
        views, w = self._views(), self.max_length + 1
        seg = np.searchsorted(self._cum, starts, side="right") - 1  # (P,) the shard of each span's start
        local = starts - self._cum[seg]
        if len(seg) and (seg == seg[0]).all() and (local + lengths <= self._seg_len[seg[0]]).all():
            return self._flat(int(seg[0]), views), local
        rows = np.empty((len(starts), w), dtype=self.dtype)
        room = local + w <= self._seg_len[seg]  # (P,) a whole row fits in the shard
        for i in np.unique(seg[room]).tolist():
            sel = np.flatnonzero(room & (seg == i))
            rows[sel] = self._view(i, views)[local[sel]]
        return self._spans_as_rows(rows, starts, lengths, alone=~room)  # alone: near a shard's end

    def _read_remote_spans(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_read_spans` of a remote folder: rows of ``max_length + 1`` tokens through the block cache (the batch's
        blocks pinned, as sliding windows are read: never a whole shard in memory), the few spans too near the
        split's end for a row read on their own."""
        shards, w = cast(RemoteShardSet, self._shards), self.max_length + 1
        rows = np.empty((len(starts), w), dtype=self.dtype)
        fits = starts + w <= self.n_tokens
        rows[fits] = shards.rows(starts[fits], w)
        return self._spans_as_rows(rows, starts, lengths, alone=~fits)

    def _spans_as_rows(
        self, rows: np.ndarray, starts: np.ndarray, lengths: np.ndarray, *, alone: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """`_read_spans`' result from ``rows`` (P, max_length + 1), after reading the spans ``alone`` (too near an
        end for a whole row) on their own into the head of their rows."""
        for j in np.flatnonzero(alone).tolist():
            a = int(starts[j])
            rows[j, : lengths[j]] = cast(ShardSet, self._shards).read(a, a + int(lengths[j]))
        return rows.reshape(-1), np.arange(len(starts), dtype=np.int64) * rows.shape[1]

    def block_reads(self, k: np.ndarray) -> list[tuple[Any, np.ndarray, list[str], np.ndarray, np.ndarray]]:
        """The blocks of a remote folder that packed windows ``k`` read: each piece's row of ``max_length + 1``
        tokens, as `_read_remote_spans` reads them (see `SlidingWindowDataset.block_reads`); empty for local data
        and for materialized windows (read from the cache's rows: nothing to fetch)."""
        if not self.streamed or self.materialize:
            return []
        shards, p = cast(RemoteShardSet, self._shards), self.plan
        k = np.asarray(k, dtype=np.int64).ravel()
        first = p.window_first[k]
        count = p.window_first[k + 1] - first  # (R,) pieces per window
        piece = (first - (count.cumsum() - count)).repeat(count) + np.arange(int(count.sum()))  # (P,)
        rows, keys, shard, block = shards.block_reads(p.piece_start[piece], self.max_length + 1)
        return [(shards, np.arange(len(k)).repeat(count)[rows], keys, shard, block)]

    def _gather(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.materialize:
            return self._gather_stored(k, out)
        shape = (len(k), self.max_length)
        x, y = out if out is not None else (np.empty(shape, np.int64), np.empty(shape, np.int64))
        self._fill(self._select(k), 0, len(k), x.reshape(-1), y.reshape(-1))
        return torch.from_numpy(x), torch.from_numpy(y)

    # -- materialized windows: rows of T+1 tokens on disk, and where each row's targets predict nothing ------

    def _stored_files(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, ignore_first, ignore_at)``: the packed windows as a read-only (W, T+1) map (row ``w``: its
        T slots, then the token after its last slot), and which targets are ``IGNORE_INDEX``: row ``w``'s
        slots ``ignore_at[ignore_first[w] : ignore_first[w+1]]``. Written to the cache when absent; opened
        once per process."""
        pid, stored = self.__dict__.get("_stored_pid", (None, None))
        if pid == os.getpid() and stored is not None:
            return stored
        _, stem = plan_key(
            self._rows_key(), self.n_tokens, max_length=self.max_length, packer=self.packing, cache_dir=self._cache_dir
        )
        w, t = self.n_windows, self.max_length
        # The ignored targets are an npz not named .npz (the plans are).
        rows_path, ignore_path = Path(f"{stem}.rows-{np.dtype(self.dtype).name}"), Path(f"{stem}.ignored")
        size = w * (t + 1) * self.dtype.itemsize

        def stored_ignore() -> tuple[np.ndarray, np.ndarray] | None:  # None: the rows are not (all) there
            return _read_ignore(ignore_path, w) if _has_size(rows_path, size) else None

        ignore = stored_ignore()
        if ignore is None:
            # The ranks and workers of a machine open the dataset together: one writes the rows, the others wait
            # for it, then read them (nor do they each take the disk's room for a copy of their own).
            with waiting_lock(Path(f"{stem}.lock")) as held:
                ignore = stored_ignore()
                if ignore is None:
                    if held:  # no one else writes them now: a temporary file beside them is a killed writer's
                        _remove_leftovers(rows_path, ignore_path)
                    self._check_room(rows_path, size)
                    _log.info(
                        "packed windows materialized once into %s (%s bytes; materialize=False gathers them)",
                        rows_path,
                        f"{size:,}",
                    )
                    ignore = self._write_stored(rows_path, ignore_path)
        # A plain ndarray view of the map (it keeps the map open): np.memmap's row index costs ~1 us more a call.
        rows = np.memmap(rows_path, dtype=self.dtype, mode="r", shape=(w, t + 1)).view(np.ndarray)
        stored = (rows, *ignore)
        self._stored_pid = (os.getpid(), stored)
        return stored

    def _check_room(self, path: Path, size: int) -> None:
        """Materializing by itself (``materialize=None``) takes at most half of the cache's free space: the disk
        stays usable for what the user writes (checkpoints); asked for (True), the rows are written if they fit."""
        if self._materialize_asked is None:
            free = shutil.disk_usage(path.parent).free
            if 2 * size > free:
                raise OSError(
                    errno.ENOSPC,
                    f"the packed windows would take {size:,} bytes of the {free:,} free in {path.parent}, more than "
                    "half (materialize=True writes them)",
                )

    def _rows_key(self) -> str:
        """What the materialized rows are keyed by: the plan's key (the shards' sha256s), and for a token file whose
        sha256 is not recorded (a Megatron dataset made elsewhere: known by its ``.idx``'s, which another corpus of
        the same documents' lengths shares) the file as it is now (device, inode, size, mtime)."""
        shards = cast(ShardSet, self._shards)
        unhashed = [s.tokens for s in shards.shards if str(s.sha256).startswith("idx:")]  # `MegatronSplit`'s mark
        if not unhashed:
            return self._data_key
        stats = [os.stat(shards.root / name) for name in unhashed]
        return json.dumps([self._data_key, [(s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in stats]])

    def _write_stored(self, rows_path: Path, ignore_path: Path) -> tuple[np.ndarray, np.ndarray]:
        """Gather every window once (in order, a few MB at a time) into ``rows_path`` and its ignored targets
        into ``ignore_path``, both written atomically."""
        w, t = self.n_windows, self.max_length
        step = max(1, (1 << 18) // t)  # windows per chunk: 2 x 2 MiB of int64, reused (in cache: faster than larger)
        x, y, rows = np.empty((step, t), np.int64), np.empty((step, t), np.int64), np.empty((step, t + 1), self.dtype)
        counts, where = [], []
        with atomic_open(rows_path, "wb") as f:
            for a in range(0, w, step):
                n = min(step, w - a)
                xs, ys, rs = x[:n], y[:n], rows[:n]
                self._fill(self._select(np.arange(a, a + n)), 0, n, xs.reshape(-1), ys.reshape(-1))
                rs[:, :t] = xs
                last = ys[:, -1]  # the next token after the row, where the row's last document goes on
                rs[:, t] = np.where(last == IGNORE_INDEX, self.pad_token, last)
                f.write(rs.data)
                r, c = np.nonzero(ys == IGNORE_INDEX)  # row-major: each row's slots in order
                counts.append(np.bincount(r, minlength=n))
                where.append(c.astype(np.int32))
        first = np.zeros(w + 1, dtype=np.int64)
        np.cumsum(np.concatenate(counts), out=first[1:])
        at = np.concatenate(where)
        with atomic_open(ignore_path, "wb") as f:
            np.savez(f, first=first, at=at)
        return first, at

    def _gather_stored(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``k`` (R,) from the materialized rows: one row index, two casts, then -100 where nothing is
        predicted (a few per row)."""
        rows, first, at = self._stored_files()
        inputs, targets = _split_rows(rows[k], out)  # (R, T) int64 each
        lo = first[k]
        n = first[k + 1] - lo  # (R,) ignored targets per row
        i = (lo - (n.cumsum() - n)).repeat(n) + _arange(int(n.sum()))  # their entries in ``at``
        slots = at[i] + (_arange(len(k)) * self.max_length).repeat(n)  # (N,) in the flattened batch
        targets.numpy().reshape(-1)[slots] = IGNORE_INDEX
        return inputs, targets

    rows_refusal = (
        "packed windows are not rows of the stream (their targets mark document ends with -100); "
        "use output='pairs' or output='documents' with packing"
    )

    def _segments(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows ``k``'s segments ``(flat, row, counts)`` as `_select` lays them out, from a table of every
        window's segment starts made once per process (`_select` of them all, a block at a time; it keeps one
        int32 per piece and padded window, and one int64 per window)."""
        pid, table = self.__dict__.get("_segment_table", (None, None))
        if pid != os.getpid():
            t, parts, heads = self.max_length, [], [np.zeros(1, dtype=np.int64)]
            for a in range(0, self.n_windows, 1 << 16):
                sel = self._select(np.arange(a, min(a + (1 << 16), self.n_windows)))
                parts.append((sel.flat % t).astype(np.int32))  # each segment's first slot in its window
                heads.append(sel.seg_head[1:] + heads[-1][-1])
            table = np.concatenate(heads), np.concatenate(parts)
            self._segment_table = (os.getpid(), table)
        head, local = table
        lo = head[k]
        counts = head[k + 1] - lo  # (R,) segments per window
        s = int(counts.sum())
        row = _arange(len(k)).repeat(counts)  # (S,)
        at = (lo - (counts.cumsum() - counts)).repeat(counts) + _arange(s)  # (S,) their entries in the table
        return local[at] + row * self.max_length, row, counts

    def _packed_segments(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows ``k``'s segments ``(flat, row, counts)`` (see `tokembed.data.batch.DocumentLayout`): one per
        piece, and a row's padding as one more."""
        return self._segments(k) if self.materialize else self._select(k).segments(self.max_length)

    def _document_batches(
        self,
        k: np.ndarray,
        *,
        batch_size: int,
        chunk: int = 1,
        max_documents: int | None = None,
        buffers: Callable[[tuple[int, int]], tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> Iterator[DocumentBatch]:
        t, step = self.max_length, chunk * batch_size
        sel = None if self.materialize else self._select(k)  # the rows read: only the segments are needed
        segments = self._segments(k) if sel is None else sel.segments(t)
        layout = DocumentLayout(segments, length=t, batch_size=batch_size, max_documents=max_documents)
        for r0 in range(0, len(k), step):
            r1 = min(r0 + step, len(k))
            shape = (r1 - r0, t)
            out = buffers(shape) if buffers is not None else (np.empty(shape, np.int64), np.empty(shape, np.int64))
            if sel is None:
                inputs, targets = self._gather_stored(k[r0:r1], out)
            else:
                self._fill(sel, r0, r1, out[0].reshape(-1), out[1].reshape(-1))
                inputs, targets = torch.from_numpy(out[0]), torch.from_numpy(out[1])
            yield from layout.batches(inputs, targets, r0 // batch_size)


@dataclass(frozen=True)
class _Selection:
    """Windows laid out as the rows of one flattened (R*T,) batch, as segments: every piece, and each
    row's padding (if any) as one more, in slot order.

    Attributes:
        flat: (S,) int64 each segment's first slot.
        src: (S,) int64 where a piece starts in the stream; -1 for padding.
        length: (S,) int64 slots of each segment.
        more: (S,) bool, True where the piece's document goes on after it.
        counts: (R,) segments per row.
        seg_head: (R+1,) each row's first segment, then S.
    """

    flat: np.ndarray
    src: np.ndarray
    length: np.ndarray
    more: np.ndarray
    counts: np.ndarray
    seg_head: np.ndarray

    def segments(self, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(flat, row, counts)``, as `tokembed.data.batch.DocumentLayout` takes them."""
        return self.flat, self.flat // t, self.counts


def _remove_leftovers(*paths: Path) -> None:
    """Remove the temporary files that writers of ``paths`` killed midway left (`tokembed._atomic.atomic_open`'s
    ``.NAME.tmp-*``): each is up to the split's size, and nothing else would ever remove it."""
    for path in paths:
        for tmp in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _has_size(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def _read_ignore(path: Path, windows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A materialized packing's ignored targets ``(first (W+1,), at (N,))``, or None (absent or damaged)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            first, at = z["first"], z["at"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    return (first, at) if len(first) == windows + 1 and first[-1] == len(at) else None
