"""`tokembed stats`: what a shard folder holds and what a loader will make of it."""

from __future__ import annotations

import os
from typing import Any

from tokembed._checks import check_int, check_positive_int
from tokembed.data.plan import plan
from tokembed.shards import megatron
from tokembed.shards.format import read_manifest

__all__ = ["mixture_stats", "shard_stats"]


def shard_stats(
    root: str | os.PathLike,
    *,
    max_length: int | None = 256,
    stride: int | None = None,
    batch_size: int = 8,
    drop_last: bool = True,
    packing: str | None = None,
) -> dict[str, Any]:
    """Counts of a shard folder, per split and per input file, and the window plan of each split.

    Args:
        root: the shard folder, or a Megatron prefix (one split, "train"; no inputs; its tokenizer is the one
            tokembed's export recorded, else None).
        max_length, stride, batch_size, drop_last: the loader settings to plan for (``stride`` defaults to
            ``max_length``); ``max_length=None`` leaves the plan out.
        packing: also pack each split's documents into windows of ``max_length`` with this packer
            (``"best-fit"``, see `tokembed.data.packing`) and report ``"packing"``: windows, pieces, cut
            documents, padding tokens and the padding share.

    Returns:
        ``{"splits": {split: {"documents", "tokens", "shards", "plan"}}, "inputs": [{"path", "documents",
        "tokens", "chars", "text_bytes", "tokens_per_char", "tokens_per_byte", ...}], "dtype", "tokenizer"}``.
        Token counts per input exclude the ``<|endoftext|>`` separators; split totals include them.
    """
    if megatron.is_megatron_prefix(root):
        manifest = _megatron_manifest(root)
    else:
        manifest = read_manifest(root)
    out: dict[str, Any] = {
        "root": str(root),
        "format": "megatron" if megatron.is_megatron_prefix(root) else "tokembed-shards",
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
        if packing is not None:
            entry["packing"] = _packing_stats(root, name, max_length=max_length, packing=packing)
        out["splits"][name] = entry
    for f in manifest.get("inputs", []):
        row = dict(f)
        row["tokens_per_char"] = f["tokens"] / f["chars"] if f.get("chars") else None
        row["tokens_per_byte"] = f["tokens"] / f["text_bytes"] if f.get("text_bytes") else None
        out["inputs"].append(row)
    return out


def _packing_stats(root, split: str, *, max_length: int | None, packing: str) -> dict[str, Any]:
    """What packing split ``split`` into windows of ``max_length`` gives (`PackingPlan.stats`)."""
    from tokembed.data.packing import check_packer, plan_packing
    from tokembed.shards.reader import open_shards

    check_packer(packing)
    if max_length is None:
        raise ValueError(f"packing={packing!r} packs into windows of max_length tokens; give max_length")
    ss = open_shards(root, split=split)
    return plan_packing(ss.doc_starts(), ss.n_tokens, max_length=max_length, packer=packing).stats()


def _megatron_manifest(prefix: str | os.PathLike) -> dict[str, Any]:
    """A Megatron dataset's counts in a manifest's shape: one split ("train"), one shard, no inputs."""
    from tokembed.shards.reader import open_megatron

    ss = open_megatron(prefix)
    split = {"documents": ss.n_documents, "tokens": ss.n_tokens, "shards": [s.to_dict() for s in ss.shards]}
    return {"tokenizer": ss.manifest["tokenizer"], "dtype": ss.dtype.name, "splits": {"train": split}, "inputs": []}


def mixture_stats(
    mixture,
    *,
    steps: int | None = None,
    global_batch_size: int = 8,
    max_length: int = 256,
    stride: int | None = None,
    split: str = "train",
) -> dict[str, Any]:
    """What a run of ``steps`` global batches reads of each source of a `tokembed.Mixture` (torch-free).

    The counts follow the loader's arithmetic: the run reads slots ``[0, steps * global_batch_size)``
    of the mixture's global order, and source ``i`` gives ``schedule.counts(slots)[i]`` of them.

    Args:
        mixture: the `Mixture`.
        steps: optimizer steps (global batches); default one nominal epoch (the sources' windows // G).
        global_batch_size: windows per step over all ranks (``G``).
        max_length, stride: the window options (``stride`` defaults to ``max_length``), as the loader's.
        split: the sources' split.

    Returns:
        ``{"steps", "global_batch_size", "windows_read", "sources": [{"path", "weight", "tokens",
        "windows", "windows_read", "epochs"}]}``; ``epochs`` is windows read / windows (a float).
    """
    from tokembed.shards.reader import open_shards

    g = check_positive_int("global_batch_size", global_batch_size)
    stride = max_length if stride is None else stride
    tokens = [open_shards(p, split=split).n_tokens for p in mixture.paths]
    windows = [plan(n, max_length=max_length, stride=stride, batch_size=1).windows for n in tokens]
    if steps is None:
        steps = max(1, sum(windows) // g)
    slots = check_int("steps", steps, min=0) * g
    read = mixture.schedule.counts(slots).tolist()
    rows = [
        {
            "path": str(p),
            "weight": float(w),
            "tokens": n,
            "windows": k,
            "windows_read": r,
            "epochs": r / k if k else None,
        }
        for p, w, n, k, r in zip(mixture.paths, mixture.weights, tokens, windows, read)
    ]
    return {"steps": steps, "global_batch_size": g, "windows_read": slots, "sources": rows}
