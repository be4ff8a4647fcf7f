"""Sliding windows over a token stream: the chapter's dataset, computed instead of stored.

Window ``k`` starts at ``i = k * stride`` for ``i`` in ``range(0, N - max_length, stride)``:
inputs are ``ids[i : i + max_length]`` and targets ``ids[i + 1 : i + max_length + 1]``, the
inputs shifted by one. The book's ``GPTDatasetV1`` stores two tensors per window (~700 bytes of
Python objects each); here one token array is held and windows are sliced on demand.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias, TypeGuard, cast

import numpy as np
import torch
from torch.utils.data import Dataset

from tokembed._checks import check_bool, check_positive_int
from tokembed.data.batch import DocumentBatch, DocumentLayout, window_segments
from tokembed.data.plan import window_count
from tokembed.shards import format as shard_format
from tokembed.shards import reader as shard_reader
from tokembed.shards.megatron import is_megatron_prefix
from tokembed.storage.urls import is_url
from tokembed.tokenizer import ENDOFTEXT, TokenizerLike, get_tokenizer
from tokembed.tokenizer.gpt2 import GPT2_EOT


class NamesItsWindows(Protocol):
    """A source that says which dataset reads its windows (a `tokembed.Mixture`: `MixtureWindows`)."""

    def window_dataset_class(self) -> type: ...


# What windows are read from (SlidingWindowDataset's Args say how each is told apart): a shard folder or a
# Megatron prefix (a path, a str naming one, an open ShardSet), a Mixture of those, a 1-D token array (numpy,
# torch, a list, tuple or range of ids), or a text (any other str).
WindowSource: TypeAlias = (
    "str | os.PathLike[str] | shard_reader.ShardSet | NamesItsWindows | np.ndarray | torch.Tensor | Sequence[int]"
)

__all__ = ["SlidingWindowDataset", "check_window_args", "collate_windows", "encode_text"]


def encode_text(txt: str, tokenizer: TokenizerLike | None = None) -> np.ndarray:
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
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = get_tokenizer(tokenizer or "gpt2")
    enc: Any = tokenizer  # anything with tiktoken's encode (the book's own tokenizer objects too)
    if hasattr(enc, "encode_to_numpy") and getattr(enc, "n_vocab", None):
        # tiktoken >= 0.8 writes the ids straight into a buffer: no list of Python ints (28 bytes each).
        try:
            ids = enc.encode_to_numpy(txt, allowed_special={ENDOFTEXT})  # (N,) uint32
        except UnicodeEncodeError:  # lone surrogates: encode takes them as U+FFFD, as the chapter's code does
            ids = np.asarray(enc.encode(txt, allowed_special={ENDOFTEXT}), dtype=np.uint32)
        dtype = shard_format.dtype_for_vocab(enc.n_vocab)
        return ids if ids.dtype == dtype else ids.astype(dtype)
    ids = enc.encode(txt, allowed_special={ENDOFTEXT})
    n_vocab = getattr(enc, "n_vocab", None) or (max(ids) + 1 if ids else 1)
    return np.asarray(ids, dtype=shard_format.dtype_for_vocab(n_vocab))


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


def _split_rows(rows: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T+1) rows in the source's dtype -> ``(inputs, targets)``, int64 (B, T) each, into ``out`` when given."""
    shape = (rows.shape[0], rows.shape[1] - 1)
    inputs, targets = out if out is not None else (np.empty(shape, np.int64), np.empty(shape, np.int64))
    np.copyto(inputs, rows[:, :-1])  # (B,T) int64, contiguous
    np.copyto(targets, rows[:, 1:])  # (B,T), the inputs shifted by one
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def collate_windows(batch):
    """The collate function for `SlidingWindowDataset` in any ``DataLoader``: ``[inputs, targets]``, (B, T) each.

    A DataLoader with automatic batching hands the dataset a whole batch of indices (``__getitems__``), which
    gathers them in one vectorized step; this returns its two tensors as they are instead of re-stacking B
    pairs (torch's default collate). Any other batch (a list of pairs) goes to the default collate.
    ``DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate_windows)``.
    """
    if isinstance(batch, _WindowBatch):
        return [batch.inputs, batch.targets]
    return torch.utils.data.default_collate(batch)


# ------------------------------------------------------------------------------------------ scalable windows

# GPT2_EOT (from the gpt2 definition): the document separator in token arrays without an index or tokenizer.


_BOUNDS_BYTES = 64 << 20  # the most a dataset's table of its windows' document bounds takes (`_window_bounds`)
_PATH_SUFFIXES = (".bin", ".idx", ".json", ".jsonl", ".txt", ".md", ".npy", ".gz")


def _names_shards(source: object) -> TypeGuard[str]:
    """A str naming an existing shard folder, a Megatron prefix or a URL (any other str is a text)."""
    if not isinstance(source, str) or len(source) >= 4096 or "\n" in source:
        return False
    return is_url(source) or os.path.isdir(source) or is_megatron_prefix(source)


def _refuse_path_like(source: str) -> None:
    """A str that names a file, or looks like a path (no whitespace; a separator or a file suffix) and names
    nothing, is a mistake far more often than a text to tokenize: say so instead of tokenizing the path."""
    if len(source) >= 4096 or any(c.isspace() for c in source):
        return
    if os.path.isfile(source):
        raise ValueError(
            f"{source!r} is a file, not a shard folder; give the folder `tokembed prepare --out` wrote, "
            f"or text=Path({source!r}).read_text() to read windows from its text"
        )
    if "/" in source or os.sep in source or source.endswith(_PATH_SUFFIXES):
        raise ValueError(
            f"if you meant a shard folder, {source!r} does not exist (check the path; Path({source!r}) names a "
            f"folder explicitly); to read windows from this string itself, pass text={source!r}"
        )


def _refuse(kind: str, **options) -> None:
    """Options that do not apply to this kind of source are errors, never silently ignored."""
    given = [k for k, v in options.items() if v not in (None, False)]
    if given:
        raise ValueError(
            f"{', '.join(f'{k}={options[k]!r}' for k in given)} does not apply to {kind}; leave it out"
            + (" (split and verify are for shard folders)" if {"split", "verify"} & set(given) else "")
        )


def _token_array(source: WindowSource | None) -> np.ndarray:
    """A 1-D integer array of ids >= 0 that fit int64, from numpy, torch, a list, a tuple or a range."""
    if isinstance(source, torch.Tensor):
        source = source.detach().cpu().numpy()
    elif isinstance(source, (list, tuple, range)):
        source = np.asarray(source)
    if not isinstance(source, np.ndarray):
        raise TypeError(
            f"source must be a shard folder (a Path), a 1-D token array or a text (str), got {type(source).__name__}"
        )
    if source.ndim != 1:
        raise ValueError(f"a token array must be 1-D (N,), got shape {source.shape}; flatten it with .reshape(-1)")
    if source.dtype.kind not in "iu":
        raise TypeError(f"a token array must hold integers, got dtype {source.dtype}; convert with .astype(np.int64)")
    if source.size and source.dtype.kind == "i" and int(source.min()) < 0:
        raise ValueError(f"token ids must be >= 0, found {int(source.min())}")
    if source.size and source.dtype == np.uint64 and int(source.max()) > np.iinfo(np.int64).max:
        raise ValueError(
            f"token id {int(source.max())} does not fit int64 (the batches' dtype); token ids are < 2**63, "
            "so the array is not token ids (or it was read with the wrong dtype)"
        )
    return source


class SlidingWindowDataset(Dataset):
    """The chapter's sliding windows over a shard folder, a token array or a text, computed on demand.

    Window ``k`` reads ``max_length + 1`` tokens from ``start(k)``: the inputs are the first
    ``max_length``, the targets the last ``max_length`` (the inputs shifted by one). Nothing is stored
    per window: a window is two numbers of arithmetic, so memory stays O(1) per window.

    - Over the concatenated stream (default), ``start(k) = k * stride`` for ``k`` in
      ``range(len(range(0, n_tokens - max_length, stride)))``: exactly the book's windows, across
      shard boundaries.
    - With ``within_documents=True``, each document (its tokens and its ``<|endoftext|>``) gets the
      book's windows of its own and no window crosses a document boundary; documents shorter than
      ``max_length + 1`` give none. ``dropped_tokens`` counts what no window reads.

    Args:
        source: a shard folder (``pathlib.Path``, a ``str`` naming an existing folder or a URL, or a
            ``tokembed.shards.reader.ShardSet``), a Megatron dataset prefix (``out/prefix`` of
            ``out/prefix.bin``/``.idx``), a `tokembed.Mixture` of those, a 1-D integer token array
            (numpy, torch or a list), or a text (any other ``str``; encoded once with GPT-2's tokenizer
            as the chapter does). A ``str`` that names a file, or looks like a path (no whitespace; a
            separator or a file suffix) and names nothing, is refused: pass ``Path(...)`` for a folder,
            or ``text=`` for a text.
        max_length: tokens per window (``T``).
        stride: tokens between consecutive window starts; default ``max_length`` (no overlap).
        within_documents: keep every window inside one document. Documents come from the shards'
            index; in arrays and texts a document ends after each ``eot_token``.
        split: the split of a shard folder (``"train"`` or ``"val"``; default ``"train"``).
        verify: check the shards' sha256 sums when opening (reads the whole split once).
        eot_token: the separator id for arrays/texts with ``within_documents`` (default GPT-2's ``GPT2_EOT``,
            or the tokenizer's for a text).
        tokenizer: the tokenizer for a text source (default GPT-2's).
        text: a text to read windows from (instead of ``source``), whatever it looks like.
        storage_options, cache_dir, cache_bytes: for a remote shard folder (a URL: ``s3://bucket/prefix``,
            ``gs://``, ``az://``, ``hf://``, ``https://``): the storage library's options, the block cache's
            folder and bound (see `tokembed.storage.options`; defaults from the environment).

    Options that do not apply to the source (``split``/``verify`` for arrays and texts, ``eot_token``
    for shards, ``tokenizer`` for shards and arrays) are errors; booleans must be ``True``/``False``.

    ``dataset[k]`` is ``(inputs, targets)``, int64 tensors (T,). :meth:`gather` returns a whole batch,
    (B, T) and (B, T), in one vectorized step; ``tokembed.create_dataloader`` uses it.

    Raises:
        ValueError: ``max_length`` or ``stride`` below 1; a source too short for a single window;
            a shard folder that fails its manifest check (names the shard, points at ``tokembed check``).
        TypeError: a source of another type, or a non-integer array.
    """

    def __new__(cls, source: WindowSource | None = None, *args: Any, **kwargs: Any) -> SlidingWindowDataset:
        # A source that names its own windows (a tokembed.Mixture: MixtureWindows) gets them, so it is
        # accepted wherever a shard folder is.
        variant = getattr(source, "window_dataset_class", None)
        if cls is SlidingWindowDataset and variant is not None:
            cls = variant()
        return super().__new__(cls)

    def __init__(
        self,
        source: WindowSource | None = None,
        *,
        max_length: int,
        stride: int | None = None,
        within_documents: bool = False,
        split: str | None = None,
        verify: bool = False,
        eot_token: int | None = None,
        tokenizer: TokenizerLike | None = None,
        text: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike | None = None,
        cache_bytes: int | str | None = None,
    ) -> None:
        self.max_length = check_positive_int("max_length", max_length)
        self.stride = self.max_length if stride is None else check_positive_int("stride", stride)
        self.within_documents = check_bool("within_documents", within_documents)
        check_bool("verify", verify)
        self._shards: shard_reader.ShardSet | None = None  # paths only: maps are opened lazily in each process
        self._array: np.ndarray | None = None  # an in-memory (N,) token array
        self._fingerprint: str | None = None
        if (source is None) == (text is None):
            raise TypeError(
                "give the windows' source: a shard folder, a token array or a text (or text=...), exactly one"
            )
        if text is not None and not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        remote = {"storage_options": storage_options, "cache_dir": cache_dir, "cache_bytes": cache_bytes}
        self._open(source, text, split=split, verify=verify, eot_token=eot_token, tokenizer=tokenizer, remote=remote)
        self._plan_windows()

    # -- construction ------------------------------------------------------------------------------

    def _open(
        self,
        source: WindowSource | None,
        text: str | None,
        *,
        split: str | None,
        verify: bool,
        eot_token: int | None,
        tokenizer: TokenizerLike | None,
        remote: dict[str, Any],
    ) -> None:
        if text is None and (isinstance(source, (shard_reader.ShardSet, os.PathLike)) or _names_shards(source)):
            _refuse("a shard folder", eot_token=eot_token, tokenizer=tokenizer)
            self._open_shards(source, split=split, verify=verify, remote=remote)
            return
        _refuse("an array or a text (they are read from memory)", **remote)
        if text is None and isinstance(source, str):
            _refuse_path_like(source)
            text = source
        if text is not None:
            _refuse("a text", split=split, verify=verify)
            named = tokenizer is None or isinstance(tokenizer, (str, os.PathLike))
            enc: Any = get_tokenizer(tokenizer or "gpt2") if named else tokenizer
            arr = encode_text(text, enc)
            self.source_kind = "text"
            self.eot_token: int | None = (
                int(getattr(enc, "eot_token", GPT2_EOT)) if eot_token is None else int(eot_token)
            )
        else:
            _refuse("a token array", split=split, verify=verify, tokenizer=tokenizer)
            arr = _token_array(source)
            self.source_kind = "array"
            self.eot_token = GPT2_EOT if eot_token is None else int(eot_token)
        self._array = arr
        self.n_tokens = int(arr.shape[0])
        self.dtype = arr.dtype
        self._cum = np.array([0, self.n_tokens], dtype=np.int64)
        self._seg_len = np.diff(self._cum)
        self._doc_starts_fn = self._array_doc_starts

    def _open_shards(
        self,
        source: str | os.PathLike[str] | shard_reader.ShardSet,
        *,
        split: str | None,
        verify: bool,
        remote: dict[str, Any],
    ) -> None:
        if isinstance(source, shard_reader.ShardSet):
            if verify or (split is not None and split != source.split):
                raise ValueError(
                    f"split and verify apply when a folder is opened; this ShardSet is split {source.split!r} "
                    "already open: leave them out, or open it with open_shards(root, split=..., verify=True)"
                )
            ss = source
        else:
            where = source if is_url(source) else Path(source)  # Path() would fold a URL's "//"
            ss = shard_reader.open_shards(where, split="train" if split is None else split, verify=verify, **remote)
        self._shards = ss
        self.source_kind = "shards"
        self.n_tokens = ss.n_tokens
        self.dtype = ss.dtype
        self._cum = ss.cumulative.astype(np.int64)  # (n_shards+1,)
        self._seg_len = np.diff(self._cum)  # (n_shards,)
        self._doc_starts_fn = ss.doc_starts
        self.eot_token = ss.eot_token

    def _array_doc_starts(self) -> np.ndarray:
        # GPT-2 style: every document is its tokens followed by one <|endoftext|>.
        ends = np.flatnonzero(self._array == self.eot_token) + 1  # (n_eot,)
        starts = np.concatenate([[0], ends[ends < self.n_tokens]]).astype(np.int64)
        return starts if self.n_tokens else starts[:0]

    def _plan_windows(self) -> None:
        L, s, N = self.max_length, self.stride, self.n_tokens
        where = self._describe()
        if not self.within_documents:
            if N < L + 1:
                raise ValueError(
                    f"{where} has {N} tokens, but one window of max_length={L} needs at least {L + 1} "
                    f"(the inputs plus the target shifted by one); use a longer source or a smaller max_length"
                )
            self.n_windows = window_count(N, L, s)
            covered = (self.n_windows - 1) * s + L + 1 if s <= L + 1 else self.n_windows * (L + 1)
            self.dropped_tokens = N - covered
            self.n_documents = None
            return
        starts = np.asarray(self._doc_starts_fn(), dtype=np.int64)  # (D,)
        lengths = np.diff(np.append(starts, N))  # (D,)
        counts = np.maximum(0, -(-(lengths - L) // s))  # window_count per document
        if not counts.any():
            longest = int(lengths.max()) if lengths.size else 0
            raise ValueError(
                f"{where} has no document of at least {L + 1} tokens (the longest has {longest}), so within_documents=True "
                f"gives no window of max_length={L}; use a smaller max_length or within_documents=False"
            )
        keep = counts > 0
        # Only documents that give windows are kept: O(documents) memory, never O(windows).
        self._doc_start = starts[keep]  # (D',)
        self._doc_first = np.concatenate([[0], np.cumsum(counts[keep])]).astype(np.int64)  # (D'+1,)
        self.n_windows = int(self._doc_first[-1])
        c = counts[keep]
        covered = np.where(s <= L + 1, (c - 1) * s + L + 1, c * (L + 1))
        self.dropped_tokens = N - int(covered.sum())
        self.n_documents = int(starts.size)
        self.dropped_documents = int((~keep).sum())

    def _describe(self) -> str:
        if self._shards is not None:
            return self._shards.describe()
        return "the text" if self.source_kind == "text" else "the token array"

    # -- pickling: paths and arithmetic only -------------------------------------------------------

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_row_views", None)  # strided views of memory maps are rebuilt in each process
        state.pop("_doc_index", None)  # read again in each process
        state.pop("_bounds", None)
        state["_doc_starts_fn"] = None
        a = self._array
        if isinstance(a, np.memmap) and a.filename is not None and type(a.base).__name__ == "mmap":
            # A pickled np.memmap copies its whole content: send where it lives instead.
            state["_array"] = ("memmap", a.filename, a.dtype.str, int(a.offset), a.shape)
        return state

    def __setstate__(self, state: dict) -> None:
        a = state.get("_array")
        if isinstance(a, tuple) and a and a[0] == "memmap":
            _, filename, dtype, offset, shape = a
            state["_array"] = np.memmap(filename, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)
        self.__dict__.update(state)
        if self._shards is not None:
            self._doc_starts_fn = self._shards.doc_starts
        else:
            self._doc_starts_fn = self._array_doc_starts

    # -- windows -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.n_windows

    def __repr__(self) -> str:
        docs = ", within_documents=True" if self.within_documents else ""
        return (
            f"SlidingWindowDataset({self._describe()}, tokens={self.n_tokens}, windows={self.n_windows}, "
            f"max_length={self.max_length}, stride={self.stride}{docs})"
        )

    def _check_indices(self, idx: np.ndarray) -> np.ndarray:
        n = self.n_windows
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = idx[(idx < -n) | (idx >= n)][0]
            raise IndexError(f"window {bad} is out of range: this dataset has {n} windows")
        return idx % n if idx.size and idx.min() < 0 else idx

    def starts(self, indices) -> np.ndarray:
        """Global token offsets where windows ``indices`` start: int64 array of the same shape."""
        return self._starts(self._check_indices(np.asarray(indices, dtype=np.int64)))

    def _starts(self, k: np.ndarray) -> np.ndarray:
        if not self.within_documents:
            return k * self.stride
        d = np.searchsorted(self._doc_first, k, side="right") - 1  # the document of each window
        return self._doc_start[d] + (k - self._doc_first[d]) * self.stride

    def check_unchanged(self) -> None:
        """Raise `tokembed.shards.reader.ShardsChangedError` when the shards were prepared again since they were
        opened (the loader asks at every epoch: maps made before stay on the files they opened)."""
        if self._shards is not None:
            self._shards.check_unchanged()

    def _views(self) -> dict[int | str, Any]:
        """This process's row views, one per segment (key ``i``: an ndarray), and the segments as flat arrays
        (key ``"flat"``: a list), made on first use (so each worker opens its own maps)."""
        pid, views = self.__dict__.get("_row_views", (None, None))
        if pid != os.getpid():
            views = {}
            self._row_views = (os.getpid(), views)
        return views

    def _segment(self, i: int) -> np.ndarray:
        """Segment ``i``'s tokens: shard ``i``, or the in-memory array (the one segment)."""
        if self._shards is not None:
            return self._shards.tokens(i)
        if self._array is None:  # the constructor sets one of the two
            raise RuntimeError("this SlidingWindowDataset was not constructed (neither shards nor an array)")
        return self._array

    def _read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the whole source, across shard boundaries (a new array across them)."""
        return self._shards.read(start, stop) if self._shards is not None else self._segment(0)[start:stop]

    def _view(self, i: int, views: dict[int | str, Any]) -> np.ndarray:
        """Segment ``i`` (a shard, or the array) seen as rows: ``view[j]`` = tokens ``[j, j + T + 1)``."""
        v = views.get(i)
        if v is None:
            seg = self._segment(i)
            w = self.max_length + 1
            rows = max(0, len(seg) - w + 1)
            # A read-only strided view: a fancy row index on it gathers a whole batch in one call.
            v = np.lib.stride_tricks.as_strided(
                seg, shape=(rows, w), strides=(seg.strides[0], seg.strides[0]), writeable=False
            )
            views[i] = v
        return v

    def _flat(self, i: int, views: dict) -> np.ndarray:
        seg = self._segment(i)
        return seg.view(np.ndarray)  # the same memory, without np.memmap's per-slice bookkeeping

    def row_pieces(self, starts: np.ndarray) -> list[np.ndarray]:
        """Tokens ``[start, start + max_length + 1)`` of each start, one 1-D array each: views, but for
        the few windows that straddle shards. A mixture concatenates the pieces of several sources at once."""
        if self.streamed:
            return list(self.gather_rows(starts))
        views = self._views()
        w = self.max_length + 1
        seg = np.searchsorted(self._cum, starts, side="right") - 1  # (B,) the segment holding each start
        local = starts - self._cum[seg]
        inside = local + w <= self._seg_len[seg]
        flat = views.get("flat")
        if flat is None:
            flat = views["flat"] = [self._flat(i, views) for i in range(len(self._seg_len))]
        return [
            flat[i][j : j + w] if ok else self._read(a, a + w)
            for i, j, ok, a in zip(seg.tolist(), local.tolist(), inside.tolist(), starts.tolist())
        ]

    @property
    def streamed(self) -> bool:
        """Whether the tokens come from a remote folder, in blocks through the cache (`RemoteShardSet`)."""
        return bool(getattr(self._shards, "streamed", False))

    def block_reads(self, k: np.ndarray) -> list[tuple[Any, np.ndarray, list[str], np.ndarray, np.ndarray]]:
        """The blocks of remote folders that windows ``k`` read: per remote shard set, ``(set, window number,
        file keys, shard, block)`` (see `RemoteShardSet.block_reads`); empty for local data."""
        if not self.streamed:
            return []
        shards = cast(shard_reader.RemoteShardSet, self._shards)
        rows, keys, shard, block = shards.block_reads(self._starts(np.asarray(k, np.int64)), self.max_length + 1)
        return [(shards, rows, keys, shard, block)]

    def gather_rows(self, starts: np.ndarray) -> np.ndarray:
        """Tokens ``[start, start + max_length + 1)`` for each start: (B, T+1), in the source's dtype."""
        if self.streamed:  # a remote folder: the batch's blocks are pinned in the cache for the gather
            return cast(shard_reader.RemoteShardSet, self._shards).rows(starts, self.max_length + 1)
        views = self._views()
        if len(self._cum) == 2:  # one segment: a single fancy index
            return self._view(0, views)[starts]
        w = self.max_length + 1
        seg = np.searchsorted(self._cum, starts, side="right") - 1  # (B,) the shard holding each start
        local = starts - self._cum[seg]
        inside = local + w <= self._seg_len[seg]
        lo, hi = int(seg.min()), int(seg.max())
        if lo == hi and inside.all():
            return self._view(lo, views)[local]  # the whole batch in one shard
        if len(starts) <= 8 * min(len(self._seg_len), len(starts)):
            # Few windows per shard: one slice per window and a single concatenate beat a fancy index
            # per shard (slices of a plain ndarray view: slicing an np.memmap costs ~1 us more each).
            return np.concatenate(self.row_pieces(starts)).reshape(len(starts), w)
        # Sort the windows by shard, gather each shard's run with one fancy index into consecutive rows,
        # then put the rows back in the batch's order with one more (small: the source's dtype).
        key = np.where(inside, seg, -1)  # straddlers (-1) first: filled below
        order = np.argsort(key, kind="stable")
        key_s, local_s = key[order], local[order]
        cuts = [0, *(np.flatnonzero(key_s[1:] != key_s[:-1]) + 1).tolist(), len(key_s)]
        rows_s = np.empty((len(starts), w), dtype=self.dtype)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if key_s[a] >= 0:
                rows_s[a:b] = self._view(int(key_s[a]), views)[local_s[a:b]]
        out = np.empty_like(rows_s)
        out[order] = rows_s
        for j in np.flatnonzero(~inside):  # the few windows that straddle a shard boundary
            out[j] = self._read(int(starts[j]), int(starts[j]) + w)
        return out

    def gather(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole batch of windows in one vectorized step.

        Args:
            indices: (B,) window indices.

        Returns:
            ``(inputs, targets)``: int64 tensors (B, T), targets the inputs shifted by one token.
        """
        return self._gather(self._check_indices(np.asarray(indices, dtype=np.int64)))

    # The loader's gathers. Trusted indices (the loader's); a variant (a mixture) overrides the two hooks
    # `_window_starts` (where its windows start, in one coordinate) and `_rows` (their tokens).

    def _window_starts(self, k: np.ndarray) -> np.ndarray:
        return self._starts(k)

    def _rows(self, starts: np.ndarray) -> np.ndarray:
        return self.gather_rows(starts)

    def _gather(
        self, k: np.ndarray, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # One fancy row index, then two casts to int64, into ``out`` when given (the loader recycles
        # buffers nobody holds any more).
        return _split_rows(self._rows(self._window_starts(k)), out)

    # Why these windows cannot be read as rows of the stream (``output="rows"``), or None: the loader asks
    # before its first batch.
    rows_refusal: str | None = None

    def _gather_rows(self, k: np.ndarray) -> torch.Tensor:
        """Windows ``k`` as one int64 tensor (B, T+1): the inputs are ``[:, :-1]``, the targets ``[:, 1:]``."""
        if self.rows_refusal:
            raise ValueError(self.rows_refusal)
        return torch.from_numpy(self._rows(self._window_starts(k)).astype(np.int64))

    def _gather_documents(self, k: np.ndarray, *, max_documents: int | None = None) -> DocumentBatch:
        """Windows ``k`` (B,) with where their documents begin and end (`tokembed.data.batch`)."""
        return next(self._document_batches(k, batch_size=len(k), max_documents=max_documents))

    def _document_batches(
        self,
        k: np.ndarray,
        *,
        batch_size: int,
        chunk: int = 1,
        max_documents: int | None = None,
        buffers: Callable[[tuple[int, int]], tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> Iterator[DocumentBatch]:
        """Windows ``k`` (K*B,) as K `DocumentBatch` es of ``batch_size``: their layout computed together, their
        tokens gathered ``chunk`` batches at a time (into ``buffers(shape)`` when given: the loader's pool)."""
        starts = self._window_starts(k)  # (K*B,)
        segments = window_segments(starts, self.document_starts(), self.max_length, self._window_bounds(k))
        layout = DocumentLayout(segments, length=self.max_length, batch_size=batch_size, max_documents=max_documents)
        step = chunk * batch_size
        for i in range(0, len(starts), step):
            part = starts[i : i + step]
            out = None if buffers is None else buffers((len(part), self.max_length))
            inputs, targets = _split_rows(self._rows(part), out)
            yield from layout.batches(inputs, targets, i // batch_size)

    def _window_bounds(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Windows ``k``'s document bounds for `window_segments` (the first document start after each window's
        first token, the first at or after its end), read from a table of every window's made once per process;
        None (searched per batch) where the table would weigh more than 64 MiB or an eighth of the tokens."""
        pid, table = self.__dict__.get("_bounds", (None, None))
        if pid != os.getpid():
            n, d = len(self), self.document_starts()
            table = None
            if n * 8 <= min(_BOUNDS_BYTES, self.n_tokens * self.dtype.itemsize // 8) and len(d) < 2**31:
                # Sorted: each search starts where the last one ended.
                starts = self._starts(np.arange(n, dtype=np.int64))
                lo = d.searchsorted(starts, side="right").astype(np.int32)
                table = lo, d.searchsorted(starts + self.max_length, side="left").astype(np.int32)
            self._bounds = (os.getpid(), table)
        return None if table is None else (table[0][k], table[1][k])

    def document_starts(self) -> np.ndarray:
        """Where every document starts, in the coordinate of `starts`: sorted int64 (D,), cached per process.

        From the shards' document index (a Megatron dataset's index); in arrays and texts a document
        starts after each ``eot_token``.
        """
        pid, starts = self.__dict__.get("_doc_index", (None, None))
        if pid != os.getpid():
            starts = np.asarray(self._doc_starts_fn(), dtype=np.int64)
            self._doc_index = (os.getpid(), starts)
        return starts

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(
                f"a window index must be an int, got {k!r}; use dataset.gather(indices) for a batch of windows"
            )
        x, y = self.gather([k])
        return x[0], y[0]

    def __getitems__(self, ks: Sequence[int]) -> _WindowBatch:
        return _WindowBatch(*self.gather(ks))

    def fingerprint(self) -> str:
        """A short hash that identifies the token data (not the window options).

        Shards: from the manifest's sha256 of every shard of the split (free). Arrays and texts: a
        blake2b over the tokens, computed once on first use.
        """
        if self._fingerprint is None:
            h = hashlib.blake2b(digest_size=12)
            if self._shards is not None:
                h.update(
                    json.dumps([self._shards.split, [(s.n_tokens, s.sha256) for s in self._shards.shards]]).encode()
                )
            else:
                a = np.ascontiguousarray(self._array)
                h.update(str(a.dtype).encode() + b"\0")
                h.update(a.data.cast("B"))
            self._fingerprint = h.hexdigest()
        return self._fingerprint
