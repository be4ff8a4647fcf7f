"""Windows of whole documents: `PackedWindows`, the loader's dataset when ``packing`` is asked for.

The plan (which pieces of which documents fill each window) is `tokembed.data.packing`'s; this module
reads it: a batch of windows is one vectorized gather of its pieces' tokens, laid out from each row's
first slot, padding after (``eot_token``, or 0 when the source records none). Targets are the next
tokens of the same document; a document's last token and the padding predict nothing (``IGNORE_INDEX``).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch

from tokembed.data.batch import IGNORE_INDEX, DocumentBatch, document_batches
from tokembed.data.packing import PackingPlan, check_packer, plan_packing
from tokembed.data.windows import SlidingWindowDataset
from tokembed.shards.reader import ShardSet

__all__ = ["PackedWindows"]


class PackedWindows(SlidingWindowDataset):
    """Whole documents packed into windows of ``max_length`` tokens (see `tokembed.data.packing`).

    ``SlidingWindowDataset(source, max_length=T, packing="best-fit")`` builds one; so does
    ``create_dataloader(..., packing="best-fit")``. Window ``k`` holds the pieces ``plan.window_first[k]
    ..`` of ``plan``; ``len()`` is the number of windows, and every token of the source is in exactly one.

    Args:
        source, split, verify, eot_token, tokenizer, text: as for `SlidingWindowDataset`.
        max_length: slots per window (``T``).
        packing: the packer, a name of `tokembed.data.packing.PACKERS` (``"best-fit"``: best-fit decreasing).

    Attributes:
        plan: the `PackingPlan`; ``plan.stats()`` gives the padding share.
        packing: the packer's name.
        pad_token: the id that fills the padding.
    """

    def __init__(
        self,
        source=None,
        *,
        max_length: int,
        packing: str = "best-fit",
        stride: int | None = None,
        within_documents: bool = False,
        **options,
    ) -> None:
        self.packing = check_packer(packing)
        if stride is not None or within_documents:
            raise ValueError(
                f"{'stride' if stride is not None else 'within_documents'} does not apply to packed windows "
                "(each window holds whole documents from its first slot); leave it out"
            )
        super().__init__(source, max_length=max_length, **options)

    def _plan_windows(self) -> None:
        self.plan: PackingPlan = plan_packing(
            self.document_starts(), self.n_tokens, max_length=self.max_length, packer=self.packing
        )
        self.n_windows = self.plan.n_windows
        self.dropped_tokens = 0
        self.n_documents = self.plan.n_documents
        self.pad_token = 0 if self.eot_token is None else int(self.eot_token)

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

    def _pieces_of(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The pieces of windows ``k`` (B,), in batch order: ``(piece index, row)``, (P,) each."""
        first, stop = self.plan.window_first[k], self.plan.window_first[k + 1]
        count = stop - first  # (B,)
        row = np.repeat(np.arange(len(k)), count)  # (P,)
        piece = np.repeat(first - (np.cumsum(count) - count), count) + np.arange(len(row))  # (P,)
        return piece, row

    def _read_spans(self, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tokens ``[start, start + length)`` of every span: ``(tokens, first)``, where span ``i`` is
        ``tokens[first[i] : first[i] + lengths[i]]`` (in the source's dtype; spans grouped by shard).

        One fancy index per shard the spans touch; a span that goes on into the next shard (a document
        that does) is read on its own.
        """
        views = self._views()
        seg = np.searchsorted(self._cum, starts, side="right") - 1  # (P,) the shard of each span's start
        local = starts - self._cum[seg]
        seg = np.where(local + lengths <= self._seg_len[seg], seg, -1)  # -1: crosses into the next shard
        order = np.argsort(seg, kind="stable")  # spans grouped by shard; the crossing ones first
        length = lengths[order]
        first = np.empty_like(lengths)
        first[order] = np.cumsum(length) - length
        cuts = np.flatnonzero(np.diff(seg[order])) + 1
        parts = []
        for group in np.split(order, cuts):
            i = int(seg[group[0]])
            if i < 0:
                shards = cast(ShardSet, self._shards)  # several segments: a shard folder
                parts += [shards.read(int(starts[j]), int(starts[j] + lengths[j])) for j in group.tolist()]
                continue
            n = lengths[group]
            at = np.repeat(local[group] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
            parts.append(self._flat(i, views)[at])
        return (np.concatenate(parts) if len(parts) > 1 else parts[0]), first

    def _gather(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets, _, _ = self._gather_packed(k, out)
        return inputs, targets

    def _gather_packed(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Inputs and targets (B, T) of windows ``k``, each row's fill (B,), and its pieces (P,).

        The pieces' tokens are read together (with the token after each piece whose document goes on);
        then each piece is two slice copies into its row: its tokens, and the same shifted by one as its
        targets. What is left is padding (``pad_token``, target -100), as is a document's last target.
        """
        p, t = self.plan, self.max_length
        piece, row = self._pieces_of(k)
        length = p.piece_len[piece].astype(np.int64)  # (P,)
        more = ~p.piece_last[piece]  # (P,) the document goes on after the piece: read its next token too
        tokens, first = self._read_spans(p.piece_start[piece], length + more)  # where each piece begins in tokens
        fill = np.bincount(row, weights=length, minlength=len(k)).astype(np.int64)  # (B,) filled slots per row
        x, y = out if out is not None else (np.empty((len(k), t), np.int64), np.empty((len(k), t), np.int64))
        x.fill(self.pad_token)
        y.fill(IGNORE_INDEX)
        xf, yf = x.reshape(-1), y.reshape(-1)  # (B*T,) views
        dst = row * t + (np.cumsum(length) - length - (np.cumsum(fill) - fill)[row])  # (P,) each piece's first slot
        for d, a, n, m in zip(dst.tolist(), first.tolist(), length.tolist(), more.tolist()):
            xf[d : d + n] = tokens[a : a + n]
            yf[d : d + n - 1 + m] = tokens[a + 1 : a + n + m]  # a document's last token keeps -100
        return torch.from_numpy(x), torch.from_numpy(y), fill, piece

    def _gather_rows(self, k: np.ndarray) -> torch.Tensor:
        raise ValueError(
            "packed windows are not rows of the stream (their targets mark document ends with -100); "
            "use output='pairs' or output='documents' with packing"
        )

    def _packed_segments(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Inputs, targets (B, T) of windows ``k`` and their segments ``(seg_row, seg_start)`` (S,): one per
        piece, and the padding of a row that has some as one more (see `tokembed.data.batch`)."""
        inputs, targets, fill, piece = self._gather_packed(k, out)
        t = self.max_length
        length = self.plan.piece_len[piece].astype(np.int64)
        row = np.repeat(np.arange(len(k)), np.diff(self.plan.window_first)[k])  # (P,)
        offset = np.cumsum(length) - length - (np.cumsum(fill) - fill)[row]  # (P,) each piece's first slot
        padded = np.flatnonzero(fill < t)  # rows with padding
        seg_row = np.concatenate([row, padded])
        seg_start = np.concatenate([offset, fill[padded]])
        order = np.argsort(seg_row * t + seg_start, kind="stable")
        return inputs, targets, seg_row[order], seg_start[order]

    def _document_batches(
        self,
        k: np.ndarray,
        *,
        batch_size: int,
        max_documents: int | None = None,
        out: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> list[DocumentBatch]:
        inputs, targets, seg_row, seg_start = self._packed_segments(k, out)
        return document_batches(inputs, targets, seg_row, seg_start, batch_size=batch_size, max_documents=max_documents)
