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

Everything is computed for a whole batch in a few numpy calls (`segment_layout`); nothing loops over
windows in Python.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["IGNORE_INDEX", "DocumentBatch", "document_batch", "document_batches", "window_segments"]

IGNORE_INDEX = -100  # a target nothing is predicted for (padding, a packed document's last token): torch's default


@dataclass(frozen=True)
class DocumentBatch:
    """One batch and where its documents begin and end (see the module's notes).

    Attributes:
        inputs: (B, T) int64 token ids.
        targets: (B, T) int64, the inputs shifted by one; ``IGNORE_INDEX`` (-100) where nothing is
            predicted (packing: padding, and each document's last token).
        position_ids: (B, T) int64, 0 at each row's first token and at each document start.
        cu_seqlens: (S+1,) int32 segment starts in the flattened (B*T,) batch, then B*T (padded to a
            fixed length by repeating B*T when the loader was given ``max_documents``).
        max_seqlen: the longest segment, in tokens.
        doc_lens: (B, D) int32, each row's segment lengths, zero-padded (D = ``max_documents`` if given).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    doc_lens: torch.Tensor

    def document_ids(self) -> torch.Tensor:
        """Which segment each token belongs to, counting from 0 in each row: (B, T) int64."""
        return (self.position_ids == 0).long().cumsum(dim=1) - 1

    def _map(self, fn) -> DocumentBatch:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return DocumentBatch(**{k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in fields.items()})

    def to(self, device: Any, *, non_blocking: bool = False) -> DocumentBatch:
        """Every tensor moved to ``device``."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> DocumentBatch:
        """Every tensor in page-locked memory (DataLoader's ``pin_memory=True`` calls this)."""
        return self._map(lambda t: t.pin_memory())

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


@functools.lru_cache(maxsize=4)
def _arange(n: int) -> np.ndarray:
    a = np.arange(n)
    a.flags.writeable = False
    return a


def window_segments(starts: np.ndarray, doc_starts: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The segments of windows of ``length`` tokens starting at ``starts`` in a stream with documents starting
    at ``doc_starts``.

    Args:
        starts: (B,) int64 global offsets of the windows' first tokens.
        doc_starts: (D,) int64 sorted global offsets of every document start.
        length: tokens per window (``T``).

    Returns:
        ``(seg_row, seg_start)``, (S,) each: the row of each segment and its first token within the row,
        sorted by row then start; every row's first segment starts at 0.
    """
    lo = np.searchsorted(doc_starts, starts, side="right")  # (B,) first document start after the window's
    hi = np.searchsorted(doc_starts, starts + length, side="left")  # (B,) first one past the window
    counts = hi - lo + 1  # (B,) segments per row: the first, then one per document start inside
    seg_row = np.repeat(np.arange(len(starts)), counts)  # (S,)
    first = np.cumsum(counts) - counts  # (B,) index of each row's first segment
    j = np.arange(len(seg_row)) - first[seg_row]  # (S,) 0 for a row's first segment, then 1, 2, ...
    inner = doc_starts[np.minimum(lo[seg_row] + j - 1, max(len(doc_starts) - 1, 0))] if len(doc_starts) else 0
    seg_start = np.where(j > 0, inner - starts[seg_row], 0)
    return seg_row, seg_start


def document_batches(
    inputs: torch.Tensor | np.ndarray,
    targets: torch.Tensor | np.ndarray,
    seg_row: np.ndarray,
    seg_start: np.ndarray,
    *,
    batch_size: int,
    max_documents: int | None = None,
) -> list[DocumentBatch]:
    """Batches of ``batch_size`` rows of (K*B, T) ``inputs``/``targets`` whose segments start at
    ``(seg_row, seg_start)`` (S,) (sorted by row, then start; every row has one starting at 0).

    The layout of all K batches is computed together (a few numpy calls for the chunk); each batch then
    takes its slices.

    Raises:
        ValueError: a batch holds more segments than ``max_documents``.
    """
    rows, t = inputs.shape
    k, b = rows // batch_size, batch_size
    flat = seg_row * t + seg_start  # (S,) segment starts in the flattened chunk
    lens = np.empty_like(flat)  # (S,)
    np.subtract(flat[1:], flat[:-1], out=lens[:-1])
    lens[-1] = rows * t - flat[-1]
    position_ids = np.repeat(flat, lens)  # (K*B*T,) each token's segment start ...
    np.subtract(_arange(rows * t), position_ids, out=position_ids)  # ... and its distance from it
    counts = np.bincount(seg_row, minlength=rows)  # (K*B,) segments per row
    col = np.arange(len(seg_row)) - (np.cumsum(counts) - counts)[seg_row]  # (S,) the segment's place in its row
    per_batch = counts.reshape(k, b)
    width = per_batch.max(axis=1) if max_documents is None else np.full(k, max_documents)  # (K,)
    bounds = np.zeros(k + 1, dtype=np.int64)  # (K+1,) each batch's segments
    np.cumsum(per_batch.sum(axis=1), out=bounds[1:])
    if max_documents is not None and (np.diff(bounds) > max_documents).any():
        n = int(np.diff(bounds).max())
        raise ValueError(
            f"a batch holds {n} document pieces, more than max_documents={max_documents}; raise max_documents "
            f"(at most batch_size x max_length = {b * t} pieces fit in a batch) or leave it out"
        )
    doc_lens = np.zeros((rows, int(width.max())), dtype=np.int32)
    doc_lens[seg_row, col] = lens
    longest = np.maximum.reduceat(lens, bounds[:-1])  # (K,)
    pos = position_ids.reshape(rows, t)
    inputs, targets = (a.numpy() if isinstance(a, torch.Tensor) else a for a in (inputs, targets))
    out = []
    for j in range(k):
        n = int(bounds[j + 1] - bounds[j])
        cu = np.empty(n + 1 if max_documents is None else max_documents + 1, dtype=np.int32)
        np.subtract(flat[bounds[j] : bounds[j + 1]], j * b * t, out=cu[:n], casting="unsafe")
        cu[n:] = b * t  # the end, then padding: zero-length sequences
        r = slice(j * b, (j + 1) * b)
        out.append(
            DocumentBatch(
                inputs=torch.from_numpy(inputs[r]),  # numpy slices: a torch index costs ~10x more
                targets=torch.from_numpy(targets[r]),
                position_ids=torch.from_numpy(pos[r]),
                cu_seqlens=torch.from_numpy(cu),
                max_seqlen=int(longest[j]),
                doc_lens=torch.from_numpy(doc_lens[r, : int(width[j])]),
            )
        )
    return out


def document_batch(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    seg_row: np.ndarray,
    seg_start: np.ndarray,
    *,
    max_documents: int | None = None,
) -> DocumentBatch:
    """A `DocumentBatch` of (B, T) ``inputs``/``targets`` whose segments start at ``(seg_row, seg_start)``."""
    return document_batches(
        inputs, targets, seg_row, seg_start, batch_size=inputs.shape[0], max_documents=max_documents
    )[0]
