"""How many times each token id occurs in each split of a shard folder, as the manifest records it.

The manifest stores how often each id occurs per split: ``"token_counts": {"train": {"262": 1041, ...},
"val": {...}}``, id -> count for the ids that occur (a JSON object, ids as strings, in id order). Inspection reads
them from there instead of reading every shard again. ``prepare``'s workers count the ids of each part they make
(`part_counts`) and the main process adds them up (`SplitCounts`), so the run ends without reading its shards
again; the units a resumed run found finished, and ``merge``'s, are counted from their files. numpy only: no torch
in ``prepare``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SplitCounts", "manifest_token_counts", "part_counts", "split_token_counts"]

_CHUNK = 1 << 20  # tokens per bincount: its 8 MiB of int64 stays in cache (twice as fast as 16 Mi at once)


def part_counts(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ids that occur in ``tokens`` (ascending, uint32) and how often (int64): what a worker sends back."""
    counts = np.bincount(tokens)  # (max id + 1,)
    present = np.flatnonzero(counts)  # (distinct ids,)
    return present.astype(np.uint32), counts[present]


class SplitCounts:
    """Per split, how often each id occurs in the shards counted so far, and which shards (token files) those are."""

    def __init__(self) -> None:
        self.counts: dict[str, np.ndarray] = {}  # split -> (max id + 1,) int64
        self.files: set[str] = set()  # the shards' ``tokens`` paths, as the manifest lists them

    def add(self, split: str, ids: np.ndarray, n: np.ndarray) -> None:
        """Add one part's `part_counts` (``ids`` distinct)."""
        if not len(ids):
            return
        acc = self.counts.get(split, np.zeros(0, dtype=np.int64))
        if int(ids[-1]) >= acc.shape[0]:
            acc = np.pad(acc, (0, int(ids[-1]) + 1 - acc.shape[0]))
        acc[ids] += n
        self.counts[split] = acc


def split_token_counts(
    root: Path, manifest: dict[str, Any], known: SplitCounts | None = None
) -> dict[str, dict[str, int]]:
    """The manifest's ``token_counts``: the ids of every split's shards under ``root`` (the manifest's ``splits`` and
    ``dtype``), taken from ``known`` for the shards it counted, read from the files for the others."""
    dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
    done = known.files if known is not None else set()
    out = {}
    for split, info in manifest["splits"].items():
        counts = known.counts.get(split, np.zeros(0, dtype=np.int64)) if known is not None else np.zeros(0, np.int64)
        for shard in info["shards"]:
            if not shard["n_tokens"] or shard["tokens"] in done:
                continue
            ids = np.memmap(root / shard["tokens"], dtype=dtype, mode="r")  # (n,)
            for start in range(0, ids.shape[0], _CHUNK):
                part = np.bincount(ids[start : start + _CHUNK])
                if part.shape[0] > counts.shape[0]:
                    counts = np.pad(counts, (0, part.shape[0] - counts.shape[0]))
                counts[: part.shape[0]] += part
        present = np.flatnonzero(counts)  # (distinct ids,)
        out[split] = dict(zip(map(str, present.tolist()), counts[present].tolist()))
    return out


def manifest_token_counts(manifest: dict[str, Any], split: str, vocab_size: int) -> np.ndarray | None:
    """(V,) int64 counts of ``split`` from a manifest, or None for a manifest written without them."""
    recorded = (manifest.get("token_counts") or {}).get(split)
    if recorded is None:
        return None
    counts = np.zeros(vocab_size, dtype=np.int64)
    for key, n in recorded.items():
        i = int(key)
        if not 0 <= i < vocab_size:
            raise ValueError(
                f"the manifest counts token id {i}, outside the vocabulary (size {vocab_size}); was it prepared with another tokenizer?"
            )
        counts[i] = n
    return counts
