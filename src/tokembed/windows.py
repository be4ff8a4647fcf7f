"""Sliding windows over a token stream: the chapter's dataset, computed instead of stored.

Window ``k`` starts at ``i = k * stride`` for ``i`` in ``range(0, N - max_length, stride)``:
inputs are ``ids[i : i + max_length]`` and targets ``ids[i + 1 : i + max_length + 1]``, the
inputs shifted by one. The book's ``GPTDatasetV1`` stores two tensors per window (~700 bytes of
Python objects each); here one token array is held and windows are sliced on demand.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from tokembed._checks import check_positive_int
from tokembed.tokenizer import ENDOFTEXT, get_tokenizer

__all__ = ["GPTDatasetV1", "create_dataloader_v1", "encode_text", "window_count"]


def window_count(n_tokens: int, max_length: int, stride: int) -> int:
    """The number of windows the chapter takes: ``len(range(0, n_tokens - max_length, stride))``."""
    return max(0, -(-(n_tokens - max_length) // stride))


def token_dtype(n_vocab: int) -> np.dtype:
    """The smallest unsigned dtype for ids below ``n_vocab``: uint16 is enough for GPT-2 (max id 50256 < 2**16)."""
    return np.dtype(np.uint16 if n_vocab <= 2**16 else np.uint32)


def encode_text(txt: str, tokenizer=None) -> np.ndarray:
    """Encode ``txt`` as the chapter does (``allowed_special={"<|endoftext|>"}``) into a compact array.

    Args:
        txt: the text.
        tokenizer: anything with tiktoken's ``encode(text, allowed_special=...)``; default GPT-2's.

    Returns:
        (N,) uint16 token ids (uint32 for vocabularies over 65,536).
    """
    if not isinstance(txt, str):
        hint = "; decode it first, e.g. data.decode('utf-8')" if isinstance(txt, (bytes, bytearray)) else ""
        raise TypeError(f"txt must be a str, got {type(txt).__name__}{hint}")
    if not txt:
        raise ValueError("txt is empty: give a text of at least max_length + 1 tokens")
    enc = get_tokenizer("gpt2") if tokenizer is None else tokenizer
    ids = enc.encode(txt, allowed_special={ENDOFTEXT})
    n_vocab = getattr(enc, "n_vocab", None) or (max(ids) + 1 if ids else 1)
    return np.asarray(ids, dtype=token_dtype(n_vocab))


def check_window_args(n_tokens: int, max_length: int, stride: int) -> None:
    """Raise unless ``n_tokens`` tokens give at least one window of ``max_length``."""
    check_positive_int("max_length", max_length)
    check_positive_int("stride", stride)
    if n_tokens < max_length + 1:
        raise ValueError(
            f"the text has {n_tokens} tokens, but one window of max_length={max_length} needs at least "
            f"{max_length + 1} (the inputs plus the target shifted by one); use a longer text or a smaller max_length"
        )


class _WindowBatch(list):
    """The windows of one batch, gathered in one step: ``inputs`` and ``targets`` are (B, T).

    It behaves as the list of ``(input, target)`` pairs that ``DataLoader``'s default collate
    expects, so the dataset also works with any collate function; ``create_dataloader_v1``
    takes the two tensors directly.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        super().__init__()
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def __getitem__(self, k):
        return self.inputs[k], self.targets[k]

    def __iter__(self):
        return zip(self.inputs, self.targets)


def _collate_windows(batch):
    if isinstance(batch, _WindowBatch):
        return [batch.inputs, batch.targets]
    return torch.utils.data.default_collate(batch)


class GPTDatasetV1(Dataset):
    """The book's ``GPTDatasetV1``: same signature, same windows, no tensor per window.

    Args:
        txt: the text; encoded with ``allowed_special={"<|endoftext|>"}``.
        tokenizer: e.g. ``tokembed.get_tokenizer("gpt2")`` or ``tiktoken.get_encoding("gpt2")``.
        max_length: tokens per window.
        stride: tokens between the starts of consecutive windows.

    ``dataset[k]`` is ``(inputs, targets)``, two int64 tensors of shape (max_length,).
    """

    def __init__(self, txt: str, tokenizer, max_length: int, stride: int) -> None:
        check_positive_int("max_length", max_length)
        check_positive_int("stride", stride)
        self.token_ids = encode_text(txt, tokenizer)  # (N,)
        check_window_args(len(self.token_ids), max_length, stride)
        self.max_length, self.stride = max_length, stride
        self._offsets = np.arange(max_length + 1)  # one window plus its shifted target

    def __len__(self) -> int:
        return window_count(len(self.token_ids), self.max_length, self.stride)

    def _rows(self, starts: np.ndarray) -> torch.Tensor:
        rows = self.token_ids[starts[:, None] + self._offsets]  # (B, T+1)
        return torch.from_numpy(rows.astype(np.int64))

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"window {k} is out of range: this dataset has {n} windows")
        start = (k % n) * self.stride
        w = torch.from_numpy(self.token_ids[start : start + self.max_length + 1].astype(np.int64))
        return w[:-1], w[1:]

    def __getitems__(self, ks: Sequence[int]) -> _WindowBatch:
        # The DataLoader hands a whole batch of indices at once: gather it with one fancy index.
        idx = np.asarray(ks, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = idx[(idx < -n) | (idx >= n)][0]
            raise IndexError(f"window {bad} is out of range: this dataset has {n} windows")
        rows = self._rows((idx % n) * self.stride)  # (B, T+1)
        return _WindowBatch(rows[:, :-1], rows[:, 1:])


def create_dataloader_v1(
    txt: str,
    batch_size: int = 4,
    max_length: int = 256,
    stride: int = 128,
    shuffle: bool = True,
    drop_last: bool = True,
    num_workers: int = 0,
) -> DataLoader:
    """The book's ``create_dataloader_v1``: the same batches in the same order under the same seed.

    Returns a ``torch.utils.data.DataLoader`` over :class:`GPTDatasetV1` with GPT-2's tokenizer
    (offline); it yields ``[inputs, targets]``, two int64 tensors of shape (batch_size, max_length).
    """
    check_positive_int("batch_size", batch_size)
    tokenizer = get_tokenizer("gpt2")
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    if drop_last and len(dataset) < batch_size:
        raise ValueError(
            f"the text gives {len(dataset)} windows, fewer than batch_size={batch_size}, and drop_last=True "
            "drops that one incomplete batch, leaving nothing; use a smaller batch_size or drop_last=False"
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        collate_fn=_collate_windows,
    )
