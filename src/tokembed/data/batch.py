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
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["IGNORE_INDEX", "DocumentBatch", "segment_layout", "window_segments"]

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


def segment_layout(
    seg_row: np.ndarray, seg_start: np.ndarray, *, batch: int, length: int, max_documents: int | None = None
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """``(position_ids, cu_seqlens, max_seqlen, doc_lens)`` of a batch from its segments' starts.

    Args:
        seg_row, seg_start: (S,) each, as `window_segments` returns them (sorted; each row starts one at 0).
        batch, length: the batch's shape (B, T).
        max_documents: pad ``cu_seqlens`` to ``max_documents + 1`` entries and ``doc_lens`` to
            (B, max_documents); None: exactly S + 1 and (B, the most segments in a row).

    Returns:
        position_ids (B, T) int64, cu_seqlens int32, max_seqlen, doc_lens (B, D) int32.

    Raises:
        ValueError: the batch has more segments than ``max_documents``.
    """
    n = len(seg_row)
    if max_documents is not None and n > max_documents:
        raise ValueError(
            f"a batch holds {n} document pieces, more than max_documents={max_documents}; raise max_documents "
            f"(at most batch_size x max_length = {batch * length} pieces fit in a batch) or leave it out"
        )
    size = n + 1 if max_documents is None else max_documents + 1
    cu = np.full(size, batch * length, dtype=np.int32)  # padding: zero-length sequences at the end
    cu[:n] = seg_row * length + seg_start
    lens = np.diff(cu[: n + 1])  # (S,)
    marks = np.zeros((batch, length), dtype=np.int64)
    marks[seg_row, seg_start] = seg_start
    np.maximum.accumulate(marks, axis=1, out=marks)  # (B,T): the start of each token's segment
    position_ids = np.arange(length) - marks  # (B,T)
    counts = np.bincount(seg_row, minlength=batch)  # (B,)
    col = np.arange(n) - (np.cumsum(counts) - counts)[seg_row]  # (S,) the segment's place in its row
    doc_lens = np.zeros((batch, int(counts.max()) if max_documents is None else max_documents), dtype=np.int32)
    doc_lens[seg_row, col] = lens
    return position_ids, cu, int(lens.max()), doc_lens


def document_batch(
    inputs: torch.Tensor,
    targets: torch.Tensor,
    seg_row: np.ndarray,
    seg_start: np.ndarray,
    *,
    max_documents: int | None = None,
) -> DocumentBatch:
    """A `DocumentBatch` of (B, T) ``inputs``/``targets`` whose segments start at ``(seg_row, seg_start)``."""
    b, t = inputs.shape
    pos, cu, longest, lens = segment_layout(seg_row, seg_start, batch=b, length=t, max_documents=max_documents)
    return DocumentBatch(
        inputs=inputs,
        targets=targets,
        position_ids=torch.from_numpy(pos),
        cu_seqlens=torch.from_numpy(cu),
        max_seqlen=longest,
        doc_lens=torch.from_numpy(lens),
    )
