"""Shard folders for other trainers: Megatron-LM's indexed dataset and nanoGPT's ``train.bin``/``val.bin``.

Both stream: tokens go from the shards' memory maps to the output a chunk at a time (bounded memory;
the Megatron index holds one length per document, as Megatron's own builder does), and refuse a token id
that does not fit the target dtype, naming it and where it is.

Nothing is lost or mixed: an output inside (or onto) the input, or inside a tokembed checkpoint, is refused
before anything is written. The files of one export change together (`tokembed._atomic.staged_files`): they are
written into a hidden staging folder beside the targets and renamed into place with the file whose presence makes
the dataset exist (Megatron's ``.idx``, nanoGPT's ``train.bin``) removed first and renamed last, so that a reader
finds the old export, the new one, or none, never a mix. An export killed during its renames is finished by the
next export to the same place; one killed while writing leaves only its marked staging folder, which the next
removes. A refused export creates no folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import recover_staged, staged_files
from tokembed._paths import inside, local_path, output_path, refuse_inside_checkpoint
from tokembed.shards import megatron as mg
from tokembed.shards.reader import ShardSet, open_shards
from tokembed.storage.urls import as_url, is_url, local_path_of

__all__ = ["EXPORT_SPLITS", "SHARD_EXPORT_FORMATS", "export_megatron", "export_nanogpt", "export_shards"]

SHARD_EXPORT_FORMATS = ("megatron", "nanogpt")
EXPORT_SPLITS = ("train", "val", "all")
_CHUNK = 1 << 20  # tokens per write: 2-4 MiB of the source dtype, at most 8 MiB of the target's
NANOGPT_FILES = ("val.bin", "meta.pkl", "train.bin")  # train.bin last: nanoGPT's train.py needs it first
NANOGPT_BLOCK_SIZE = 1024  # nanoGPT's train.py default; its get_batch samples from len(data) - block_size starts


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


def _source(root: str | os.PathLike) -> Path | str:
    """The shard folder to export: a local `Path` (a URL this command cannot read refused by `local_path`), or the
    URL of a remote folder, kept as text (read through the block cache)."""
    if is_url(root) and local_path_of(root) is None:
        return as_url(root)
    return local_path(local_path_of(root) or root, what="the shard folder")


def _input_files(root: Path | str) -> list[Path]:
    """What an export reads: the shard folder, or a Megatron prefix's own files (nothing local for a URL)."""
    if isinstance(root, str):
        return []
    if mg.is_megatron_prefix(root):
        return [mg.bin_path(root), mg.idx_path(root), Path(f"{root}{mg.SIDECAR}")]
    return [root]


def _refuse_overlap(root: Path | str, p: Path) -> None:
    """Refuse an output ``p`` inside (or onto) the input ``root``, or inside a tokembed checkpoint."""
    for source in _input_files(root):
        if inside(p, source):
            if source.is_dir():
                raise ValueError(f"output {p} is inside the input {root}; choose an output outside it")
            raise ValueError(f"output {p} is a file of the input {root}; choose another output name")
    refuse_inside_checkpoint(p)


def _check_out(root: Path | str, paths: Sequence[Path], overwrite: bool) -> None:
    """Refuse outputs that would overwrite the input, land in a checkpoint, or replace files without ``overwrite``."""
    for p in paths:
        _refuse_overlap(root, p)
        if p.is_dir():
            raise IsADirectoryError(f"{p} is a directory; give another output name")
        if p.exists() and not overwrite:
            raise FileExistsError(
                f"{p} already exists; choose another output or pass overwrite=True (--overwrite) to replace it"
            )


def _split_names(root: Path | str, split: str) -> list[str]:
    if split not in EXPORT_SPLITS:
        raise ValueError(f"split must be one of {', '.join(EXPORT_SPLITS)}, got {split!r}")
    return ["train", "val"] if split == "all" else [split]


def _open_split(root: Path | str, split: str, *, needed_by: str) -> ShardSet:
    """Open one split to export, refusing a missing or empty one by name (the trainers cannot read it)."""
    if mg.is_megatron_prefix(root) and split != "train":
        raise ValueError(
            f"{root} is a Megatron dataset: it has one split, read as 'train', and no {split!r}; export --split train"
        )
    if isinstance(root, str):  # a URL
        from tokembed.shards.remote import read_remote_manifest

        splits = read_remote_manifest(root)["splits"]
    elif not mg.is_megatron_prefix(root):
        from tokembed.shards.format import read_manifest

        splits = read_manifest(root)["splits"]
        if split not in splits:
            raise ValueError(f"{root} has no {split!r} split ({needed_by}); {_EMPTY_HINT}")
    ss = open_shards(root, split=split)
    if ss.n_tokens == 0:
        raise ValueError(f"split {split!r} of {root} is empty (0 documents; {needed_by}); {_EMPTY_HINT}")
    return ss


_EMPTY_HINT = (
    "prepare the corpus with --val-fraction and more than one document (a text file is one document: give a folder "
    "of files or JSON Lines), or export only the train split (--split train)"
)


def export_nanogpt(
    root: str | os.PathLike, out: str | os.PathLike, *, split: str = "all", overwrite: bool = False
) -> dict[str, Any]:
    """Write ``OUT/train.bin`` and ``OUT/val.bin`` (each split as one uint16 memmap, as nanoGPT reads it) and
    ``OUT/meta.pkl`` (``{"vocab_size", "eot_token", "tokenizer"}``: nanoGPT's train.py sizes the model by it).

    nanoGPT's ``prepare.py`` appends the end-of-text token to every document and concatenates them; its
    ``get_batch`` reads ``np.memmap(path, dtype=np.uint16, mode="r")``. A shard split is already that
    stream (every document is its tokens and one ``<|endoftext|>``), so it is copied as it is.

    Args:
        root: a shard folder, local or a URL (or a Megatron prefix, with ``split="train"``).
        out: the folder for ``train.bin``, ``val.bin`` and ``meta.pkl``.
        split: ``"all"`` (train.bin and val.bin: what nanoGPT's train.py reads), ``"train"`` or ``"val"``.
        overwrite: replace an existing export (its other split's file too, so none of two exports are mixed).

    Returns:
        ``{"format", "files": {split: {"path", "tokens", "sha256"}}, "meta": path}``.

    Raises:
        ValueError: a missing or empty split (nanoGPT cannot read it), a token id >= 65536 (uint16), naming it and
            its offset; an output inside the input or a checkpoint.
        FileExistsError: an output, or the other split's ``.bin`` (which ``overwrite`` removes), exists and
            ``overwrite`` is False.

    Warns:
        UserWarning: a split of at most `NANOGPT_BLOCK_SIZE` tokens (nanoGPT's default block_size): written, but
            train.py needs a smaller ``--block_size`` for it.
    """
    src, out = _source(root), output_path(out, what="the output folder")
    names = _split_names(src, split)
    _refuse_overlap(src, out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out} is a file; the nanoGPT export is a folder (train.bin, val.bin, meta.pkl)")
    sets = {s: _open_split(src, s, needed_by="nanoGPT's train.py reads train.bin and val.bin") for s in names}
    targets = [out / n for n in NANOGPT_FILES if n == "meta.pkl" or n[: -len(".bin")] in names]
    others = [out / n for n in NANOGPT_FILES if out / n not in targets]  # the other split of an older export
    recovered = recover_staged(out, "nanogpt")  # an export killed in its renames: finished first
    _check_out(src, targets + others, overwrite or recovered)  # ... which goes only with --overwrite
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    try:
        with staged_files(targets, key="nanogpt", remove=others) as staged:
            for name, ss in sets.items():
                with open(staged[out / f"{name}.bin"], "wb") as f:
                    digest = _write_tokens(ss, f, np.dtype("<u2"), "nanoGPT")
                files[name] = {"path": str(out / f"{name}.bin"), "tokens": ss.n_tokens, "sha256": digest}
            with open(staged[out / "meta.pkl"], "wb") as f:
                pickle.dump(_nanogpt_meta(next(iter(sets.values()))), f)
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()  # a refused export leaves no empty folder
        raise
    for name, f in files.items():
        if f["tokens"] <= NANOGPT_BLOCK_SIZE:
            warnings.warn(
                f"{name}.bin holds {f['tokens']:,} tokens: nanoGPT's train.py draws windows of block_size + 1 tokens "
                f"({NANOGPT_BLOCK_SIZE + 1:,} by default) and fails on a split of at most block_size; pass "
                f"--block_size={max(1, f['tokens'] - 1)} or less, or prepare more text",
                stacklevel=2,
            )
    return {"format": "nanogpt", "files": files, "meta": str(out / "meta.pkl")}


def _nanogpt_meta(ss: ShardSet) -> dict[str, Any]:
    """nanoGPT's meta.pkl: its train.py reads ``vocab_size`` (else it assumes GPT-2's, padded to 50,304)."""
    tok = ss.tokenizer
    return {"vocab_size": int(tok.n_vocab), "eot_token": ss.eot_token, "tokenizer": tok.source}


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
    root: str | os.PathLike,
    prefix: str | os.PathLike,
    *,
    split: str = "train",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write split ``split`` of a shard folder as Megatron's ``PREFIX.bin`` + ``PREFIX.idx``.

    Each document becomes one sequence and one document (its tokens and its end-of-text token), as
    Megatron's ``preprocess_data.py --append-eod`` writes; the tokens are uint16 when the vocabulary fits
    (GPT-2's does), else int32. ``PREFIX.tokembed.json`` keeps the tokenizer's identity and the ``.bin``'s sha256
    for tokembed. ``split="all"`` writes ``PREFIX_train`` and ``PREFIX_val`` (Megatron's ``--train-data-path`` and
    ``--valid-data-path``), which change together: a killed export leaves no one export's train beside another's val.

    Returns:
        ``{"format", "prefix", "documents", "tokens", "dtype"}``; with ``split="all"``, ``{"format", "splits":
        {split: that dict}}``.

    Raises:
        ValueError: a missing or empty split, a token id that does not fit the dtype, a document over 2**31 tokens,
            an output inside the input or a checkpoint.
        FileExistsError: ``PREFIX.bin``/``.idx`` exist and ``overwrite`` is False.
    """
    src, prefix = _source(root), output_path(prefix, what="the output prefix")
    names = _split_names(src, split)
    _refuse_overlap(src, prefix)
    if split == "all":
        parts = {s: Path(f"{prefix}_{s}") for s in names}
        sets = {parts[s]: _open_split(src, s, needed_by="--split all exports both") for s in names}
    else:
        sets = {prefix: _open_split(src, split, needed_by="Megatron reads no empty dataset")}
    _check_megatron_out(src, list(sets), overwrite)
    written = _write_megatron(src, sets)
    if split == "all":
        return {"format": "megatron", "splits": {s: written[parts[s]] for s in names}}
    return written[prefix]


def _check_megatron_out(root: Path | str, prefixes: list[Path], overwrite: bool) -> None:
    for p in prefixes:
        _refuse_overlap(root, p)
    # an export killed in its renames is finished first (the files of all its prefixes are then its own)
    recovered = [recover_staged(p.parent, p.name) for p in prefixes]
    for p in prefixes:
        _check_out(root, [mg.idx_path(p), mg.bin_path(p), Path(f"{p}{mg.SIDECAR}")], overwrite or any(recovered))


def _write_megatron(root: Path | str, sets: dict[Path, ShardSet]) -> dict[Path, dict[str, Any]]:
    """Every prefix's ``.bin``, sidecar and ``.idx`` as one staged set (named by the first prefix): the splits of
    one export change together. Every ``.idx`` is removed first and renamed in after its own ``.bin``, so that a
    reader finds each prefix old, new or absent, and never one export's train beside another's val."""
    dtypes = {p: megatron_dtype(ss) for p, ss in sets.items()}
    index = {p: _megatron_index(ss, dtypes[p]) for p, ss in sets.items()}  # O(documents): before any file is touched
    idxs = [mg.idx_path(p) for p in sets]
    targets = [f for p in sets for f in (mg.bin_path(p), Path(f"{p}{mg.SIDECAR}"))] + idxs[1:] + idxs[:1]
    first = next(iter(sets))
    made = not first.parent.exists()
    first.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staged_files(targets, key=first.name, remove=idxs[1:]) as staged:  # Megatron opens the .idx first
            for p, ss in sets.items():
                with open(staged[mg.bin_path(p)], "wb") as fb:
                    digest = _write_tokens(ss, fb, dtypes[p], "Megatron")
                staged[mg.idx_path(p)].write_bytes(index[p])
                meta = {"format": "tokembed-megatron-export", "tokenizer": ss.manifest["tokenizer"]}
                meta |= {"bin_sha256": digest, "source": str(root), "split": ss.split}
                staged[Path(f"{p}{mg.SIDECAR}")].write_text(
                    json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8"
                )
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                first.parent.rmdir()  # a refused export leaves no empty folder
        raise
    return {
        p: {"format": "megatron", "prefix": str(p), "documents": ss.n_documents, "tokens": ss.n_tokens}
        | {"dtype": dtypes[p].name}
        for p, ss in sets.items()
    }


def export_shards(
    root: str | os.PathLike,
    out: str | os.PathLike,
    *,
    format: str,
    split: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """`export_megatron` (``format="megatron"``, ``out`` a prefix; ``split`` default ``"train"``) or
    `export_nanogpt` (``"nanogpt"``, ``out`` a folder; ``split`` default ``"all"``)."""
    if format == "megatron":
        return export_megatron(root, out, split=split or "train", overwrite=overwrite)
    if format == "nanogpt":
        return export_nanogpt(root, out, split=split or "all", overwrite=overwrite)
    raise ValueError(f"unknown shard export format {format!r}; choose one of {', '.join(SHARD_EXPORT_FORMATS)}")
