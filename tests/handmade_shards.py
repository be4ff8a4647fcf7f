"""A shard folder written by hand from the format's contract (not with tokembed's writer).

Tests of the readers use it so that they check the readers against the contract itself:
``DIR/manifest.json``, ``DIR/<split>/NNNNN.bin`` (raw little-endian tokens), ``DIR/<split>/NNNNN.idx``
(raw little-endian int64 document starts within the shard), every document ending with ``<|endoftext|>``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

EOT = 50256


def write_shards(root: Path, shards: list[list[np.ndarray]], *, split: str = "train", eot: int = EOT) -> np.ndarray:
    """Write ``shards`` (per shard, a list of documents without their separator) to ``root``.

    Returns:
        The split's whole token stream (every document followed by ``eot``), for reference.
    """
    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    infos, stream = [], []
    for i, docs in enumerate(shards):
        toks = np.concatenate([np.append(np.asarray(d, dtype=np.int64), eot) for d in docs]) if docs else np.zeros(0, np.int64)
        lengths = [len(d) + 1 for d in docs]
        idx = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype("<i8") if docs else np.zeros(0, "<i8")
        tb, ib = toks.astype("<u2").tobytes(), idx.tobytes()
        (root / split / f"{i:05d}.bin").write_bytes(tb)
        (root / split / f"{i:05d}.idx").write_bytes(ib)
        infos.append({
            "tokens": f"{split}/{i:05d}.bin", "index": f"{split}/{i:05d}.idx", "n_tokens": len(toks),
            "n_documents": len(docs), "bytes": len(tb), "sha256": hashlib.sha256(tb).hexdigest(),
            "index_sha256": hashlib.sha256(ib).hexdigest(),
        })
        stream.append(toks)
    from tokembed.tokenizer import get_tokenizer, tokenizer_hash

    manifest = {
        "format": "tokembed-shards", "version": 1,
        "tokenizer": {"name": "gpt2", "n_vocab": 50257, "eot_token": eot, "hash": tokenizer_hash(get_tokenizer("gpt2"))},
        "dtype": "uint16",
        "splits": {split: {"tokens": sum(x["n_tokens"] for x in infos), "documents": sum(x["n_documents"] for x in infos), "shards": infos}},
        "inputs": [], "config": {},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
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
