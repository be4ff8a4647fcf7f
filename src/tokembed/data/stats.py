"""`tokembed stats`: what a shard folder holds and what a loader will make of it."""

from __future__ import annotations

import os
from typing import Any

from tokembed._checks import check_int, check_positive_int
from tokembed.data.plan import plan
from tokembed.shards import megatron
from tokembed.shards.format import read_manifest
from tokembed.storage.urls import as_url, is_url, local_path_of, public_url

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
    if is_url(root) and local_path_of(root) is None:  # a remote folder: its manifest says everything shown here
        from tokembed.shards.remote import read_remote_manifest

        manifest = read_remote_manifest(as_url(root))
    elif megatron.is_megatron_prefix(root):
        manifest = _megatron_manifest(root)
    else:
        manifest = read_manifest(local_path_of(root) or root)
    out: dict[str, Any] = {
        "root": public_url(as_url(root)) if is_url(root) else str(root),
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
    """What packing split ``split`` of shard folder ``root`` into windows of ``max_length`` gives
    (`PackingPlan.stats`)."""
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
    packing: str | None = None,
) -> dict[str, Any]:
    """What a run of ``steps`` global batches reads of each source of a `tokembed.Mixture` or
    `tokembed.PhasedMixture`, per phase and per source (torch-free).

    The counts follow the loader's arithmetic: the run reads slots ``[0, steps * global_batch_size)`` of the
    mixture's global order (`Mixture.slot_schedule`), a source's draw ``j`` being window ``j mod n`` of its
    epoch ``j div n``. A source *runs out* at the step that reads the last window of one of its epochs and
    *restarts* at the step that reads its next window (in a fresh order), which a later phase may postpone.

    Args:
        mixture: the `Mixture` or `PhasedMixture`.
        steps: optimizer steps (global batches); default one nominal epoch (the first phase's sources' windows
            // G) after the last phase starts.
        global_batch_size: windows per step over all ranks (``G``).
        max_length, stride: the window options (``stride`` defaults to ``max_length``), as the loader's.
        split: the sources' split.
        packing: count each source's packed windows (this packer of `tokembed.data.packing.PACKERS`, as the loader's
            ``packing=``) instead of its sliding windows; ``tokens_read`` then counts window slots, padding included.

    Returns:
        ``{"steps", "global_batch_size", "max_length", "windows_read", "sources": [{"path", "weight", "tokens",
        "windows", "windows_read", "tokens_read", "epochs", "epochs_completed", "runs_out"}], "phases": [{"number",
        "name", "start", "first_window", "first_step", "mid_step", "windows_read", "sources": [{"path", "weight",
        "windows_read", "tokens_read", "epochs_from", "epochs_to", "runs_out"}]}]}``. ``weight`` is a Mixture's
        weight (None for a phased mixture's source row); ``epochs`` are windows read / windows (floats);
        ``runs_out`` lists ``{"epoch", "window", "step", "restarts_at_step"}``: the window (slot) and step that
        read the epoch's last window, and the step of the source's next window (None: not within the run); at
        most 100 per source.

    Raises:
        ValueError: a phase that starts at or after the run's end.
    """
    from tokembed.data.phases import check_end
    from tokembed.data.schedule import first_slot
    from tokembed.shards.reader import open_shards

    g = check_positive_int("global_batch_size", global_batch_size)
    max_length = check_positive_int("max_length", max_length)
    if packing is not None and stride is not None:
        raise ValueError(
            f"stride={stride} does not apply to packed windows (each holds whole documents from its first slot); "
            "leave it out"
        )
    stride = max_length if stride is None else stride
    tokens = [open_shards(p, split=split).n_tokens for p in mixture.paths]
    if packing is None:
        windows = [plan(n, max_length=max_length, stride=stride, batch_size=1).windows for n in tokens]
    else:  # the packed windows the loader's packing= reads
        windows = [_packing_stats(p, split, max_length=max_length, packing=packing)["windows"] for p in mixture.paths]
    schedule = mixture.slot_schedule(max_length=max_length)
    firsts = [first_slot(ph.start, max_length) for ph in mixture.phases]
    if steps is None:
        nominal = sum(windows[i] for i in mixture.epoch_sources) // g
        steps = -(-firsts[-1] // g) + max(1, nominal)
    slots = check_int("steps", steps, min=0) * g
    what, fix = f"{steps:,} steps x {g} windows", "raise --steps (steps=), or start it earlier"
    check_end(mixture.phases, windows=slots, max_length=max_length, what=what, fix=fix)
    runs_out = [_runs_out(schedule, i, n, slots, g) for i, n in enumerate(windows)]
    read = schedule.counts(slots).tolist()
    single = len(mixture.phases) == 1
    rows = [
        {
            "path": str(p),
            "weight": float(mixture.phases[0].weights[i]) if single else None,
            "tokens": n,
            "windows": k,
            "windows_read": r,
            "tokens_read": r * max_length,
            "epochs": r / k if k else None,
            "epochs_completed": r // k if k else None,
            "runs_out": runs_out[i],
        }
        for i, (p, n, k, r) in enumerate(zip(mixture.paths, tokens, windows, read))
    ]
    phases = _phase_rows(mixture, schedule, firsts, windows, runs_out, slots=slots, g=g, max_length=max_length)
    return {
        "steps": steps,
        "global_batch_size": g,
        "max_length": max_length,
        "windows_read": slots,
        "sources": rows,
        "phases": phases,
    }


_RUNS_OUT_LISTED = 100  # epochs listed per source


def _runs_out(schedule, source: int, n: int, slots: int, g: int) -> list[dict[str, Any]]:
    """``{"epoch", "step", "restarts_at_step"}`` of each epoch of ``source`` that ends within ``slots`` slots."""
    done = int(schedule.counts(slots)[source]) // n if n else 0
    out = []
    for e in range(min(done, _RUNS_OUT_LISTED)):
        last = schedule.slot_of_draw(source, (e + 1) * n - 1)
        nxt = schedule.slot_of_draw(source, (e + 1) * n)
        again = nxt // g if nxt is not None and nxt < slots else None
        out.append({"epoch": e, "window": last, "step": last // g, "restarts_at_step": again})
    return out


def _phase_rows(mixture, schedule, firsts, windows, runs_out, *, slots: int, g: int, max_length: int) -> list[dict]:
    """Per phase: where it starts (token, window, step) and what each of its sources reads in it."""
    out = []
    ends = [*firsts[1:], slots]
    for ph, lo, hi in zip(mixture.phases, firsts, ends):
        hi = min(hi, slots)
        before, after = schedule.counts(lo), schedule.counts(hi)
        rows = [
            {
                "path": str(mixture.paths[i]),
                "weight": float(ph.weights[i]),
                "windows_read": int(after[i] - before[i]),
                "tokens_read": int(after[i] - before[i]) * max_length,
                "epochs_from": int(before[i]) / windows[i] if windows[i] else None,
                "epochs_to": int(after[i]) / windows[i] if windows[i] else None,
                "runs_out": [r for r in runs_out[i] if lo <= r["window"] < hi],
            }
            for i in range(len(mixture.paths))
            if ph.weights[i] or after[i] != before[i]
        ]
        out.append(
            {
                "number": ph.number,
                "name": ph.name,
                "start": ph.start,
                "first_window": lo,
                "first_step": lo // g,
                "mid_step": lo % g != 0,
                "windows_read": hi - lo,
                "sources": rows,
            }
        )
    return out
