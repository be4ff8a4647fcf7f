"""Megatron-LM's indexed dataset: ``PREFIX.bin`` + ``PREFIX.idx``, read as a shard split and written from one.

The format (the reader is `tokembed.shards.reader.MegatronSplit`), as megatron-core's ``megatron/core/datasets/indexed_dataset.py`` (``_IndexWriter``,
``_IndexReader``) defines it; every integer is little-endian:

- ``PREFIX.bin``: the tokens of every sequence, back to back, in the index's dtype.
- ``PREFIX.idx``: ``b"MMIDIDX\\x00\\x00"`` (9 bytes), version ``1`` (uint64), a dtype code (uint8:
  1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), the number of sequences
  ``S`` (uint64), the number of document-index entries ``D + 1`` (uint64), then ``S`` sequence lengths
  (int32, tokens), ``S`` sequence pointers (int64, byte offsets into ``.bin``), ``D + 1`` document
  indices (int64: document ``d`` is sequences ``[doc[d], doc[d+1])``, ``doc[0] = 0``), and, in
  multimodal datasets only, ``S`` sequence modes (int8, ignored here).

Megatron's ``preprocess_data.py --append-eod`` makes each document one sequence ending with the
end-of-document token: tokembed's documents (their tokens and their ``<|endoftext|>``) map one to one.
tokembed's export also writes ``PREFIX.tokembed.json`` (the tokenizer entry of the shard manifest), which
Megatron ignores and tokembed reads back, so a round trip keeps the tokenizer's identity.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SIDECAR",
    "MAGIC",
    "MegatronIndex",
    "check_megatron",
    "is_megatron_prefix",
    "read_megatron_index",
    "recorded",
    "recorded_tokenizer",
]

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, document-index entries: 34 bytes
# Megatron's DType enum: code -> numpy dtype (little-endian).
DTYPES = {1: "<u1", 2: "<i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}
SIDECAR = ".tokembed.json"


def idx_path(prefix: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(prefix)}.idx")


def bin_path(prefix: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(prefix)}.bin")


def is_megatron_prefix(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a Megatron dataset: ``path.idx`` exists (and ``path`` itself is no folder)."""
    return not Path(path).is_dir() and idx_path(path).is_file()


@dataclass(frozen=True)
class MegatronIndex:
    """The parsed ``.idx`` of a Megatron dataset (arrays are read-only views of the file).

    Attributes:
        dtype: the token dtype of ``.bin``.
        lengths: (S,) int32 tokens per sequence.
        pointers: (S,) int64 byte offset of each sequence in ``.bin``.
        documents: (D+1,) int64 sequence index where each document starts, then ``S``.
    """

    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    documents: np.ndarray

    def doc_starts(self) -> np.ndarray:
        """Token offset of each non-empty document in ``.bin``: int64 (D',)."""
        seq = self.documents[:-1]
        nonempty = self.documents[1:] > seq
        return self.pointers[seq[nonempty]] // self.dtype.itemsize


def read_megatron_index(prefix: str | os.PathLike) -> MegatronIndex:
    """Parse ``PREFIX.idx`` and check it against ``PREFIX.bin``'s size.

    Raises:
        FileNotFoundError: no ``.idx`` or no ``.bin``.
        ValueError: not a Megatron index, an unknown version or dtype, a truncated file, sequences
            that are not back to back, or a ``.bin`` of another size; the message names the file.
    """
    ipath, bpath = idx_path(prefix), bin_path(prefix)
    for p in (ipath, bpath):
        if not p.is_file():
            raise FileNotFoundError(
                f"{p} not found: a Megatron dataset {prefix} needs both {ipath.name} and {bpath.name}"
            )
    raw = np.memmap(ipath, dtype=np.uint8, mode="r") if ipath.stat().st_size else np.zeros(0, np.uint8)
    if len(raw) < HEADER.size:
        raise ValueError(
            f"{ipath} has {len(raw)} bytes, fewer than the {HEADER.size}-byte header of a Megatron index; re-create it"
        )
    magic, version, code, n_seq, n_doc = HEADER.unpack(bytes(raw[: HEADER.size]))
    if magic != MAGIC:
        raise ValueError(
            f"{ipath} does not start with Megatron's {MAGIC!r} (found {magic!r}); give the prefix of a Megatron .bin/.idx pair"
        )
    if version != VERSION or code not in DTYPES:
        raise ValueError(
            f"{ipath} has version {version} and dtype code {code}; tokembed reads version 1 with codes {sorted(DTYPES)}"
        )
    dtype = np.dtype(DTYPES[code])
    if dtype.kind not in "iu":
        raise ValueError(f"{ipath} holds {dtype.name} values, not token ids; give a dataset of integer tokens")
    need = HEADER.size + n_seq * 12 + n_doc * 8
    if len(raw) < need:
        raise ValueError(f"{ipath} is truncated: {len(raw)} bytes, its header announces {need}; re-create it")
    off = HEADER.size
    lengths = raw[off : off + 4 * n_seq].view("<i4")
    pointers = raw[off + 4 * n_seq : off + 12 * n_seq].view("<i8")
    documents = raw[off + 12 * n_seq : need].view("<i8")
    index = MegatronIndex(dtype, lengths, pointers, documents)
    _check_layout(index, ipath, bpath)
    return index


def _check_layout(index: MegatronIndex, ipath: Path, bpath: Path) -> None:
    size = index.dtype.itemsize
    ends = np.cumsum(index.lengths, dtype=np.int64) * size  # (S,) byte end of each sequence
    if len(index.lengths) and (index.pointers[0] != 0 or np.any(index.pointers[1:] != ends[:-1])):
        raise ValueError(
            f"{ipath}: its sequences are not stored back to back in {bpath.name}; tokembed reads contiguous datasets only"
        )
    docs = index.documents
    if len(docs) == 0 or docs[0] != 0 or docs[-1] != len(index.lengths) or np.any(np.diff(docs) < 0):
        raise ValueError(
            f"{ipath}: its document index does not run from 0 to its {len(index.lengths)} sequences; re-create it"
        )
    expected = int(ends[-1]) if len(ends) else 0
    if bpath.stat().st_size != expected:
        raise ValueError(
            f"{bpath} has {bpath.stat().st_size} bytes, its index {ipath.name} says {expected}; the pair is damaged or from two runs: re-create it"
        )


def _sidecar(prefix: str | os.PathLike) -> dict[str, Any]:
    side = Path(f"{os.fspath(prefix)}{SIDECAR}")
    if not side.is_file():
        return {}
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(
            f"{side} is not valid JSON ({e}); delete it (it only records the tokenizer) or re-export"
        ) from None
    return meta if isinstance(meta, dict) else {}


def recorded(prefix: str | os.PathLike) -> dict[str, Any]:
    """What tokembed's export recorded beside ``PREFIX`` (``{}`` for a dataset made elsewhere)."""
    return _sidecar(prefix)


def recorded_tokenizer(prefix: str | os.PathLike) -> dict[str, Any] | None:
    """The tokenizer entry tokembed's export recorded beside ``PREFIX`` (None for a dataset made elsewhere)."""
    return _sidecar(prefix).get("tokenizer")


def check_megatron(prefix: str | os.PathLike, *, full: bool = True) -> list[str]:
    """Problems of a Megatron dataset, one line each naming the file (empty when it is healthy).

    The pair's layout always (`read_megatron_index`); with ``full``, the ``.bin``'s sha256 against the one
    tokembed's export recorded in ``PREFIX.tokembed.json`` (a dataset made elsewhere records none), and, for a
    tokembed export, every id inside the recorded vocabulary and every document ending with its end-of-text id.
    """
    try:
        index = read_megatron_index(prefix)
        meta = recorded(prefix)
    except (OSError, ValueError) as e:
        return [str(e)]
    if not full:
        return []
    bpath = bin_path(prefix)
    digest = meta.get("bin_sha256")
    if digest is not None:
        from tokembed.shards.format import sha256_file

        if sha256_file(bpath) != digest:
            return [
                f"{bpath}: sha256 mismatch with the one tokembed's export recorded in {Path(f'{prefix}{SIDECAR}').name} "
                "(the token file was modified or damaged): export it again"
            ]
    return _token_problems(bpath, index, meta.get("tokenizer") or {})


def _token_problems(bpath: Path, index: MegatronIndex, tokenizer: dict[str, Any]) -> list[str]:
    n_tokens = int(index.lengths.sum(dtype=np.int64))
    if not n_tokens:
        return []
    toks = np.memmap(bpath, dtype=index.dtype, mode="r", shape=(n_tokens,))
    problems = []
    lo, hi = int(toks.min()), int(toks.max())
    n_vocab = tokenizer.get("n_vocab")
    if lo < 0 or (n_vocab is not None and hi >= int(n_vocab)):
        bad = lo if lo < 0 else hi
        problems.append(f"{bpath}: token id {bad} is outside the vocabulary (0 to {n_vocab or 'its dtype'})")
    eot = tokenizer.get("eot_token")
    if eot is not None:
        ends = index.pointers // index.dtype.itemsize + index.lengths - 1  # (S,) last token of each sequence
        last = index.documents[1:][index.documents[1:] > index.documents[:-1]] - 1  # (D',) last sequence per document
        wrong = np.flatnonzero(toks[ends[last]] != eot) if len(last) else np.zeros(0, np.int64)
        if len(wrong):
            problems.append(
                f"{bpath}: {len(wrong)} document(s) do not end with the end-of-text id {eot} (the first: document {int(wrong[0])})"
            )
    return problems
