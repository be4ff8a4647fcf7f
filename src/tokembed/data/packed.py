"""Windows of whole documents: `PackedWindows`, the loader's dataset when ``packing`` is asked for.

The plan (which pieces of which documents fill each window) is `tokembed.data.packing`'s; this module
reads it: a batch of windows is one vectorized gather of its pieces' tokens, laid out from each row's
first slot, padding after (``eot_token``, or 0 when the source records none). Targets are the next
tokens of the same document; a document's last token and the padding predict nothing (``IGNORE_INDEX``).
"""

from __future__ import annotations

import numpy as np
import torch

from tokembed.data.batch import IGNORE_INDEX, DocumentBatch, document_batch
from tokembed.data.packing import PackingPlan, check_packer, plan_packing
from tokembed.data.windows import SlidingWindowDataset

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

    def _read_spans(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Tokens ``[start, start + length)`` of every span, end to end: (sum(lengths),) in the source's dtype."""
        views = self._views()
        if len(self._cum) == 2:  # one segment: a single fancy index
            flat = self._flat(0, views)
            offset = np.cumsum(lengths) - lengths
            return flat[np.repeat(starts - offset, lengths) + np.arange(int(lengths.sum()))]
        seg = np.searchsorted(self._cum, starts, side="right") - 1
        local = starts - self._cum[seg]
        inside = local + lengths <= self._seg_len[seg]
        flat = views.get("flat")
        if flat is None:
            flat = views["flat"] = [self._flat(i, views) for i in range(len(self._seg_len))]
        return np.concatenate(
            [
                flat[i][j : j + n] if ok else self._shards.read(a, a + n)  # a document that goes on into the next shard
                for i, j, n, ok, a in zip(
                    seg.tolist(), local.tolist(), lengths.tolist(), inside.tolist(), starts.tolist()
                )
            ]
        )

    def _gather(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets, _, _ = self._gather_packed(k, out)
        return inputs, targets

    def _gather_packed(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Inputs and targets (B, T) of windows ``k``, each row's fill (B,), and its pieces (P,)."""
        p = self.plan
        t = self.max_length
        piece, row = self._pieces_of(k)
        length = p.piece_len[piece].astype(np.int64)  # (P,)
        more = ~p.piece_last[piece]  # (P,) the document goes on after the piece: read its next token too
        tokens = self._read_spans(p.piece_start[piece], length + more)  # (sum(length + more),)
        first = np.cumsum(length + more) - (length + more)  # (P,) where each piece's tokens begin in `tokens`
        at = np.repeat(first - (np.cumsum(length) - length), length) + np.arange(int(length.sum()))  # inputs' places
        nxt = tokens[np.minimum(at + 1, len(tokens) - 1)].astype(np.int64)  # the next token of each input
        nxt[(np.cumsum(length) - 1)[~more]] = IGNORE_INDEX  # a document's last token predicts nothing
        fill = np.bincount(row, weights=length, minlength=len(k)).astype(np.int64)  # (B,) filled slots per row
        shape = (len(k), t)
        x, y = out if out is not None else (np.empty(shape, np.int64), np.empty(shape, np.int64))
        filled = np.arange(t) < fill[:, None]  # (B,T): each row's pieces from its first slot on
        x.fill(self.pad_token)
        y.fill(IGNORE_INDEX)
        x[filled] = tokens[at]
        y[filled] = nxt
        return torch.from_numpy(x), torch.from_numpy(y), fill, piece

    def _gather_rows(self, k: np.ndarray) -> torch.Tensor:
        raise ValueError(
            "packed windows are not rows of the stream (their targets mark document ends with -100); "
            "use output='pairs' or output='documents' with packing"
        )

    def _packed_segments(self, k: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]:
        """Inputs, targets (B, T) of windows ``k`` and their segments ``(seg_row, seg_start)`` (S,): one per
        piece, and the padding of a row that has some as one more (see `tokembed.data.batch`)."""
        inputs, targets, fill, piece = self._gather_packed(k, None)
        t = self.max_length
        length = self.plan.piece_len[piece].astype(np.int64)
        row = np.repeat(np.arange(len(k)), np.diff(self.plan.window_first)[k])  # (P,)
        offset = np.cumsum(length) - length - (np.cumsum(fill) - fill)[row]  # (P,) each piece's first slot
        padded = np.flatnonzero(fill < t)  # rows with padding
        seg_row = np.concatenate([row, padded])
        seg_start = np.concatenate([offset, fill[padded]])
        order = np.argsort(seg_row * t + seg_start, kind="stable")
        return inputs, targets, seg_row[order], seg_start[order]

    def _gather_documents(self, k: np.ndarray, *, max_documents: int | None = None) -> DocumentBatch:
        inputs, targets, seg_row, seg_start = self._packed_segments(k)
        return document_batch(inputs, targets, seg_row, seg_start, max_documents=max_documents)
