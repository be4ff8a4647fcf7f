"""Write an embedding table where other tools can read it.

Formats:

* ``projector``: TensorBoard's Embedding Projector (also projector.tensorflow.org, "Load"):
  a folder with ``tensors.tsv`` (one vector per line, values separated by tabs, no header) and
  ``metadata.tsv`` (one label per line, same order, no header: one column has none).
* ``word2vec``: the word2vec text format: a first line ``"<rows> <dim>"``, then one line per
  row, ``"<label> v1 v2 ... vD"`` separated by single spaces (gensim's
  ``KeyedVectors.load_word2vec_format(path)`` reads it).
* ``npy``: the (V, D) float32 array (row i = token id i), for ``numpy.load``.
* ``safetensors``: ``token_embeddings`` (V, D) and, when the table has them,
  ``position_embeddings`` (P, D) and ``token_counts`` (V,), with metadata (format, tokenizer,
  positional scheme, where the counts come from); ``tokembed inspect``/``tokembed.load_table`` read
  it back with its labels and counts.

Labels in the text formats must hold no whitespace, so GPT-2 tokens are spelled as in GPT-2's own
``encoder.json``: a space is ``Ġ``, a newline ``Ċ`` (``" king"`` -> ``Ġking``); the spelling is
one-to-one, so every row has its own label. Numbers are written with 9 significant digits, which
reads back as exactly the same float32.

Every file is written to a temporary file in the same folder, flushed to disk and renamed over
the target, so an interrupted export never leaves a half-written file; an existing file is only
replaced with ``overwrite=True``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tokembed._atomic import atomic_create, check_target
from tokembed._paths import output_path, refuse_inside_checkpoint
from tokembed.inspection.table import EXPORT_FORMAT, EmbeddingTable
from tokembed.tokenizer.base import TokenizerLike

__all__ = ["EXPORT_FORMATS", "export_table"]

EXPORT_FORMATS = ("projector", "word2vec", "npy", "safetensors")
_DIGITS = 9  # %.9g: the fewest significant digits that read back as the same float32 for every value
_CHUNK_ROWS = 1024


def _rows_and_labels(table: EmbeddingTable, ids: Sequence[int] | None, which: str) -> tuple[np.ndarray, list[str]]:
    if which == "tokens":
        if ids is None:
            return table.tokens.numpy(), [table.key(i) for i in range(table.vocab_size)]
        ids = [table.check_id(i) for i in ids]
        return table.tokens[ids].numpy(), [table.key(i) for i in ids]
    if which == "positions":
        pos = table._positions().numpy()
        if ids is None:
            ids = range(pos.shape[0])
        ids = list(ids)
        for p in ids:
            if not 0 <= p < pos.shape[0]:
                raise ValueError(f"position {p} is outside the position table (size {pos.shape[0]})")
        return pos[ids], [f"pos_{p}" for p in ids]
    raise ValueError(f"which must be 'tokens' or 'positions', got {which!r}")


def _check_labels(labels: list[str], *, forbidden: str, fmt: str) -> None:
    seen: dict[str, int] = {}
    for i, lab in enumerate(labels):
        if lab == "" or any(c in lab for c in forbidden):
            raise ValueError(
                f"label {lab!r} of row {i} cannot be written in {fmt} format (it is empty or holds {forbidden!r}); give labels without whitespace"
            )
        if lab in seen:
            raise ValueError(
                f"rows {seen[lab]} and {i} have the same label {lab!r}; {fmt} format needs one label per row"
            )
        seen[lab] = i


def _write_matrix(f, rows: np.ndarray, sep: str, labels: list[str] | None = None) -> None:
    # One %-format per row, 1024 rows per write: as fast as numpy.savetxt, about 3x gensim's writer (bench_inspect.py).
    fmt = sep.join([f"%.{_DIGITS}g"] * rows.shape[1]) + "\n"
    for start in range(0, rows.shape[0], _CHUNK_ROWS):
        chunk = rows[start : start + _CHUNK_ROWS].tolist()
        if labels is None:
            f.write("".join(fmt % tuple(r) for r in chunk))
        else:
            f.write("".join(lab + sep + fmt % tuple(r) for lab, r in zip(labels[start : start + _CHUNK_ROWS], chunk)))


def export_projector(
    table: EmbeddingTable,
    out_dir: str | Path,
    *,
    ids: Sequence[int] | None = None,
    which: str = "tokens",
    overwrite: bool = False,
) -> tuple[Path, Path]:
    """Write ``tensors.tsv`` and ``metadata.tsv`` into ``out_dir`` for the Embedding Projector.

    Returns:
        The paths of the two files.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(
            f"{out_dir} is a file; the projector export is a folder (it holds tensors.tsv and metadata.tsv)"
        )
    tensors, metadata = out_dir / "tensors.tsv", out_dir / "metadata.tsv"
    for p in (tensors, metadata):
        check_target(p, overwrite)
    rows, labels = _rows_and_labels(table, ids, which)
    _check_labels(labels, forbidden="\t\n\r", fmt="metadata.tsv")
    with atomic_create(tensors, overwrite=overwrite) as f:
        _write_matrix(f, rows, "\t")
    with atomic_create(metadata, overwrite=overwrite) as f:
        f.write("".join(lab + "\n" for lab in labels))
    return tensors, metadata


def export_word2vec(
    table: EmbeddingTable,
    path: str | Path,
    *,
    ids: Sequence[int] | None = None,
    which: str = "tokens",
    overwrite: bool = False,
) -> Path:
    """Write the word2vec text format (``gensim.models.KeyedVectors.load_word2vec_format`` reads it)."""
    rows, labels = _rows_and_labels(table, ids, which)
    _check_labels(labels, forbidden=" \t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", fmt="word2vec")
    with atomic_create(path, overwrite=overwrite) as f:
        f.write(f"{rows.shape[0]} {rows.shape[1]}\n")
        _write_matrix(f, rows, " ", labels)
    return Path(path)


def export_npy(
    table: EmbeddingTable,
    path: str | Path,
    *,
    ids: Sequence[int] | None = None,
    which: str = "tokens",
    overwrite: bool = False,
) -> Path:
    """Write the (V, D) float32 array with ``numpy.save`` (row i is token id i, or ``ids[i]``)."""
    rows, _ = _rows_and_labels(table, ids, which)
    with atomic_create(path, "wb", overwrite=overwrite) as f:
        np.save(f, np.ascontiguousarray(rows, dtype=np.float32), allow_pickle=False)
    return Path(path)


def export_safetensors(
    table: EmbeddingTable,
    path: str | Path,
    *,
    ids: Sequence[int] | None = None,
    which: str = "tokens",
    overwrite: bool = False,
) -> Path:
    """Write ``token_embeddings`` (and ``position_embeddings`` if any) with metadata, readable by ``load_table``."""
    from safetensors.torch import save

    if ids is not None or which != "tokens":
        raise ValueError(
            "the safetensors export keeps the whole table (row i = token id i) so that it can be inspected again; export a subset as npy, word2vec or projector"
        )
    tensors = {"token_embeddings": table.tokens.contiguous()}
    if table.positions is not None:
        tensors["position_embeddings"] = table.positions.contiguous()
    if table.counts is not None:  # the counts travel with the table: inspect the export as the checkpoint
        tensors["token_counts"] = table.counts.contiguous()
    meta = {
        "format": EXPORT_FORMAT,
        "tokenizer": _tokenizer_source(table.tokenizer),
        "positional": table.positional,
        "source": table.source,
        "counts_source": table.counts_source,
    }
    data = save(tensors, metadata=meta)
    with atomic_create(path, "wb", overwrite=overwrite) as f:
        f.write(data)
    return Path(path)


_WRITERS = {
    "projector": export_projector,
    "word2vec": export_word2vec,
    "npy": export_npy,
    "safetensors": export_safetensors,
}


def _tokenizer_source(tokenizer: TokenizerLike | None) -> str:
    """What `tokembed.get_tokenizer` rebuilds the table's tokenizer from: its name, or its file's path."""
    if tokenizer is None:
        return "none"
    if isinstance(tokenizer, (str, os.PathLike)):
        return os.fspath(tokenizer)
    from tokembed.tokenizer import tokenizer_identity

    try:
        return tokenizer_identity(tokenizer).source
    except TypeError:
        return getattr(tokenizer, "name", "none")


def export_table(
    table: EmbeddingTable,
    out: str | Path,
    *,
    format: str,
    ids: Sequence[int] | None = None,
    which: str = "tokens",
    overwrite: bool = False,
):
    """Export a table in one of ``EXPORT_FORMATS`` (see the module docstring).

    Args:
        table: the table to write.
        out: the file to write, or the folder for ``projector``.
        format: ``"projector"``, ``"word2vec"``, ``"npy"`` or ``"safetensors"``.
        ids: only these rows, in this order (e.g. the most frequent tokens); default all.
        which: ``"tokens"`` or ``"positions"`` (labels ``pos_0``, ``pos_1``, ...).
        overwrite: replace existing files.

    Returns:
        The written path (a pair of paths for ``projector``).
    """
    if format not in _WRITERS:
        raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    refuse_inside_checkpoint(output_path(out, what="the output"))  # `tokembed train` owns what is in there
    return _WRITERS[format](table, out, ids=ids, which=which, overwrite=overwrite)
