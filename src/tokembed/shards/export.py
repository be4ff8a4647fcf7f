"""Shard folders for other trainers: Megatron-LM's indexed dataset and nanoGPT's ``train.bin``/``val.bin``.

Both stream: tokens go from the shards' memory maps to the output a chunk at a time (bounded memory;
the Megatron index holds one length per document, as Megatron's own builder does). Both write
atomically (temporary files, fsync, rename: an interrupted export leaves the old files or none) and
refuse a token id that does not fit the target dtype, naming it and where it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import atomic_open
from tokembed.shards import megatron as mg
from tokembed.shards.reader import ShardSet, open_shards

__all__ = ["SHARD_EXPORT_FORMATS", "export_megatron", "export_nanogpt", "export_shards"]

SHARD_EXPORT_FORMATS = ("megatron", "nanogpt")
_CHUNK = 1 << 20  # tokens per write: 2-4 MiB of the source dtype, at most 8 MiB of the target's


def _chunks(ss: ShardSet) -> Iterator[tuple[int, np.ndarray]]:
    """``(global offset, tokens)`` over the whole split, at most ``_CHUNK`` tokens at a time."""
    for i in range(len(ss.shards)):
        toks = ss.tokens(i)
        for a in range(0, len(toks), _CHUNK):
            yield int(ss.cumulative[i]) + a, np.asarray(toks[a : a + _CHUNK])


def _write_tokens(ss: ShardSet, f, dtype: np.dtype, what: str) -> str:
    """Stream the split into ``f`` as ``dtype``; return the sha256 of what was written."""
    limit = np.iinfo(dtype).max
    h = hashlib.sha256()
    for offset, chunk in _chunks(ss):
        if chunk.size and (int(chunk.max()) > limit or int(chunk.min()) < 0):  # a Megatron source may be signed
            j = int(np.argmax((chunk > limit) | (chunk < 0)))
            raise ValueError(
                f"token id {int(chunk[j])} at offset {offset + j} of split {ss.split!r} of {ss.root} does not fit {what}'s "
                f"{dtype.name} (ids 0 to {limit}); nothing was written: export with a format whose dtype holds the vocabulary"
            )
        data = chunk.astype(dtype.newbyteorder("<"), copy=False).tobytes()
        h.update(data)
        f.write(data)
    return h.hexdigest()


def _check_out(paths: list[Path], overwrite: bool) -> None:
    for p in paths:
        if p.is_dir():
            raise IsADirectoryError(f"{p} is a directory; give another output name")
        if p.exists() and not overwrite:
            raise FileExistsError(
                f"{p} already exists; choose another output or pass overwrite=True (--force) to replace it"
            )


def export_nanogpt(root: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False) -> dict[str, Any]:
    """Write ``OUT/train.bin`` and ``OUT/val.bin``: each split as one uint16 memmap, as nanoGPT reads it.

    nanoGPT's ``prepare.py`` appends the end-of-text token to every document and concatenates them; its
    ``get_batch`` reads ``np.memmap(path, dtype=np.uint16, mode="r")``. A shard split is already that
    stream (every document is its tokens and one ``<|endoftext|>``), so it is copied as it is.

    Args:
        root: a shard folder (or a Megatron prefix).
        out: the folder for ``train.bin`` (and ``val.bin`` when the source has a val split).
        overwrite: replace existing files.

    Returns:
        ``{"format", "files": {split: {"path", "tokens", "sha256"}}}``.

    Raises:
        ValueError: a token id >= 65536 (uint16), naming it and its offset.
        FileExistsError: an output exists and ``overwrite`` is False.
    """
    out = Path(out)
    splits = [s for s in ("train", "val") if _has_split(root, s)]
    targets = [out / f"{s}.bin" for s in splits]
    _check_out(targets, overwrite)
    files = {}
    with contextlib.ExitStack() as stack:  # both files are renamed into place at the end, or neither
        for split, path in zip(splits, targets):
            ss = open_shards(root, split=split)
            digest = _write_tokens(ss, stack.enter_context(atomic_open(path, "wb")), np.dtype("<u2"), "nanoGPT")
            files[split] = {"path": str(path), "tokens": ss.n_tokens, "sha256": digest}
    return {"format": "nanogpt", "files": files}


def _has_split(root: str | os.PathLike, split: str) -> bool:
    if mg.is_megatron_prefix(root):
        return split == "train"
    from tokembed.shards.format import read_manifest

    return split in read_manifest(root)["splits"]


def megatron_dtype(ss: ShardSet) -> np.dtype:
    """uint16 while the vocabulary fits (as Megatron's ``DType.optimal_dtype``, which also takes uint16 below 65,500), else int32."""
    n_vocab = ss.manifest["tokenizer"].get("n_vocab")
    fits = n_vocab is not None and n_vocab <= 2**16 or n_vocab is None and ss.dtype.itemsize <= 2
    return np.dtype("<u2") if fits else np.dtype("<i4")


def _megatron_index(ss: ShardSet, dtype: np.dtype) -> bytes:
    """The ``.idx`` bytes: each document one sequence (its tokens and its end-of-text), as ``--append-eod`` makes."""
    starts = ss.doc_starts()  # (D,)
    lengths = np.diff(np.append(starts, ss.n_tokens))  # (D,)
    if len(lengths) and int(lengths.max()) >= 2**31:
        raise ValueError(
            f"a document of {int(lengths.max())} tokens in {ss.root} is too long for Megatron's int32 sequence lengths"
        )
    pointers = (
        np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]) * dtype.itemsize if len(lengths) else lengths
    )
    documents = np.arange(len(lengths) + 1, dtype=np.int64)
    head = mg.HEADER.pack(mg.MAGIC, mg.VERSION, mg.CODES[dtype], len(lengths), len(documents))
    body = [lengths.astype("<i4"), pointers.astype("<i8"), documents.astype("<i8")]
    return head + b"".join(a.tobytes() for a in body)


def export_megatron(
    root: str | os.PathLike, prefix: str | os.PathLike, *, split: str = "train", overwrite: bool = False
) -> dict[str, Any]:
    """Write split ``split`` of a shard folder as Megatron's ``PREFIX.bin`` + ``PREFIX.idx``.

    Each document becomes one sequence and one document (its tokens and its end-of-text token), as
    Megatron's ``preprocess_data.py --append-eod`` writes; the tokens are uint16 when the vocabulary fits
    (GPT-2's does), else int32. ``PREFIX.tokembed.json`` keeps the tokenizer's identity for tokembed.

    Returns:
        ``{"format", "prefix", "documents", "tokens", "dtype"}``.

    Raises:
        ValueError: a token id that does not fit the dtype; a document over 2**31 tokens.
        FileExistsError: ``PREFIX.bin``/``.idx`` exist and ``overwrite`` is False.
    """
    prefix = Path(prefix)
    ss = open_shards(root, split=split)
    dtype = megatron_dtype(ss)
    ipath, bpath, side = mg.idx_path(prefix), mg.bin_path(prefix), Path(f"{prefix}{mg.SIDECAR}")
    _check_out([ipath, bpath], overwrite)
    index = _megatron_index(ss, dtype)  # O(documents): built before any file is touched
    # Renamed into place in this order: .bin, .idx, the sidecar; an error before leaves every old file.
    with atomic_open(side, "w") as fs, atomic_open(ipath, "wb") as fi:
        with atomic_open(bpath, "wb") as fb:
            digest = _write_tokens(ss, fb, dtype, "Megatron")
        fi.write(index)
        meta = {"format": "tokembed-megatron-export", "tokenizer": ss.manifest["tokenizer"], "bin_sha256": digest}
        json.dump({**meta, "source": str(root), "split": split}, fs, indent=1, sort_keys=True)
    return {
        "format": "megatron",
        "prefix": str(prefix),
        "documents": ss.n_documents,
        "tokens": ss.n_tokens,
        "dtype": dtype.name,
    }


def export_shards(
    root: str | os.PathLike, out: str | os.PathLike, *, format: str, overwrite: bool = False
) -> dict[str, Any]:
    """`export_megatron` (``format="megatron"``, ``out`` a prefix) or `export_nanogpt` (``"nanogpt"``, ``out`` a folder)."""
    if format == "megatron":
        return export_megatron(root, out, overwrite=overwrite)
    if format == "nanogpt":
        return export_nanogpt(root, out, overwrite=overwrite)
    raise ValueError(f"unknown shard export format {format!r}; choose one of {', '.join(SHARD_EXPORT_FORMATS)}")
