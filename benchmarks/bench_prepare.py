"""Benchmark `tokembed prepare`: throughput at 1 and 2 workers, peak memory at 100 MB and 1 GB of input
(many documents, and one single text document), and the book's `create_dataloader_v1` construction on the
same corpus, all measured in one run.

    .venv/bin/python benchmarks/bench_prepare.py            # 100 MB and 1 GB (a few minutes)
    .venv/bin/python benchmarks/bench_prepare.py --quick    # 20 MB and 200 MB
    .venv/bin/python benchmarks/bench_prepare.py --parquet [--quick]   # Parquet against the same JSON Lines

``--parquet`` measures the same documents as JSON Lines and as Parquet (pyarrow, the `text` column, row groups
of 1,000 rows as `datasets` and datatrove write them; and row groups of a whole 100 MB copy, as
``pyarrow.parquet.write_table`` writes a table, larger than a shard, which the planner reads and cuts): tokens/s
at 1 and 2 workers on the base size, and peak memory of the base size and of one file 10x that size.

Corpora are built offline by benchmarks/corpus.py under benchmarks/data/ (git-ignored): a JSON Lines corpus of
/usr/share/doc texts and Python docstrings, a 10x larger input made of line-shuffled copies of it, and the same
texts as one plain-text file (one document) of the base size and of 10x that size.

Every measured run is a fresh subprocess. Memory is the peak, over 20 Hz samples, of the summed PSS of the
process and all its children (PSS splits shared pages between processes, so forked workers are not counted
twice); time is wall-clock. The machine may be shared: runs of the compared configurations are interleaved
and the best of ``--repeats`` is kept, and ratios are taken within this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))

from corpus import build_corpus  # noqa: E402

# ----------------------------------------------------------------------------------------------- memory sampling


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_measured(cmd: list[str], *, env: dict | None = None) -> dict:
    """Run ``cmd``; return wall seconds, peak summed PSS (MB) of its process tree, and CPU seconds."""
    peak = 0
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            tree, frontier = [], [proc.pid]
            while frontier:
                p = frontier.pop()
                tree.append(p)
                frontier += _children(p)
            peak = max(peak, sum(_pss_kb(p) for p in tree))
            time.sleep(0.05)

    t0 = time.perf_counter()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    before = os.times()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = os.times()
    done.set()
    th.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"seconds": wall, "peak_mb": peak / 1024, "cpu_seconds": cpu, "stdout": out, "stderr": err}


# ----------------------------------------------------------------------------------------------- data


def corpus_file(size_mb: int) -> Path:
    path = DATA / f"corpus-{size_mb}mb.jsonl"
    if not path.exists():
        print(f"building {path} (once; offline sources) ...", file=sys.stderr)
        build_corpus(path, size_mb)
    return path


def big_input(base: Path, copies: int) -> Path:
    """A folder of ``copies`` line-shuffled copies of ``base`` (about ``copies`` x its size)."""
    folder = DATA / f"{base.stem}-x{copies}"
    marker = folder / ".complete"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lines = base.read_bytes().splitlines(keepends=True)
    for k in range(copies):
        random.Random(k).shuffle(lines)
        with open(folder / f"part-{k:03d}.jsonl", "wb", buffering=1 << 22) as f:
            f.writelines(lines)
    marker.write_text("ok\n")
    return folder


def huge_text(size_mb: int, copies: int) -> tuple[Path, Path]:
    """One plain-text document of ``size_mb`` MB, and one of ``copies`` times that (a single file each)."""
    base = DATA / f"corpus-{size_mb}mb.txt"
    if not base.exists():
        print(f"building {base} (once; offline sources) ...", file=sys.stderr)
        build_corpus(base, size_mb)
    big = DATA / f"corpus-{size_mb}mb-x{copies}.txt"
    if not big.exists():
        tmp = big.with_suffix(".tmp")
        with open(base, "rb") as src, open(tmp, "wb") as f:
            for _ in range(copies):
                src.seek(0)
                shutil.copyfileobj(src, f, 1 << 24)
        os.replace(tmp, big)
    return base, big


# ----------------------------------------------------------------------------------------------- runs

BOOK = r"""
import json, sys, time, torch
from torch.utils.data import DataLoader, Dataset
import tokembed

class GPTDatasetV1(Dataset):  # the book's construction (chapter 2), verbatim but for the offline tokenizer
    def __init__(self, txt, tokenizer, max_length, stride):
        self.input_ids = []
        self.target_ids = []
        token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})
        for i in range(0, len(token_ids) - max_length, stride):
            input_chunk = token_ids[i:i + max_length]
            target_chunk = token_ids[i + 1: i + max_length + 1]
            self.input_ids.append(torch.tensor(input_chunk))
            self.target_ids.append(torch.tensor(target_chunk))
    def __len__(self): return len(self.input_ids)
    def __getitem__(self, idx): return self.input_ids[idx], self.target_ids[idx]

def create_dataloader_v1(txt, batch_size=4, max_length=256, stride=128, shuffle=True, drop_last=True, num_workers=0):
    tokenizer = tokembed.get_tokenizer("gpt2")
    dataset = GPTDatasetV1(txt, tokenizer, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers)

# The same documents as `prepare`, joined by <|endoftext|> the way the book would feed them.
with open(sys.argv[1], encoding="utf-8") as f:
    txt = "<|endoftext|>".join(json.loads(line)["text"] for line in f)
tokembed.get_tokenizer("gpt2")
t0 = time.perf_counter()
loader = create_dataloader_v1(txt, batch_size=8, max_length=256, stride=256)
print(json.dumps({"construct_seconds": time.perf_counter() - t0, "windows": len(loader.dataset), "batches": len(loader)}))
"""


PREPARE = r"""
import json, sys, time
from tokembed.shards.prepare import prepare_corpus
t0 = time.perf_counter()
r = prepare_corpus([sys.argv[1]], sys.argv[2], workers=int(sys.argv[3]), progress=False)
print(json.dumps({"prepare_seconds": time.perf_counter() - t0}))
"""


THREADS = r"""
import json, sys, time
import tokembed
enc = tokembed.get_tokenizer("gpt2")
with open(sys.argv[1], encoding="utf-8") as f:
    docs = [json.loads(line)["text"] for line in f]
out = {}
for rep in range(int(sys.argv[2])):
    for n in (1, 2):
        t0 = time.perf_counter()
        tokens = sum(map(len, enc.encode_ordinary_batch(docs, num_threads=n)))
        out[n] = max(out.get(n, 0), tokens / (time.perf_counter() - t0))
print(json.dumps({"threads_1_tokens_per_s": out[1], "threads_2_tokens_per_s": out[2]}))
"""


CEILING = r"""
import json, multiprocessing as mp, sys, time
import tokembed
enc = tokembed.get_tokenizer("gpt2")
with open(sys.argv[1], encoding="utf-8") as f:
    docs = [json.loads(line)["text"] for line in f][: int(sys.argv[2])]

def work(k, n):
    for d in docs[k::n]:
        enc.encode_ordinary(d)

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    out = {}
    for n in (1, 2):  # the same documents in n plain processes: no I/O, no pickling, nothing shared
        ps = [ctx.Process(target=work, args=(k, n)) for k in range(n)]
        t0 = time.perf_counter()
        for p in ps: p.start()
        for p in ps: p.join()
        out[n] = time.perf_counter() - t0
    print(json.dumps({"seconds_1": out[1], "seconds_2": out[2], "speedup": out[1] / out[2]}))
"""


def ceiling(base: Path, n_docs: int = 8000) -> dict:
    """The speedup 2 processes get right now on this machine for pure tokenizing: the ceiling for prepare."""
    r = run_measured([sys.executable, "-c", CEILING, str(base), str(n_docs)])
    return json.loads(r["stdout"])


def prepare(inp: Path, out: Path, workers: int) -> dict:
    """`prepare_corpus` in a fresh process. tokens/s is over the call itself (the same library call that
    `tokembed prepare` makes), without the interpreter's start and `import tokembed` (torch), which
    cost several seconds on a loaded machine and are the same for every configuration."""
    shutil.rmtree(out, ignore_errors=True)
    r = run_measured([sys.executable, "-c", PREPARE, str(inp), str(out), str(workers)])
    r.update(json.loads(r.pop("stdout")))
    m = json.loads((out / "manifest.json").read_text())
    r["tokens"] = sum(s["tokens"] for s in m["splits"].values())
    r["input_mb"] = sum(f["bytes"] for f in m["inputs"]) / 1e6
    r["shards"] = sum(len(s["shards"]) for s in m["splits"].values())
    r["tokens_per_s"] = r["tokens"] / r["prepare_seconds"]
    del r["stderr"]
    shutil.rmtree(out, ignore_errors=True)
    return r


def parquet_file(base: Path, copies: int, rows_per_group: int | None) -> Path:
    """``base``'s documents as one Parquet file: ``copies`` line-shuffled copies, one ``write_table`` per copy,
    in row groups of ``rows_per_group`` rows (None: one row group per copy)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    layout = f"rg{rows_per_group}" if rows_per_group else "rgcopy"
    path = DATA / f"{base.stem}-x{copies}-{layout}.parquet"
    if path.exists():
        return path
    lines = base.read_bytes().splitlines()
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, pa.schema([("text", pa.string())])) as w:
        for k in range(copies):
            if k:
                random.Random(k).shuffle(lines)  # the same order as big_input's copies
            table = pa.table({"text": [json.loads(line)["text"] for line in lines]})
            w.write_table(table, row_group_size=rows_per_group or len(lines))
    os.replace(tmp, path)
    return path


def parquet_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    """JSON Lines against Parquet (two row-group layouts), the same documents, in one run."""
    size = 20 if args.quick else 100
    load0 = os.getloadavg()[0]
    base = corpus_file(size)
    inputs = {
        "jsonl": base,
        "parquet": parquet_file(base, 1, 1000),
        "parquet-large-groups": parquet_file(base, 1, None),
    }
    bigs = {
        "jsonl": big_input(base, 10),
        "parquet": parquet_file(base, 10, 1000),
        "parquet-large-groups": parquet_file(base, 10, None),
    }
    work = DATA / "bench-out"
    print(f"inputs: {', '.join(str(p) for p in (*inputs.values(), *bigs.values()))}; load {load0:.1f}", file=sys.stderr)
    runs: dict[str, list[dict]] = {f"{k}-w{w}": [] for k in inputs for w in (1, 2)}
    for rep in range(args.repeats):  # interleaved, so drift on a shared machine hits every configuration
        for k, inp in inputs.items():
            for w in (1, 2):
                r = prepare(inp, work, w)
                runs[f"{k}-w{w}"].append(r)
                print(
                    f"  {k} {size} MB, {w} worker(s), run {rep + 1}: {r['tokens_per_s']:,.0f} tokens/s, peak {r['peak_mb']:.0f} MB",
                    file=sys.stderr,
                )
    best = {k: min(v, key=lambda r: r["prepare_seconds"]) for k, v in runs.items()}
    big = {k: prepare(inp, work, 2) for k, inp in bigs.items()}
    for k, r in big.items():
        print(
            f"  {k} {r['input_mb']:.0f} MB, 2 workers: {r['tokens_per_s']:,.0f} tokens/s, peak {r['peak_mb']:.0f} MB",
            file=sys.stderr,
        )
    lines = [
        "| input | format | tokens/s, 1 worker | tokens/s, 2 workers | peak MB, 2 workers | peak MB, 10x input | peak 10x / 1x |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for k in inputs:
        b1, b2, r = best[f"{k}-w1"], best[f"{k}-w2"], big[k]
        lines.append(
            f"| {b1['input_mb']:.0f} MB / {r['input_mb']:.0f} MB | {k} | {b1['tokens_per_s']:,.0f} | {b2['tokens_per_s']:,.0f} "
            f"| {b2['peak_mb']:.0f} | {r['peak_mb']:.0f} | {r['peak_mb'] / b2['peak_mb']:.2f}x |"
        )
    j1, j2 = best["jsonl-w1"]["tokens_per_s"], best["jsonl-w2"]["tokens_per_s"]
    for k in ("parquet", "parquet-large-groups"):
        lines.append(
            f"\n{k} / jsonl tokens/s: {best[k + '-w1']['tokens_per_s'] / j1:.2f}x (1 worker), {best[k + '-w2']['tokens_per_s'] / j2:.2f}x (2 workers)"
        )
    lines.append(
        f"\nbest of {args.repeats}; {os.cpu_count()} CPUs; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."
    )
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "benchmarks/bench_prepare.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "load_at_start": load0, "load_at_end": os.getloadavg()[0]},
        "runs": runs,
        "big_workers_2": big,
        "table": table,
    }
    name = "prepare-parquet.json" if not args.quick else "prepare-parquet-quick.json"
    (RESULTS / f"{name}.tmp").write_text(json.dumps(result, indent=2) + "\n")
    os.replace(RESULTS / f"{name}.tmp", RESULTS / name)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="benchmark tokembed prepare")
    ap.add_argument("--quick", action="store_true", help="20 MB and 200 MB instead of 100 MB and 1 GB")
    ap.add_argument(
        "--repeats", type=int, default=5, help="runs per worker count (best kept; the median of the pairs is shown too)"
    )
    ap.add_argument("--no-book", action="store_true", help="skip the book's create_dataloader_v1 baseline")
    ap.add_argument("--no-big", action="store_true", help="skip the 10x input (and the memory ratio): throughput only")
    ap.add_argument("--no-threads", action="store_true", help="skip tiktoken's own thread pool baseline")
    ap.add_argument("--no-huge-text", action="store_true", help="skip the single-document memory runs (one .txt file)")
    ap.add_argument("--parquet", action="store_true", help="only JSON Lines against Parquet, the same documents")
    args = ap.parse_args(argv)
    if args.parquet:
        return parquet_main(args, argv)
    size = 20 if args.quick else 100
    load0 = os.getloadavg()[0]
    base = corpus_file(size)
    big = None if args.no_big else big_input(base, 10)
    work = DATA / "bench-out"
    big_mb = sum(p.stat().st_size for p in big.glob("*.jsonl")) / 1e6 if big else 0
    print(
        f"inputs: {base} ({base.stat().st_size / 1e6:.0f} MB), {big} ({big_mb:.0f} MB); {os.cpu_count()} CPUs, load {load0:.1f}",
        file=sys.stderr,
    )

    runs: dict[str, list[dict]] = {"w1": [], "w2": []}
    ceilings = []
    for rep in range(args.repeats):
        ceilings.append(ceiling(base))
        print(
            f"  machine ceiling now: 2 plain processes tokenize {ceilings[-1]['speedup']:.2f}x faster than 1",
            file=sys.stderr,
        )
        for w in (1, 2):
            r = prepare(base, work, w)
            runs[f"w{w}"].append(r)
            print(
                f"  {size} MB, {w} worker(s), run {rep + 1}: {r['prepare_seconds']:.1f} s, {r['tokens_per_s']:,.0f} tokens/s, peak {r['peak_mb']:.0f} MB",
                file=sys.stderr,
            )
    best = {k: min(v, key=lambda r: r["prepare_seconds"]) for k, v in runs.items()}
    threads = None
    if not args.no_threads:  # the alternative: one process, tiktoken's Rust thread pool (encode_ordinary_batch)
        threads = json.loads(run_measured([sys.executable, "-c", THREADS, str(base), str(args.repeats)])["stdout"])
        print(
            f"  tiktoken encode_ordinary_batch: 1 thread {threads['threads_1_tokens_per_s']:,.0f}, 2 threads {threads['threads_2_tokens_per_s']:,.0f} tokens/s",
            file=sys.stderr,
        )
    r_big = None
    if big is not None:
        r_big = prepare(big, work, 2)
        print(
            f"  {r_big['input_mb']:.0f} MB, 2 workers: {r_big['prepare_seconds']:.1f} s, peak {r_big['peak_mb']:.0f} MB",
            file=sys.stderr,
        )
    huge = None
    if not (args.no_big or args.no_huge_text):  # one document of 100 MB vs 1 GB: cut into pieces, streamed
        small_txt, big_txt = huge_text(size, 10)
        huge = {"base": prepare(small_txt, work, 2), "big": prepare(big_txt, work, 2)}
        for _k, r in huge.items():
            print(
                f"  one {r['input_mb']:.0f} MB text document, 2 workers: {r['prepare_seconds']:.1f} s, peak {r['peak_mb']:.0f} MB",
                file=sys.stderr,
            )
    book = None
    if not args.no_book:
        book = run_measured([sys.executable, "-c", BOOK, str(base)])
        book.update(json.loads(book.pop("stdout")))
        del book["stderr"]
        print(
            f"  book create_dataloader_v1 on {size} MB: {book['construct_seconds']:.1f} s, peak {book['peak_mb']:.0f} MB",
            file=sys.stderr,
        )

    speedup = best["w2"]["tokens_per_s"] / best["w1"]["tokens_per_s"]
    # Each repeat runs 1 then 2 workers back to back: the median of those pairs shows the spread that the
    # best-of ratio hides on a shared machine.
    pairs = sorted(b["tokens_per_s"] / a["tokens_per_s"] for a, b in zip(runs["w1"], runs["w2"]))
    pair_median = (
        pairs[len(pairs) // 2] if len(pairs) % 2 else (pairs[len(pairs) // 2 - 1] + pairs[len(pairs) // 2]) / 2
    )
    ceiling_best = max(c["speedup"] for c in ceilings)
    mem_ratio = r_big["peak_mb"] / best["w2"]["peak_mb"] if r_big else None
    rows = [("prepare, 1 worker", base, best["w1"]), ("prepare, 2 workers", base, best["w2"])]
    if r_big:
        rows.append(("prepare, 2 workers", big, r_big))
    if huge:
        rows += [
            ("prepare one text document, 2 workers", None, huge["base"]),
            ("prepare one text document, 2 workers", None, huge["big"]),
        ]
    lines = [
        "| run | input | time (s) | tokens/s | CPU time, whole process (s) | peak memory (MB) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, _inp, r in rows:
        lines.append(
            f"| {name} | {r['input_mb']:.0f} MB | {r['prepare_seconds']:.1f} | {r['tokens_per_s']:,.0f} | {r['cpu_seconds']:.1f} | {r['peak_mb']:.0f} |"
        )
    if book:
        lines.append(
            f"| book `create_dataloader_v1` (construction) | {best['w1']['input_mb']:.0f} MB | {book['construct_seconds']:.1f} | {best['w1']['tokens'] / book['construct_seconds']:,.0f} | {book['cpu_seconds']:.1f} | {book['peak_mb']:.0f} |"
        )
    lines += [
        "",
        "| ratio | value | goal |",
        "|---|---:|---|",
        f"| throughput, 2 workers / 1 worker ({size} MB), best of {len(pairs)} each | {speedup:.2f}x | >= 1.8x |",
        f"| the same, median of the {len(pairs)} back-to-back pairs (range {pairs[0]:.2f}x-{pairs[-1]:.2f}x) | {pair_median:.2f}x | |",
        f"| machine ceiling in this run: 2 plain processes / 1, pure tokenizing (best of {len(ceilings)}) | {ceiling_best:.2f}x | ~2x on an idle 2-core machine |",
        *(
            [
                f"| throughput, tiktoken's thread pool, 2 threads / 1 thread ({size} MB, tokenizing only) | {threads['threads_2_tokens_per_s'] / threads['threads_1_tokens_per_s']:.2f}x | (for comparison) |"
            ]
            if threads
            else []
        ),
        f"| CPU time, 2 workers / 1 worker ({size} MB): the work parallelism adds | {best['w2']['cpu_seconds'] / best['w1']['cpu_seconds']:.2f}x | ~1.0x |",
    ]
    if r_big:
        lines.append(
            f"| peak memory, {r_big['input_mb']:.0f} MB / {best['w2']['input_mb']:.0f} MB input (2 workers) | {mem_ratio:.2f}x | <= 1.2x |"
        )
    huge_ratio = huge["big"]["peak_mb"] / huge["base"]["peak_mb"] if huge else None
    if huge:
        lines.append(
            f"| peak memory, one {huge['big']['input_mb']:.0f} MB / one {huge['base']['input_mb']:.0f} MB text document (2 workers) | {huge_ratio:.2f}x | <= 1.2x |"
        )
    if book:
        lines += [
            f"| time, book construction / prepare with 2 workers ({size} MB) | {book['construct_seconds'] / best['w2']['prepare_seconds']:.2f}x | |",
            f"| peak memory, book construction / prepare with 2 workers ({size} MB) | {book['peak_mb'] / best['w2']['peak_mb']:.2f}x | |",
        ]
    lines.append(
        f"\n{os.cpu_count()} CPUs; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (a load above the CPU count means other work shared the cores)."
    )
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "benchmarks/bench_prepare.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "load_at_start": load0,
            "load_at_end": os.getloadavg()[0],
            "platform": sys.platform,
        },
        "runs": {
            "workers_1": runs["w1"],
            "workers_2": runs["w2"],
            "big_workers_2": r_big,
            "one_document_workers_2": huge,
            "book_create_dataloader_v1": book,
            "tiktoken_threads": threads,
        },
        "ceilings": ceilings,
        "ratios": {
            "speedup_2_over_1": speedup,
            "speedup_pairs": pairs,
            "speedup_pair_median": pair_median,
            "machine_ceiling_2_over_1": ceiling_best,
            "peak_big_over_base": mem_ratio,
            "peak_one_document_big_over_base": huge_ratio,
            **(
                {
                    "book_time_over_prepare_2w": book["construct_seconds"] / best["w2"]["prepare_seconds"],
                    "book_peak_over_prepare_2w": book["peak_mb"] / best["w2"]["peak_mb"],
                }
                if book
                else {}
            ),
        },
        "table": table,
    }
    # The full benchmark owns prepare.json; partial runs do not overwrite it.
    name = (
        "prepare.json"
        if not (args.quick or args.no_big or args.no_book or args.no_threads or args.no_huge_text)
        else "prepare-partial.json"
    )
    tmp = RESULTS / f"{name}.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, RESULTS / name)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
