"""Benchmark the loaders: shuffled batches from a shard folder, and the book's drop-in, all in one run.

    .venv/bin/python benchmarks/bench_loader.py            # 100 MB shard folder, 10 MB drop-in text
    .venv/bin/python benchmarks/bench_loader.py --quick    # 20 MB and 2 MB

1. ``tokembed.create_dataloader`` over a shard folder made by ``tokembed.prepare_corpus`` from
   ``benchmarks/corpus.py``'s offline corpus (git-ignored, under benchmarks/data/), shuffled, at
   (8 x 1024) and (64 x 256), stride = max_length, against
   (a) ``np.copyto`` of 256 MB of int64 (this machine's memory bandwidth), expressed in tokens/s at
       16 bytes per token (a batch is two int64 tensors, inputs and targets); the copy and tokembed are
       timed in turns, so that both meet the same moments of a shared machine;
   (b) nanoGPT's ``get_batch`` (a new ``np.memmap`` per call, one row slice per window, ``torch.stack``);
   (c) the book's ``GPTDatasetV1`` + ``DataLoader(shuffle=True)`` (its dataset built from enough of the
       corpus's text for the run).
   Every speed is measured after an untimed warm-up (for tokembed, one whole epoch, so that the
   process has mapped the shards' pages, as in any epoch of a training run after its first).
   Mixtures, at 8 x 1024, in turns in the same run: one folder, a ``tokembed.Mixture`` of three sources
   (hard links of the folder: 0.5 / 0.3 / 0.2), and a 3-phase ``tokembed.PhasedMixture`` of them whose two
   phase changes fall inside the timed batches (``--mixture-only``: just these, to results/loader-mixture.json);
   by wall-clock and by CPU time (``time.process_time``, which the other jobs of a shared machine disturb less).
   And at 8 x 1024, in turns in the same run: ``packing="best-fit"`` (by default the packed windows are written
   once to the cache and read as rows, and ``materialize=False`` gathers them from the shards) and
   ``output="rows"`` against plain windows; ``return_documents=True`` (document metadata) over sliding windows,
   materialized and gathered packing, each read as a consumer reads a batch: inputs and targets only, plus
   ``position_ids`` (torchtitan, Hugging Face), plus ``cu_seqlens`` and ``max_seqlen`` (flash-attention's varlen,
   Megatron), plus ``doc_lens`` (OLMo-core), every field (a loader's batch makes its metadata on first read); what materializing costs once (CPU seconds, in epochs of gathered packing); and the
   padding share of best-fit decreasing against first-fit on the corpus's documents at 256, 1024 and 4096
   tokens per window (``--documents-only``: just these, to results/loader-documents.json).
2. ``tokembed.create_dataloader_v1`` (the drop-in) against the book's code: construction time and peak
   memory at (256, 128) and (4, 4), iteration (whole epochs) at batch 8 x 4, on the chapter's story and on 10 MB of the
   corpus's text. Each text and setting runs in a fresh subprocess, ours first, then the book's. Peak
   memory is the peak resident set size during construction (``VmHWM``, reset through
   ``/proc/self/clear_refs`` before each) above the resident size just before it.

The machine may be shared: every speed is the best of ``--repeats`` and ratios are taken within this run.
Results go to benchmarks/results/loader.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RESULTS = HERE / "results"
STORY = ROOT.parent / "shared" / "corpora" / "the-verdict.txt"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))

SHAPES = [(8, 1024), (64, 256)]


def best_rate(run, repeats: int) -> float:
    """The best of ``repeats`` calls of ``run() -> (tokens, seconds)``, in tokens/s."""
    rates = []
    for _ in range(repeats):
        tokens, seconds = run()
        rates.append(tokens / seconds)
    return max(rates)


def corpus_text(path: Path, size_mb: float) -> str:
    """The first ``size_mb`` MB of the corpus's documents, joined by ``<|endoftext|>`` (GPT-2 style)."""
    docs, size = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            docs.append(text)
            size += len(text.encode("utf-8"))
            if size >= size_mb * 1e6:
                break
    return "<|endoftext|>".join(docs)


# ----------------------------------------------------------------------------------------------- 1. shards


def ensure_shards(size_mb: int) -> Path:
    import tokembed.shards.prepare
    from corpus import build_corpus

    corpus = DATA / f"corpus-{size_mb}mb.jsonl"
    if not corpus.exists():
        build_corpus(corpus, size_mb)
    out = DATA / f"loader-shards-{size_mb}mb"
    if not (out / "manifest.json").exists():
        tokembed.shards.prepare.prepare_corpus([corpus], out, workers=0, progress=False)
    return out


def warm(root: Path) -> None:
    for p in sorted((root / "train").glob("*.bin")):
        p.read_bytes()  # into the page cache: every method below reads from memory, none from disk


def copy_run(mb: int):
    """``run() -> (bytes, seconds)`` for one ``np.copyto`` of ``mb`` MiB of int64."""
    src = np.ones(mb * 2**20 // 8, dtype=np.int64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # touch the pages once

    def run():
        start = time.perf_counter()
        np.copyto(dst, src)
        return src.nbytes, time.perf_counter() - start

    return run


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def ours_run(root: Path, b: int, t: int, n_batches: int, *, reads: tuple[str, ...] = (), **options):
    """``run() -> (tokens, seconds)``: the first ``n_batches`` of a fresh iterator, after a warm-up epoch; the
    attributes ``reads`` of each batch (a `DocumentBatch`'s fields) are read as a consumer would."""
    import operator

    import tokembed

    stride = None if options.get("packing") else t
    loader = tokembed.create_dataloader(
        root, batch_size=b, max_length=t, stride=stride, shuffle=True, seed=0, **options
    )
    n = min(n_batches, len(loader))
    for _ in loader:  # one untimed epoch: this process maps the shards' pages, as after a training run's first epoch
        pass
    read = operator.attrgetter(*reads) if reads else None

    def run():
        it = iter(loader)
        start = time.perf_counter()
        if read is None:
            for _ in range(n):
                next(it)
        else:
            for _ in range(n):
                read(next(it))
        return n * b * t, time.perf_counter() - start

    return run


def nanogpt_rate(bin_path: Path, b: int, t: int, n_batches: int, repeats: int) -> float:
    import torch

    def get_batch():  # nanoGPT's train.py, CPU branch
        data = np.memmap(bin_path, dtype=np.uint16, mode="r")  # recreated every batch to avoid a memory leak
        ix = torch.randint(len(data) - t, (b,))
        x = torch.stack([torch.from_numpy((data[i : i + t]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + t]).astype(np.int64)) for i in ix])
        return x, y

    def run():
        start = time.perf_counter()
        for _ in range(n_batches):
            get_batch()
        return n_batches * b * t, time.perf_counter() - start

    run()  # warm-up, untimed

    return best_rate(run, repeats)


def book_rate(text: str, b: int, t: int, n_batches: int, repeats: int) -> tuple[float, int]:
    import torch
    from torch.utils.data import DataLoader

    import tokembed
    from book_reference import BookGPTDatasetV1

    ds = BookGPTDatasetV1(text, tokembed.get_tokenizer(), t, t)
    loader = DataLoader(ds, batch_size=b, shuffle=True, drop_last=True)
    n = min(n_batches, len(loader))

    def run():
        it = iter(loader)
        start = time.perf_counter()
        for _ in range(n):
            next(it)
        return n * b * t, time.perf_counter() - start

    torch.manual_seed(0)
    run()  # warm-up, untimed
    return best_rate(run, repeats), n


def bench_shards(args) -> dict:
    root = ensure_shards(args.shard_mb)
    warm(root)
    manifest = json.loads((root / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    first_bin = root / train["shards"][0]["tokens"]
    text = corpus_text(DATA / f"corpus-{args.shard_mb}mb.jsonl", args.book_mb)
    copy = copy_run(args.copy_mb)
    rows, copies = [], []
    for b, t in [*SHAPES, (8, 4)]:
        n = args.batches if b * t > 32 else args.batches * 20
        # The copy and tokembed take turns, so that both see the same moments of a shared machine.
        ours_one = ours_run(root, b, t, n)
        ours_rates, copy_rates = [], []
        for _ in range(args.repeats):
            nbytes, sec = copy()
            copy_rates.append(nbytes / sec)
            tokens, sec = ours_one()
            ours_rates.append(tokens / sec)
        ours, copy_bps = max(ours_rates), max(copy_rates)
        copies.append(copy_bps)
        copy_tps = copy_bps / 16  # tokens/s: inputs and targets, int64 each
        nano = nanogpt_rate(first_bin, b, t, min(n, 2000), args.repeats)
        book, book_n = book_rate(text, b, t, n, args.repeats)
        rows.append(
            {
                "shape": f"{b} x {t}",
                "ours_tok_s": ours,
                "copy_tok_s": copy_tps,
                "nanogpt_tok_s": nano,
                "book_tok_s": book,
                "book_batches": book_n,
                "vs_copy": ours / copy_tps,
                "vs_nanogpt": ours / nano,
                "vs_book": ours / book,
            }
        )
        print(f"  {b} x {t}: ours {ours / 1e6:.1f} M tok/s", file=sys.stderr)
    ours_8x1024 = rows[0]["ours_tok_s"]
    book_8x4 = rows[2]["book_tok_s"]
    return {
        "shard_folder": str(root.relative_to(ROOT)),
        "tokens": train["tokens"],
        "documents": train["documents"],
        "shards": len(train["shards"]),
        "copy_GB_s": max(copies) / 1e9,
        "rows": rows,
        "ours_8x1024_vs_book_8x4": ours_8x1024 / book_8x4,
    }


# ----------------------------------------------------------------------------------------------- 1b. mixture


def mixture_sources(root: Path) -> list[Path]:
    """Three sources: hard-linked copies of the shard folder (distinct folders, no extra disk, the same pages)."""
    out = []
    for i in range(3):
        dst = DATA / f"{root.name}-source{i}"
        if not (dst / "manifest.json").exists():
            shutil.copytree(root, dst, copy_function=os.link, dirs_exist_ok=True)
        out.append(dst)
    return out


def phased_mixture(paths: list[Path], b: int, t: int, n_batches: int):
    """A 3-phase schedule over the three sources whose two phase changes fall inside the timed batches (after
    `ours_run`'s warm-up epoch, which is the first phase's: its sources' windows // b steps), each a few windows
    into a step; the first source leaves in the third phase."""
    import tokembed

    weights = {paths[0]: 0.5, paths[1]: 0.3, paths[2]: 0.2}
    epoch = len(tokembed.SlidingWindowDataset(tokembed.Mixture(weights), max_length=t, stride=t)) // b * b  # windows
    n = min(n_batches, epoch // b)
    starts = [(epoch + k * n * b // 3 + 3) * t for k in (1, 2)]  # tokens
    return tokembed.PhasedMixture(
        [
            (0, weights),
            (starts[0], {paths[0]: 0.2, paths[1]: 0.5, paths[2]: 0.3}),
            (starts[1], {paths[1]: 0.4, paths[2]: 0.6}),
        ]
    )


def bench_mixture(args, root: Path) -> dict:
    """One folder, a `Mixture` of 3 sources (0.5/0.3/0.2) and a 3-phase `PhasedMixture` of them, 8 x 1024
    shuffled, timed in turns in one run, by wall-clock and by CPU time (`time.process_time`: what this process
    used, which the other jobs of a shared machine disturb far less)."""
    import tokembed

    b, t = 8, 1024
    paths = mixture_sources(root)
    mixture = tokembed.Mixture({paths[0]: 0.5, paths[1]: 0.3, paths[2]: 0.2})
    phased = phased_mixture(paths, b, t, args.batches)
    runs = {"one": ours_run(root, b, t, args.batches), "mix": ours_run(mixture, b, t, args.batches)}
    runs["phased"] = ours_run(phased, b, t, args.batches)
    rates: dict[str, list[float]] = {k + sfx: [] for k in runs for sfx in ("", "_cpu")}
    for _ in range(args.repeats):  # in turns, so that all meet the same moments of a shared machine
        for name, run in runs.items():
            cpu = time.process_time()
            tokens, sec = run()
            rates[name].append(tokens / sec)
            rates[name + "_cpu"].append(tokens / (time.process_time() - cpu))
    best = {k: max(v) for k, v in rates.items()}
    row = {"shape": f"{b} x {t}", "sources": 3, "weights": [0.5, 0.3, 0.2], "one_folder_tok_s": best["one"]}
    row.update(mixture_tok_s=best["mix"], vs_one_folder=best["mix"] / best["one"])
    row.update(one_folder_cpu_tok_s=best["one_cpu"], mixture_cpu_tok_s=best["mix_cpu"])
    row["cpu_vs_one_folder"] = best["mix_cpu"] / best["one_cpu"]
    row["phases"] = [{"start": ph.start, "weights": [float(w) for w in ph.weights]} for ph in phased.phases]
    row.update(phased_tok_s=best["phased"], phased_cpu_tok_s=best["phased_cpu"])
    row.update(
        phased_vs_mixture=best["phased"] / best["mix"], phased_cpu_vs_mixture=best["phased_cpu"] / best["mix_cpu"]
    )
    row["phased_cpu_vs_one_folder"] = best["phased_cpu"] / best["one_cpu"]
    print(
        f"  mixture {b} x {t}: {row['mixture_tok_s'] / 1e6:.1f} M tok/s, {row['vs_one_folder']:.2f}x one folder "
        f"({row['cpu_vs_one_folder']:.2f}x by CPU time); 3 phases: {row['phased_vs_mixture']:.2f}x the mixture "
        f"({row['phased_cpu_vs_mixture']:.2f}x by CPU time)",
        file=sys.stderr,
    )
    return row


DOCUMENT_MODES = {  # name -> create_dataloader options, against plain windows in the same run
    "plain windows": {},
    "packing best-fit (default: materialized)": {"packing": "best-fit"},
    "packing, gathered (materialize=False)": {"packing": "best-fit", "materialize": False},
    "rows (B, T+1)": {"output": "rows"},
}
# return_documents=True over these, read as each kind of consumer reads a DocumentBatch (a loader's batch makes
# position_ids, cu_seqlens and doc_lens on first read): every combination in the same run as plain windows.
DOCUMENT_LAYOUTS = {
    "sliding windows (the default)": {},
    "packing best-fit (default: materialized)": {"packing": "best-fit"},
    "packing, gathered (materialize=False)": {"packing": "best-fit", "materialize": False},
}
DOCUMENT_READS = {
    "inputs, targets": ("inputs", "targets"),
    "+ position_ids (torchtitan, HF)": ("inputs", "targets", "position_ids"),
    "+ cu_seqlens, max_seqlen (flash-attn varlen, Megatron)": ("inputs", "targets", "cu_seqlens", "max_seqlen"),
    "+ doc_lens (OLMo-core)": ("inputs", "targets", "doc_lens"),
    "every field": ("inputs", "targets", "position_ids", "cu_seqlens", "max_seqlen", "doc_lens"),
}


def materialize_cost(root: Path, t: int) -> dict:
    """What the default packing pays once per data (the packed windows written to an empty cache), in CPU seconds
    and in epochs of gathered packing."""
    import tempfile

    import tokembed
    from tokembed.data.packed import PackedWindows

    old = os.environ.get("TOKEMBED_CACHE_DIR")
    with tempfile.TemporaryDirectory(dir=DATA) as tmp:
        os.environ["TOKEMBED_CACHE_DIR"] = tmp
        try:
            PackedWindows(root, max_length=t, materialize=False)  # the plan, cached: not timed
            cpu = time.process_time()
            PackedWindows(root, max_length=t, materialize=True)
            write = time.process_time() - cpu
            loader = tokembed.create_dataloader(root, batch_size=8, max_length=t, packing="best-fit", materialize=False)
            cpu = time.process_time()
            for _ in loader:
                pass
            epoch = time.process_time() - cpu
        finally:
            if old is None:
                del os.environ["TOKEMBED_CACHE_DIR"]
            else:
                os.environ["TOKEMBED_CACHE_DIR"] = old
    print(f"  materializing: {write:.2f} CPU s once, {write / epoch:.1f} epochs of gathered packing", file=sys.stderr)
    return {"write_cpu_s": write, "gathered_epoch_cpu_s": epoch, "write_in_gathered_epochs": write / epoch}


def bench_documents(args, root: Path) -> dict:
    """8 x 1024 shuffled: document metadata and packing against plain windows, timed in turns; and the padding
    share of best-fit decreasing against first-fit on the corpus's documents (train split)."""
    from tokembed.data.packing import plan_packing
    from tokembed.shards.reader import open_shards

    b, t = 8, 1024
    runs = {(name, None): ours_run(root, b, t, args.batches, **opts) for name, opts in DOCUMENT_MODES.items()}
    for name, opts in DOCUMENT_LAYOUTS.items():
        for reads, fields in DOCUMENT_READS.items():
            runs[name, reads] = ours_run(root, b, t, args.batches, reads=fields, return_documents=True, **opts)
    rates: dict[tuple[str, str | None], list[float]] = {k: [] for k in runs}
    cpu_rates: dict[tuple[str, str | None], list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            cpu = time.process_time()
            tokens, sec = run()
            rates[name].append(tokens / sec)
            cpu_rates[name].append(tokens / (time.process_time() - cpu))
    base, base_cpu = max(rates["plain windows", None]), max(cpu_rates["plain windows", None])
    rows = [
        {"mode": k[0], "reads": k[1], "tok_s": max(v), "vs_plain": max(v) / base, "cpu_vs_plain": max(cpu_rates[k]) / base_cpu}
        for k, v in rates.items()
    ]  # fmt: skip
    ss = open_shards(root)
    padding = []
    for length in (256, 1024, 4096):
        plans = {
            k: plan_packing(ss.doc_starts(), ss.n_tokens, max_length=length, packer=k)
            for k in ("best-fit", "first-fit")
        }
        best, first = (plans[k].stats() for k in ("best-fit", "first-fit"))
        padding.append(
            {"max_length": length, "documents": best["documents"], "best_fit_share": best["padding_share"],
             "first_fit_share": first["padding_share"], "best_fit_windows": best["windows"],
             "first_fit_windows": first["windows"], "cut_documents": best["cut_documents"]}
        )  # fmt: skip
    for r in rows:
        print(
            f"  {r['mode']}{'' if r['reads'] is None else ', documents, reads ' + r['reads']}: {r['tok_s'] / 1e6:.1f} "
            f"M tok/s, {r['vs_plain']:.2f}x plain ({r['cpu_vs_plain']:.2f}x by CPU time)",
            file=sys.stderr,
        )
    return {
        "shape": f"{b} x {t}",
        "rows": rows,
        "padding": padding,
        "materialize": materialize_cost(root, t),
        "user_dataloader": user_dataloader(args, root),
    }


def user_dataloader(args, root: Path) -> dict:
    """A user's own ``DataLoader(SlidingWindowDataset, batch_size=8, shuffle=True)`` at 8 x 1024: torch's default
    collate (stacks B pairs) against ``collate_fn=tokembed.collate_windows`` (the batch gathered in one step)."""
    import torch
    from torch.utils.data import DataLoader

    import tokembed

    ds = tokembed.SlidingWindowDataset(root, max_length=1024)
    rates: dict[str, list[float]] = {"default collate": [], "collate_windows": []}
    for _ in range(args.repeats):
        for name, collate in (("default collate", None), ("collate_windows", tokembed.collate_windows)):
            torch.manual_seed(0)
            it = iter(DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate))
            next(it)
            cpu = time.process_time()
            for _ in range(args.batches):
                next(it)
            rates[name].append(args.batches / (time.process_time() - cpu))
    best = {k: max(v) for k, v in rates.items()}
    print(f"  user DataLoader 8 x 1024: {best['collate_windows']:.0f} batches/s with collate_windows, "
          f"{best['default collate']:.0f} with the default collate (CPU time)", file=sys.stderr)  # fmt: skip
    return {"batches_per_cpu_s": best, "speedup": best["collate_windows"] / best["default collate"]}


# ----------------------------------------------------------------------------------------------- 2. drop-in


def _reset_peak() -> None:
    # Linux >= 4.0: writing 5 to clear_refs resets the process's peak resident set size (VmHWM).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # bytes
    raise RuntimeError(f"{field} not in /proc/self/status")


def dropin_worker(text_path: str, max_length: int, stride: int, iterate: bool, repeats: int, max_batches: int) -> dict:
    """Run in a fresh process: ours then the book's, construction time, peak memory, iteration."""
    import gc

    import torch

    import tokembed
    from book_reference import book_create_dataloader_v1

    text = Path(text_path).read_text(encoding="utf-8")
    tokembed.get_tokenizer()  # load the vocabulary before measuring (both sides use it)
    small = len(text) < 100_000
    out = {}
    for name, make in (("ours", tokembed.create_dataloader_v1), ("book", book_create_dataloader_v1)):
        times = []
        loader = None
        while len(times) < repeats and (small or sum(times) < 15):  # the best of a few, while they are quick
            loader = None  # the previous one is freed before measuring the next
            gc.collect()
            base = _rss("VmRSS")
            _reset_peak()
            start = time.perf_counter()
            loader = make(text, batch_size=8, max_length=max_length, stride=stride)
            first = time.perf_counter() - start
            if not times:  # memory from the first construction (later ones reuse what it freed)
                out[f"{name}_peak_bytes"] = _rss("VmHWM") - base  # peak during construction, above the start
                out[f"{name}_held_bytes"] = _rss("VmRSS") - base  # what the loader keeps
            if small:  # milliseconds: time 20 more constructions together, for a clock-noise-free mean
                start = time.perf_counter()
                for _ in range(20):
                    loader = make(text, batch_size=8, max_length=max_length, stride=stride)
                first = (time.perf_counter() - start) / 20
            times.append(first)
        out[f"{name}_construct_s"] = min(times)
        if iterate:
            rates = []
            epochs = max(1, max_batches // len(loader))  # whole epochs: each pays its shuffle once
            for _ in range(repeats):
                torch.manual_seed(0)
                start, n = time.perf_counter(), 0
                for _ in range(epochs):
                    for _batch in loader:
                        n += 1
                rates.append(n * 8 * max_length / (time.perf_counter() - start))
            out[f"{name}_tok_s"] = max(rates)
        del loader
        gc.collect()
    return out


def bench_dropin(args) -> list[dict]:
    big = DATA / f"loader-text-{args.dropin_mb}mb.txt"
    if not big.exists():
        big.write_text(corpus_text(DATA / f"corpus-{args.shard_mb}mb.jsonl", args.dropin_mb), encoding="utf-8")
    rows = []
    for label, path in (("the-verdict.txt", STORY), (f"{args.dropin_mb} MB corpus text", big)):
        for max_length, stride in ((256, 128), (4, 4)):
            iterate = (max_length, stride) == (4, 4)
            cmd = [
                sys.executable,
                __file__,
                "--dropin-worker",
                str(path),
                str(max_length),
                str(stride),
                str(int(iterate)),
                str(args.repeats),
                str(args.dropin_batches),
            ]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            row = {
                "text": label,
                "max_length": max_length,
                "stride": stride,
                **res,
                "construct_speedup": res["book_construct_s"] / res["ours_construct_s"],
                "memory_ratio": res["ours_peak_bytes"] / max(res["book_peak_bytes"], 1),
            }
            if iterate:
                row["iter_speedup"] = res["ours_tok_s"] / res["book_tok_s"]
            rows.append(row)
            print(
                f"  drop-in {label} {max_length}/{stride}: {row['construct_speedup']:.1f}x construction",
                file=sys.stderr,
            )
    return rows


# ----------------------------------------------------------------------------------------------- report


def report(res: dict) -> str:
    s = res["shards"]
    lines = [
        f"### Shuffled batches from a shard folder ({s['tokens']:,} tokens, {s['shards']} shards; copy {s['copy_GB_s']:.1f} GB/s)",
        "",
        "| batch x length | tokembed (M tok/s) | np.copyto limit | nanoGPT get_batch | book DataLoader | vs copy | vs nanoGPT | vs book |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in s["rows"]:
        lines.append(
            f"| {r['shape']} | {r['ours_tok_s'] / 1e6:.1f} | {r['copy_tok_s'] / 1e6:.0f} | {r['nanogpt_tok_s'] / 1e6:.1f} | "
            f"{r['book_tok_s'] / 1e6:.2f} | {r['vs_copy']:.2f}x | {r['vs_nanogpt']:.1f}x | {r['vs_book']:.1f}x |"
        )
    lines += ["", f"tokembed at 8 x 1024 vs the book at 8 x 4: {s['ours_8x1024_vs_book_8x4']:.0f}x", ""]
    m = res.get("mixture")
    if m:
        lines += [
            "### One folder, a mixture of 3 sources (0.5 / 0.3 / 0.2), and a 3-phase schedule of them, shuffled, the same run",
            "",
            "| batch x length | one folder (M tok/s) | mixture (M tok/s) | 3 phases (M tok/s) | mixture / one folder "
            "| 3 phases / mixture | by CPU time: mixture / one folder | 3 phases / mixture |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            f"| {m['shape']} | {m['one_folder_tok_s'] / 1e6:.1f} | {m['mixture_tok_s'] / 1e6:.1f} | "
            f"{m['phased_tok_s'] / 1e6:.1f} | {m['vs_one_folder']:.2f}x | {m['phased_vs_mixture']:.2f}x | "
            f"{m['cpu_vs_one_folder']:.2f}x | {m['phased_cpu_vs_mixture']:.2f}x |",
            "",
        ]
    lines += report_documents(res.get("documents"))
    lines += [
        "### The drop-in `create_dataloader_v1` vs the book's code (same process, ours first)",
        "",
        "| text | max_length / stride | construction ours / book (s) | speedup | peak memory ours / book (MB) | ratio | iteration 8 x 4 ours / book (M tok/s) | speedup |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["dropin"]:
        it = (
            f"{r['ours_tok_s'] / 1e6:.2f} / {r['book_tok_s'] / 1e6:.2f} | {r['iter_speedup']:.1f}x"
            if "iter_speedup" in r
            else "- | -"
        )
        if r["book_peak_bytes"] < 1e6:  # a few pages: below what RSS can resolve
            mem = f"{r['ours_peak_bytes'] / 1e6:.2f} / {r['book_peak_bytes'] / 1e6:.2f} | (too small to compare)"
        else:
            mem = f"{r['ours_peak_bytes'] / 1e6:.1f} / {r['book_peak_bytes'] / 1e6:.1f} | 1/{r['book_peak_bytes'] / max(r['ours_peak_bytes'], 1):.0f}"
        lines.append(
            f"| {r['text']} | {r['max_length']} / {r['stride']} | {r['ours_construct_s']:.3f} / {r['book_construct_s']:.3f} | "
            f"{r['construct_speedup']:.1f}x | {mem} | {it} |"
        )
    return "\n".join(lines)


def report_documents(d: dict | None) -> list[str]:
    if not d:
        return []
    lines = [
        f"### Document metadata and packing vs plain windows ({d['shape']}, shuffled, the same run)",
        "",
        "| mode | M tok/s | vs plain windows | by CPU time |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r['mode']} | {r['tok_s'] / 1e6:.1f} | {r['vs_plain']:.2f}x | {r['cpu_vs_plain']:.2f}x |"
        for r in d["rows"]
        if r.get("reads") is None
    ]
    docs = [r for r in d["rows"] if r.get("reads") is not None]
    if docs:
        reads = list(dict.fromkeys(r["reads"] for r in docs))
        lines += [
            "",
            "`return_documents=True`, by CPU time against plain windows (wall clock in the JSON), as each consumer reads:",
            "",
            "| windows | " + " | ".join(reads) + " |",
            "|---|" + "---:|" * len(reads),
        ]
        for mode in dict.fromkeys(r["mode"] for r in docs):
            ratio = {r["reads"]: r["cpu_vs_plain"] for r in docs if r["mode"] == mode}
            lines.append(f"| {mode} | " + " | ".join(f"{ratio[k]:.2f}x" for k in reads) + " |")
    lines += [
        "",
        "| max_length | documents | padding best-fit | padding first-fit | windows best / first |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['max_length']} | {r['documents']:,} | {100 * r['best_fit_share']:.2f}% | {100 * r['first_fit_share']:.2f}% | "
        f"{r['best_fit_windows']:,} / {r['first_fit_windows']:,} |"
        for r in d["padding"]
    ]
    m = d.get("materialize")
    if m:
        lines += [
            "",
            f"Materializing the packed windows (once per data, `max_length` and packer; kept in the cache): "
            f"{m['write_cpu_s']:.2f} CPU s, {m['write_in_gathered_epochs']:.1f} epochs of gathered packing.",
        ]
    u = d.get("user_dataloader")
    if u:
        r = u["batches_per_cpu_s"]
        lines += [
            "",
            f"A user's own DataLoader (8 x 1024, shuffled): {r['collate_windows']:,.0f} batches per CPU second with "
            f"`collate_fn=tokembed.collate_windows`, {r['default collate']:,.0f} with torch's default collate "
            f"({u['speedup']:.1f}x).",
        ]
    return [*lines, ""]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--dropin-worker":
        path, max_length, stride, iterate, repeats, max_batches = sys.argv[2:8]
        print(
            json.dumps(
                dropin_worker(path, int(max_length), int(stride), bool(int(iterate)), int(repeats), int(max_batches))
            )
        )
        return
    os.environ.setdefault("TOKEMBED_CACHE_DIR", str(DATA / "cache"))  # packing plans and materialized windows
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller corpus and fewer batches")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batches", type=int, default=None, help="timed batches per repeat (default 600; 200 with --quick)")
    p.add_argument(
        "--mixture-only",
        action="store_true",
        help="only the row of one folder, a mixture and a 3-phase schedule (results/loader-mixture.json)",
    )
    p.add_argument(
        "--documents-only",
        action="store_true",
        help="only metadata, packing and padding (results/loader-documents.json)",
    )
    args = p.parse_args()
    args.shard_mb, args.book_mb, args.dropin_mb = (20, 6, 2) if args.quick else (100, 16, 10)
    args.copy_mb = 64 if args.quick else 256
    args.batches = args.batches or (200 if args.quick else 600)
    args.dropin_batches = 5000 if args.quick else 20000  # at least this many batches of whole epochs
    DATA.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = {
        "command": " ".join([".venv/bin/python benchmarks/bench_loader.py", *sys.argv[1:]]),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }
    if args.documents_only:
        root = ensure_shards(args.shard_mb)
        warm(root)
        res["documents"] = bench_documents(args, root)
        print("\n".join(report_documents(res["documents"])))
        (RESULTS / "loader-documents.json").write_text(json.dumps(res, indent=1) + "\n")
        return
    if args.mixture_only:
        root = ensure_shards(args.shard_mb)
        warm(root)
        res["mixture"] = bench_mixture(args, root)
        print(json.dumps(res["mixture"], indent=1))
        (RESULTS / "loader-mixture.json").write_text(json.dumps(res, indent=1) + "\n")
        return
    res["shards"] = bench_shards(args)
    res["mixture"] = bench_mixture(args, DATA / f"loader-shards-{args.shard_mb}mb")
    res["documents"] = bench_documents(args, DATA / f"loader-shards-{args.shard_mb}mb")
    res["dropin"] = bench_dropin(args)
    res["seconds"] = time.time() - t0
    table = report(res)
    print(table)
    tmp = RESULTS / "loader.json.tmp"
    tmp.write_text(json.dumps(res, indent=1) + "\n")
    os.replace(tmp, RESULTS / "loader.json")


if __name__ == "__main__":
    main()
