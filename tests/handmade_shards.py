"""A shard folder written by hand from the format's contract (not with tokembed's writer).

Tests of the readers use it so that they check the readers against the contract itself:
``DIR/manifest.json``, ``DIR/<split>/NNNNN.bin`` (raw little-endian tokens), ``DIR/<split>/NNNNN.idx``
(raw little-endian int64 document starts within the shard), every document ending with ``<|endoftext|>``.
`write_cut_stream` writes format version 2, where a document may go on into the next shards.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

EOT = 50256


def _manifest(root: Path, infos: list[dict], *, split: str, eot: int, version: int) -> None:
    from tokembed.tokenizer import get_tokenizer, tokenizer_hash

    manifest = {
        "format": "tokembed-shards",
        "version": version,
        "tokenizer": {
            "name": "gpt2",
            "n_vocab": 50257,
            "eot_token": eot,
            "hash": tokenizer_hash(get_tokenizer("gpt2")),
        },
        "dtype": "uint16",
        "splits": {
            split: {
                "tokens": sum(x["n_tokens"] for x in infos),
                "documents": sum(x["n_documents"] for x in infos),
                "shards": infos,
            }
        },
        "inputs": [],
        "config": {},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))


def _write_shard(root: Path, split: str, i: int, toks: np.ndarray, idx: np.ndarray) -> dict:
    tb, ib = np.asarray(toks).astype("<u2").tobytes(), np.asarray(idx).astype("<i8").tobytes()
    (root / split / f"{i:05d}.bin").write_bytes(tb)
    (root / split / f"{i:05d}.idx").write_bytes(ib)
    return {
        "tokens": f"{split}/{i:05d}.bin",
        "index": f"{split}/{i:05d}.idx",
        "n_tokens": len(toks),
        "n_documents": len(idx),
        "bytes": len(tb),
        "sha256": hashlib.sha256(tb).hexdigest(),
        "index_sha256": hashlib.sha256(ib).hexdigest(),
    }


def write_cut_stream(
    root: Path, docs: list[list[int]], cuts: list[int], *, split: str = "train", eot: int = EOT
) -> tuple[np.ndarray, np.ndarray]:
    """Write ``docs`` (each without its separator) as one stream cut into shards at the token offsets
    ``cuts`` (increasing, inside the stream), wherever they fall: inside documents too (format version 2).

    Returns:
        ``(stream, doc_starts)``: the whole token stream and the global offset of every document.
    """
    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    stream = np.concatenate([np.append(np.asarray(d, dtype=np.int64), eot) for d in docs])
    starts = np.concatenate([[0], np.cumsum([len(d) + 1 for d in docs])[:-1]]).astype(np.int64)
    bounds = [0, *cuts, len(stream)]
    infos = []
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        inside = starts[(starts >= a) & (starts < b)] - a
        infos.append(_write_shard(root, split, i, stream[a:b], inside))
    _manifest(root, infos, split=split, eot=eot, version=2)
    return stream, starts


def small_corpus(root: Path) -> Path:
    """120 documents of 3-79 random ids (seed 9) as one stream cut into 3 shards at tokens 1,500 and 3,000, inside
    documents too: the trainer integrations' folder (one process and several). Returns ``root``."""
    rng = np.random.default_rng(9)
    docs = [rng.integers(0, 50000, n).tolist() for n in rng.integers(3, 80, 120)]
    write_cut_stream(root, docs, cuts=[1500, 3000])
    return Path(root)


def write_shards(root: Path, shards: list[list[np.ndarray]], *, split: str = "train", eot: int = EOT) -> np.ndarray:
    """Write ``shards`` (per shard, a list of documents without their separator) to ``root``.

    Returns:
        The split's whole token stream (every document followed by ``eot``), for reference.
    """
    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    infos, stream = [], []
    for i, docs in enumerate(shards):
        toks = (
            np.concatenate([np.append(np.asarray(d, dtype=np.int64), eot) for d in docs])
            if docs
            else np.zeros(0, np.int64)
        )
        lengths = [len(d) + 1 for d in docs]
        idx = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("<i8") if docs else np.zeros(0, "<i8")
        infos.append(_write_shard(root, split, i, toks, idx))
        stream.append(toks)
    _manifest(root, infos, split=split, eot=eot, version=1)
    return np.concatenate(stream) if stream else np.zeros(0, np.int64)


def counting_docs(lengths_per_shard: list[list[int]]) -> list[list[np.ndarray]]:
    """Documents whose tokens count up through the stream (a separator takes one number too), so a
    window is identified by its first token that is not ``EOT`` (documents have >= 1 token)."""
    out, pos = [], 0
    for lengths in lengths_per_shard:
        docs = []
        for n in lengths:
            docs.append(np.arange(pos, pos + n))
            pos += n + 1
        out.append(docs)
    if pos >= EOT:
        raise ValueError(f"{pos} tokens: counting documents must stay below {EOT}")
    return out
