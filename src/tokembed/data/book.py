"""The chapter's ``GPTDatasetV1`` and ``create_dataloader_v1``, as drop-ins: same batches, same order.

The book stores two tensors per window; these hold one token array and slice windows on demand
(`tokembed.data.windows`), and iterate in the book's order under the same ``torch.manual_seed``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, SequentialSampler

from tokembed._checks import check_positive_int
from tokembed.data.plan import window_count
from tokembed.data.windows import _WindowBatch, check_window_args, collate_windows, encode_text
from tokembed.tokenizer import TokenizerLike, get_tokenizer


class GPTDatasetV1(Dataset):
    """The book's ``GPTDatasetV1``: same signature, same windows, no tensor per window.

    Args:
        txt: the text; encoded with ``allowed_special={"<|endoftext|>"}``.
        tokenizer: e.g. ``tokembed.get_tokenizer("gpt2")`` or ``tiktoken.get_encoding("gpt2")``.
        max_length: tokens per window.
        stride: tokens between the starts of consecutive windows.

    ``dataset[k]`` is ``(inputs, targets)``, two int64 tensors of shape (max_length,).
    """

    def __init__(self, txt: str, tokenizer: TokenizerLike, max_length: int, stride: int) -> None:
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
        return _WindowBatch(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())  # contiguous, as the book's stacks


def create_dataloader_v1(
    txt: str,
    batch_size: int = 4,
    max_length: int = 256,
    stride: int = 128,
    shuffle: bool = True,
    drop_last: bool = True,
    num_workers: int = 0,
    *,
    tokenizer: TokenizerLike = "gpt2",
) -> DataLoader:
    """The book's ``create_dataloader_v1``: the same batches in the same order under the same seed.

    Returns a ``torch.utils.data.DataLoader`` over :class:`GPTDatasetV1` with GPT-2's tokenizer
    (offline; or ``tokenizer``, any name or object `tokembed.get_tokenizer` takes); it yields
    ``[inputs, targets]``, two int64 tensors of shape (batch_size, max_length).
    """
    check_positive_int("batch_size", batch_size)
    tokenizer = get_tokenizer(tokenizer)
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    if drop_last and len(dataset) < batch_size:
        raise ValueError(
            f"the text gives {len(dataset)} windows, fewer than batch_size={batch_size}, and drop_last=True "
            "drops that one incomplete batch, leaving nothing; use a smaller batch_size or drop_last=False"
        )
    return _BookOrderDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        collate_fn=collate_windows,
    )


_CHUNK_BYTES = 1 << 18  # tokens gathered per step in the drop-in's fast path: 256 KiB of int64


class _BookOrderDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` whose single-process iteration gathers many batches per step.

    The book's loader makes 2 x batch_size tensors, then stacks them, for every batch. Here, with
    ``num_workers=0``, the epoch's order is drawn exactly as torch draws it and whole chunks of
    batches are gathered with one fancy index; each batch is a contiguous slice of a chunk. The
    global RNG is consumed as torch's iterator consumes it: one int64 when the iterator is created
    (``_base_seed``), and, when shuffling, one more on the first batch (``RandomSampler``'s seed for
    its ``randperm``). With workers, or a sampler this does not know, torch's own iterator runs.
    """

    def _fast_path(self) -> GPTDatasetV1 | None:
        """The dataset when the fast path reproduces torch's iteration exactly, else None."""
        s, ds = self.sampler, self.dataset
        if self.num_workers != 0 or not isinstance(ds, GPTDatasetV1) or self.batch_size is None:
            return None
        if type(s) is SequentialSampler:
            return ds
        exact = type(s) is RandomSampler and s.generator is None and not s.replacement and s.num_samples == len(ds)
        return ds if exact else None

    def __iter__(self):
        ds = self._fast_path()
        if ds is None or self.batch_size is None:
            return super().__iter__()
        # torch's _BaseDataLoaderIter.__init__ draws its _base_seed here, even without workers.
        torch.empty((), dtype=torch.int64).random_(generator=self.generator).item()
        return self._chunks(ds, self.batch_size)

    def _chunks(self, ds: GPTDatasetV1, b: int):
        n = len(ds)
        if isinstance(self.sampler, RandomSampler):
            # RandomSampler.__iter__, run on the first batch: a seed from the global RNG, then randperm.
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            g = torch.Generator()
            g.manual_seed(seed)
            order = torch.randperm(n, generator=g).numpy()  # (n,)
        else:
            order = np.arange(n)
        n_batches = n // b if self.drop_last else -(-n // b)
        used = min(n, n_batches * b)
        per_chunk = max(1, _CHUNK_BYTES // (16 * b * ds.max_length)) * b  # windows per gather
        for lo in range(0, used, per_chunk):
            rows = ds.token_ids[order[lo : min(used, lo + per_chunk), None] * ds.stride + ds._offsets]  # (m, T+1)
            inputs = torch.from_numpy(rows[:, :-1].astype(np.int64))  # (m, T)
            targets = torch.from_numpy(rows[:, 1:].astype(np.int64))  # (m, T)
            yield from map(list, zip(inputs.split(b), targets.split(b)))  # [(B,T), (B,T)] per batch
