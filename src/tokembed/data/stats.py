"""`tokembed stats`: what a shard folder holds and what a loader will make of it."""

from __future__ import annotations

import os
from typing import Any

from tokembed.data.plan import plan
from tokembed.shards.format import read_manifest

__all__ = ["shard_stats"]


def shard_stats(
    root: str | os.PathLike,
    *,
    max_length: int | None = 256,
    stride: int | None = None,
    batch_size: int = 8,
    drop_last: bool = True,
) -> dict[str, Any]:
    """Counts of a shard folder, per split and per input file, and the window plan of each split.

    Args:
        root: the shard folder.
        max_length, stride, batch_size, drop_last: the loader settings to plan for (``stride`` defaults to
            ``max_length``); ``max_length=None`` leaves the plan out.

    Returns:
        ``{"splits": {split: {"documents", "tokens", "shards", "plan"}}, "inputs": [{"path", "documents",
        "tokens", "chars", "text_bytes", "tokens_per_char", "tokens_per_byte", ...}], "dtype", "tokenizer"}``.
        Token counts per input exclude the ``<|endoftext|>`` separators; split totals include them.
    """
    manifest = read_manifest(root)
    out: dict[str, Any] = {
        "root": str(root),
        "tokenizer": manifest["tokenizer"].get("name"),
        "dtype": manifest["dtype"],
        "splits": {},
        "inputs": [],
    }
    for name, s in manifest["splits"].items():
        entry = {"documents": s["documents"], "tokens": s["tokens"], "shards": len(s["shards"])}
        if max_length is not None:
            entry["plan"] = plan(
                s["tokens"],
                max_length=max_length,
                stride=stride if stride is not None else max_length,
                batch_size=batch_size,
                drop_last=drop_last,
            ).to_dict()
        out["splits"][name] = entry
    for f in manifest.get("inputs", []):
        row = dict(f)
        row["tokens_per_char"] = f["tokens"] / f["chars"] if f.get("chars") else None
        row["tokens_per_byte"] = f["tokens"] / f["text_bytes"] if f.get("text_bytes") else None
        out["inputs"].append(row)
    return out
