"""Batches that say where documents begin and end: `DocumentBatch`, and the arithmetic behind it.

A window of ``T`` tokens holds *segments*: the pieces of the documents it reads. A segment starts at the
window's first token and at every document start inside the window (from the shards' document index,
or, packed, at every piece the packer placed), so a segment never crosses a document boundary nor a
row. What modern trainers ask of a batch follows from the segments' starts alone:

- ``position_ids`` (B, T): each token's distance from its segment's start (0 at the window's first token
  and at each document start): torchtitan's per-token ``positions``, Hugging Face's ``position_ids``;
- ``cu_seqlens`` (S+1,) int32: where each segment starts in the flattened batch (B*T tokens), then
  ``B*T``: flash-attention's varlen and Megatron's THD layout; optionally padded to a fixed length by
  repeating ``B*T`` (zero-length sequences) so that ``torch.compile`` sees one shape;
- ``max_seqlen``: the longest segment;
- ``doc_lens`` (B, D) int32: each row's segment lengths, zero-padded (OLMo-core's ``doc_lens``).

Everything is computed for many batches at once in a fixed number of numpy calls (`DocumentLayout`);
nothing loops over windows or documents in Python. A loader's batch makes ``position_ids`` (the one per-token
pass: for the few batches whose tokens were gathered together), ``cu_seqlens`` and ``doc_lens`` (views of the
layout's) when they are first read: each trainer reads only some of them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["IGNORE_INDEX", "DocumentBatch", "DocumentLayout", "document_batch", "window_segments"]

IGNORE_INDEX = -100  # a target nothing is predicted for (padding, a packed document's last token): torch's default


@dataclass(frozen=True)
class DocumentBatch:
    """One batch and where its documents begin and end (see the module's notes).

    A loader's batches make ``position_ids``, ``cu_seqlens`` and ``doc_lens`` when they are first read, from the
    metadata the loader laid out for many batches at once, and keep them: each trainer reads only some of them
    (torchtitan and Hugging Face ``position_ids``, flash-attention's varlen ``cu_seqlens``, OLMo-core
    ``doc_lens``), and the ``position_ids`` pass is most of what the metadata costs. Reading, ``==``, ``repr``,
    ``to``, ``pin_memory``, pickling (DataLoader workers) and `dataclasses.fields`/``replace``/``asdict`` see
    every field as usual; ``vars(batch)`` shows only the fields read so far (use `dataclasses.fields`). A batch built
    by hand (``DocumentBatch(...)``, ``dataclasses.replace``) has its fields checked against ``inputs``: the error
    names the one that disagrees.

    Attributes:
        inputs: (B, T) int64 token ids.
        targets: (B, T) int64, the inputs shifted by one; ``IGNORE_INDEX`` (-100) where nothing is
            predicted (packing: padding, and each document's last token).
        position_ids: (B, T) int32, 0 at each row's first token and at each document start (int32: half the
            bytes of int64, and every consumer indexes with it: nn.Embedding, RoPE tables, HF, torchtitan).
        cu_seqlens: (S+1,) int32 segment starts in the flattened (B*T,) batch, then B*T (padded to a
            fixed length by repeating B*T when the loader was given ``max_documents``).
        max_seqlen: the longest segment, in tokens.
        doc_lens: (B, D) int32, each row's segment lengths, zero-padded (D = ``max_documents`` if given).
    """

    # "_made": where a loader's batch makes the fields it was built without (`_MadeOnRead`); a slot, so that it
    # stays out of ``vars()``, which holds the fields themselves.
    __slots__ = ("__dict__", "__weakref__", "_made")

    inputs: torch.Tensor
    targets: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    doc_lens: torch.Tensor

    def __post_init__(self) -> None:
        _check_fields(self)  # a batch built by hand (a loader's skip __init__: their fields agree by construction)

    def document_ids(self) -> torch.Tensor:
        """Which segment each token belongs to, counting from 0 in each row: (B, T) int64."""
        return (self.position_ids == 0).long().cumsum(dim=1) - 1

    def _map(self, fn) -> DocumentBatch:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        batch = object.__new__(type(self))  # a subclass stays itself; checked once: no check, no sync, per copy
        object.__setattr__(
            batch, "__dict__", {k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
        )
        return batch

    def to(self, device: Any, *, non_blocking: bool = False) -> DocumentBatch:
        """Every tensor moved to ``device``."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> DocumentBatch:
        """Every tensor in page-locked memory (DataLoader's ``pin_memory=True`` calls this)."""
        return self._map(lambda t: t.pin_memory())

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def _state(self) -> dict[str, Any]:
        """Every field, made if need be, in their order, then the rest of ``__dict__`` (not the slot ``_made``)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**fields, **self.__dict__}

    def __copy__(self) -> DocumentBatch:
        batch = object.__new__(type(self))  # a subclass stays itself
        object.__setattr__(batch, "__dict__", self._state())  # the same tensors
        return batch

    def __getstate__(self) -> dict[str, Any]:
        # Pickling (DataLoader workers, torch.save) and deepcopy: every field, made if need be, each tensor only its
        # own bytes. A loader's tensors are views of its chunk's (inputs, targets, position_ids) and of its layout's
        # (cu_seqlens): pickled as views, one batch would carry every batch of its chunk. Unpickled (no
        # __setstate__: the state goes into __dict__), a batch is a plain eager one of its own class.
        state = self._state()
        for name, value in state.items():
            if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() != value.nbytes:
                state[name] = value.clone()
        return state


def _check_fields(b: DocumentBatch) -> None:
    """Raise, naming the field, where a batch's fields disagree with its (B, T) ``inputs``."""
    x = b.inputs
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"inputs must be a (B, T) tensor of token ids, got {getattr(x, 'shape', type(x).__name__)}")
    (rows, t), shape = x.shape, tuple(x.shape)
    for name in ("targets", "position_ids"):
        v = getattr(b, name)
        if not isinstance(v, torch.Tensor) or v.dtype.is_floating_point or v.dtype.is_complex or v.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor, got {getattr(v, 'dtype', type(v).__name__)}")
        if tuple(v.shape) != shape:
            raise ValueError(f"{name} must have the shape of inputs {shape}, got {tuple(v.shape)}")
    cu = b.cu_seqlens.tolist() if isinstance(b.cu_seqlens, torch.Tensor) else b.cu_seqlens
    if not isinstance(cu, list) or len(cu) < 2 or cu[0] != 0 or cu[-1] != rows * t:
        raise ValueError(
            f"cu_seqlens must run from 0 to B*T = {rows * t} (each segment's start in the flattened batch, then B*T), "
            f"got {cu}"
        )
    steps = [hi - lo for lo, hi in zip(cu, cu[1:])]
    if min(steps) < 0:
        raise ValueError(f"cu_seqlens must not decrease, got {cu}")
    if b.max_seqlen != max(steps):
        raise ValueError(
            f"max_seqlen must be the longest segment, {max(steps)} (cu_seqlens' largest step), got {b.max_seqlen}"
        )
    lens = b.doc_lens
    if not isinstance(lens, torch.Tensor) or lens.dim() != 2 or lens.shape[0] != rows:
        raise ValueError(
            f"doc_lens must have one row per row of inputs ({rows}), got shape {tuple(getattr(lens, 'shape', ()))}"
        )
    if (sums := lens.sum(dim=1).tolist()) != [t] * rows:
        raise ValueError(f"each row of doc_lens must add up to T = {t} (its segments' lengths, then zeros), got {sums}")


class _MadeOnRead:
    """A `DocumentBatch` field that a loader's batch makes on first read, then keeps in the instance, where
    attribute lookup finds it first (a non-data descriptor); a batch built with the field never gets here. One
    subclass per field (`_PositionIds`, `_CuSeqlens`, `_DocLens`), each ``__get__`` whole: a first read is one
    Python call (~0.25 us less per field than a generic ``__get__`` calling a maker)."""

    def __get__(self, batch: DocumentBatch | None, owner: type | None = None) -> Any:
        raise NotImplementedError


def _document_batch(
    inputs: torch.Tensor, targets: torch.Tensor, max_seqlen: int, made: tuple[_Chunk, int]
) -> DocumentBatch:
    """A loader's `DocumentBatch`: its tokens and longest segment, and ``made`` = ``(chunk, i)``, the `_Chunk` that
    makes batch ``i``'s other fields on first read. Trusted (nothing to validate), without the frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field)."""
    batch = object.__new__(DocumentBatch)
    object.__setattr__(batch, "__dict__", {"inputs": inputs, "targets": targets, "max_seqlen": max_seqlen})
    object.__setattr__(batch, "_made", made)
    return batch


@functools.lru_cache(maxsize=8)
def _arange(n: int, dtype: str = "int64") -> np.ndarray:
    a = np.arange(n, dtype=dtype)
    a.flags.writeable = False
    return a


def window_segments(
    starts: np.ndarray,
    doc_starts: np.ndarray,
    length: int,
    bounds: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The segments of windows of ``length`` tokens starting at ``starts`` in a stream with documents starting
    at ``doc_starts``, laid out as the rows of one flattened batch.

    Args:
        starts: (R,) int64 global offsets of the windows' first tokens (row ``r`` is window ``starts[r]``).
        doc_starts: (D,) int64 sorted global offsets of every document start.
        length: tokens per window (``T``).
        bounds: ``(lo, hi)`` (R,) each when known (a dataset's table of its windows): the index of the first
            document start after each window's first token, and of the first at or after its end; else searched.

    Returns:
        ``(flat, row, counts)``: (S,) int64 where each segment starts in the flattened (R*T,) batch, sorted
        (row ``r``'s first segment at ``r*T``, then one per document start inside the window); (S,) the row
        of each segment; (R,) segments per row.
    """
    # ndarray methods rather than np.* functions: a batch's layout is ~20 calls on small arrays, where
    # numpy's Python-level wrappers would cost as much as the work.
    if bounds is None:
        bounds = doc_starts.searchsorted(starts, side="right"), doc_starts.searchsorted(starts + length, side="left")
    lo = bounds[0]  # (R,) first document start after the window's first token
    counts = bounds[1] - lo + 1  # (R,) 1 + document starts inside
    heads = _arange(len(starts)) * length  # (R,) where each row starts in the flattened batch
    s = int(counts.sum())
    if s == len(starts):  # no document starts inside any window: one segment per row
        return heads, _arange(len(starts)), counts
    row = _arange(len(starts)).repeat(counts)  # (S,)
    first = counts.cumsum() - counts  # (R,) index of each row's first segment
    # Segment i of row r, the row's j-th (j = i - first[r] > 0), starts with document lo[r] + j - 1.
    doc = _arange(s) - (first - lo + 1)[row]  # (S,); a row's first segment gets lo[r] - 1 (overwritten below)
    flat = doc_starts[np.maximum(doc, 0)] + (heads - starts)[row]  # (S,) document starts moved into their rows
    flat[first] = heads  # the window's first token starts a segment
    return flat, row, counts


class DocumentLayout:
    """The document metadata of K batches (``batch_size`` rows of ``length`` tokens each), computed together.

    Made from the batches' segments (`window_segments`, or a packed dataset's) in a fixed number of numpy
    calls for all K batches: the segment lengths, each batch's longest segment, and on the first read of one,
    every batch's ``cu_seqlens`` and ``doc_lens`` end to end (`cu_seqlens`, `doc_lens`). `batches` then makes
    `DocumentBatch` es from the tokens of a few of them (a `_Chunk`), which make their ``position_ids`` on first
    read (`positions`: the only per-token work, a repeat and a subtraction against one batch's ``arange``, for
    the chunk's batches together) and take ``cu_seqlens``/``doc_lens`` as views of the layout's. Splitting the
    two keeps numpy's per-call costs off each batch while the token arrays stay small (in cache).

    Args:
        segments: ``(flat, row, counts)``: (S,) sorted segment starts in the flattened (K*B*T,) batches, every
            row with one at its first token; (S,) the row of each; (K*B,) segments per row.
        length: tokens per row (``T``).
        batch_size: rows per batch (``B``).
        max_documents: pad every batch's ``cu_seqlens`` to ``max_documents + 1`` entries and ``doc_lens`` to
            (B, max_documents); `batches` raises at a batch with more segments.
    """

    def __init__(
        self,
        segments: tuple[np.ndarray, np.ndarray, np.ndarray],
        *,
        length: int,
        batch_size: int,
        max_documents: int | None = None,
    ) -> None:
        flat, row, counts = segments
        t, b = length, batch_size
        k, bt, s = len(counts) // b, b * t, len(flat)
        self.t, self.b, self.max_documents = t, b, max_documents
        self.lens = np.empty(s, dtype=np.int64)  # (S,) segment lengths: the next start minus this one
        np.subtract(flat[1:], flat[:-1], out=self.lens[:-1])
        self.lens[-1] = k * bt - flat[-1]
        per_row = counts.reshape(k, b)
        per_batch = per_row.sum(axis=1)  # (K,) segments per batch
        self.first = np.zeros(k + 1, dtype=np.int64)  # (K+1,) each batch's first segment, then S
        per_batch.cumsum(out=self.first[1:])
        batch = row // b  # (S,) the batch of each segment
        self.local = (flat - batch * bt).astype(np.int32)  # (S,) segment starts in their batch's (B*T,) tokens
        self.too_many: tuple[int, int] | None = None  # (first batch over max_documents, its segments)
        if max_documents is not None and int(per_batch.max()) > max_documents:
            j = int(np.flatnonzero(per_batch > max_documents)[0])
            self.too_many = (j, int(per_batch[j]))
        self.longest = np.maximum.reduceat(self.lens, self.first[:-1]).tolist()  # (K,)
        self.first_list = self.first.tolist()
        # For cu_seqlens and doc_lens, made for every batch on the first read of one (`cu_seqlens`, `doc_lens`).
        self.row, self.batch, self.per_row = row, batch, per_row
        self.cu_views: tuple[torch.Tensor, ...] | None = None
        self.dl: tuple[np.ndarray, list[int], list[int]] | None = None  # doc_lens end to end, widths, offsets

    def cu_seqlens(self) -> tuple[torch.Tensor, ...]:
        """Every batch's ``cu_seqlens``: (S_j+1,) int32 views of one array, made on the first call."""
        if self.cu_views is None:
            b, s, per_batch, md = self.b, len(self.lens), np.diff(self.first), self.max_documents
            # Every batch's end to end: its segments' starts, then b*t (its end; repeated: padding).
            cu_len = per_batch + 1 if md is None else np.maximum(per_batch + 1, md + 1)
            cu = np.full(int(cu_len.sum()), b * self.t, dtype=np.int32)
            # Batch j's entries begin j places after its first segment's index (one end entry per batch before
            # it), or, padded, at j * (max_documents + 1).
            shift = self.batch if md is None else (np.cumsum(cu_len) - cu_len - self.first[:-1])[self.batch]
            cu[_arange(s) + shift] = self.local
            self.cu_views = torch.from_numpy(cu).split_with_sizes(cu_len.tolist())  # one call (~0.4 us a view)
        return self.cu_views

    def doc_lens(self) -> tuple[np.ndarray, list[int], list[int]]:
        """Every batch's ``doc_lens`` end to end, each (B, width) row-major, with the widths and where each batch's
        begins: made on the first call."""
        if self.dl is None:
            b, s, per_row, md = self.b, len(self.lens), self.per_row, self.max_documents
            # A row's segment lengths, then zeros.
            width = per_row.max(axis=1) if md is None else np.maximum(per_row.max(axis=1), md)
            gap = width.repeat(b) - per_row.ravel()  # (K*B,) zeros after each row's segments
            doc_lens = np.zeros(int(width.sum()) * b, dtype=np.int32)
            doc_lens[_arange(s) + (gap.cumsum() - gap)[self.row]] = self.lens
            self.dl = doc_lens, width.tolist(), [0, *(width * b).cumsum().tolist()]
        return self.dl

    def batches(self, inputs: torch.Tensor, targets: torch.Tensor, first: int) -> list[DocumentBatch]:
        """Batches ``first, first + 1, ...`` of the layout, given their (n*B, T) contiguous ``inputs`` and
        ``targets``; their other fields are made on first read (`_Chunk`)."""
        b, t = self.b, self.t
        n = inputs.shape[0] // b
        if self.too_many is not None and first <= self.too_many[0] < first + n:
            raise ValueError(
                f"a batch holds {self.too_many[1]} document pieces, more than max_documents={self.max_documents}; "
                f"raise max_documents (at most batch_size x max_length = {b * t} pieces fit in a batch) or leave it out"
            )
        chunk, longest = _Chunk(self, first, n), self.longest
        # Views of the two (n, B, T): one call each (~0.45 us a view; split's are ~0.75 us, from_numpy ~0.5 us).
        xs, ys = inputs.view(n, b, t).unbind(0), targets.view(n, b, t).unbind(0)
        return [_document_batch(xs[i], ys[i], longest[first + i], (chunk, i)) for i in range(n)]

    def positions(self, first: int, n: int) -> torch.Tensor:
        """``position_ids`` of batches ``first .. first + n - 1``: (n, B, T) int32."""
        b, t = self.b, self.t
        s0, s1 = self.first_list[first], self.first_list[first + n]
        # int32 positions: < T <= 2**31, half of int64's bytes; nn.Embedding, RoPE tables, HF and torchtitan take them.
        pos = self.local[s0:s1].repeat(self.lens[s0:s1])  # (n*B*T,) each token's segment start ...
        np.subtract(_arange(b * t, "int32"), pos.reshape(n, b * t), out=pos.reshape(n, b * t))  # ... its distance
        return torch.from_numpy(pos).view(n, b, t)


class _Chunk:
    """Batches ``first .. first + n - 1`` of a `DocumentLayout`, whose tokens were gathered together; their
    ``position_ids`` are made in one pass on the first read of any of them (`_PositionIds`)."""

    __slots__ = ("first", "layout", "n", "pos")

    def __init__(self, layout: DocumentLayout, first: int, n: int) -> None:
        self.layout, self.first, self.n = layout, first, n
        self.pos: tuple[torch.Tensor, ...] | None = None


class _PositionIds(_MadeOnRead):
    def __get__(self, batch: DocumentBatch | None, owner: type | None = None) -> Any:
        if batch is None:
            return self
        chunk, i = batch._made  # type: ignore[attr-defined]  # a slot
        if chunk.pos is None:  # the chunk's batches' positions, in one pass
            chunk.pos = chunk.layout.positions(chunk.first, chunk.n).unbind(0)  # (B, T) views
        value = batch.__dict__["position_ids"] = chunk.pos[i]
        return value


class _CuSeqlens(_MadeOnRead):
    def __get__(self, batch: DocumentBatch | None, owner: type | None = None) -> Any:
        if batch is None:
            return self
        chunk, i = batch._made  # type: ignore[attr-defined]  # a slot
        views = chunk.layout.cu_views or chunk.layout.cu_seqlens()
        value = batch.__dict__["cu_seqlens"] = views[chunk.first + i]
        return value


class _DocLens(_MadeOnRead):
    def __get__(self, batch: DocumentBatch | None, owner: type | None = None) -> Any:
        if batch is None:
            return self
        chunk, i = batch._made  # type: ignore[attr-defined]  # a slot
        layout, j = chunk.layout, chunk.first + i
        doc_lens, width, at = layout.dl or layout.doc_lens()
        value = batch.__dict__["doc_lens"] = torch.from_numpy(doc_lens[at[j] : at[j + 1]].reshape(layout.b, width[j]))
        return value


DocumentBatch.position_ids = _PositionIds()  # type: ignore[assignment]
DocumentBatch.cu_seqlens = _CuSeqlens()  # type: ignore[assignment]
DocumentBatch.doc_lens = _DocLens()  # type: ignore[assignment]


def document_batch(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    segments: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    max_documents: int | None = None,
) -> DocumentBatch:
    """A `DocumentBatch` of (B, T) ``inputs``/``targets`` whose segments are ``segments`` (see `DocumentLayout`)."""
    b, t = inputs.shape
    layout = DocumentLayout(segments, length=t, batch_size=b, max_documents=max_documents)
    return layout.batches(inputs, targets, 0)[0]
