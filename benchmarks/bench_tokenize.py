"""Benchmark tokenizing: tokens/s of each tokenizer and backend on the same text, in one and two processes,
and `prepare` throughput per worker through each backend, all measured in one run.

    .venv/bin/python benchmarks/bench_tokenize.py            # 20 MB of text (a few minutes)
    .venv/bin/python benchmarks/bench_tokenize.py --quick    # 4 MB

The corpus is benchmarks/corpus.py's JSON Lines of /usr/share/doc texts and Python docstrings (built offline
under benchmarks/data/, git-ignored). Every backend encodes the same documents with ``encode_ordinary``
semantics and is checked against tiktoken, the reference: ``exact`` is the share of documents whose ids
are identical. Other fast BPE packages on PyPI (riptoken, quicktok-v1, bpe-openai) are measured when
installed, for comparison; tokembed only ever uses gigatoken (`tokembed[fast]`).

The machine may be shared: configurations are interleaved, the best of ``--repeats`` is kept, and ratios
are taken within this one run. Results go to benchmarks/results/tokenize.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import build_corpus  # noqa: E402

NAMES = ["gpt2", "cl100k_base", "o200k_base"]


def documents(size_mb: float) -> list[str]:
    path = build_corpus(HERE / "data" / f"tokenize-{size_mb:g}mb.jsonl", size_mb)
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]


# ------------------------------------------------------------------------------------- backends (one thread)


def _riptoken(enc):
    import riptoken

    core = riptoken.CoreBPE(enc.mergeable_ranks, {}, enc.split_pattern)
    return core.encode_ordinary


def _quicktok(enc):
    import quicktok

    q = quicktok.get_encoding(enc.name)  # its own bundled vocabulary (cl100k/o200k only)
    return lambda text: list(q.encode_ordinary(text))


def _bpe_openai(enc):
    import bpe_openai._bindings as b

    core = b.tokenizer_for_encoding(enc.name)  # cl100k/o200k only; refuses texts over 1 M characters
    return core.encode


def _gigatoken(enc):
    from tokembed.tokenizer.fast import TokenEncoder

    te = TokenEncoder(enc, backend="gigatoken")
    return lambda text: te.encode_ordinary(text).tolist()


def encoder(name: str, backend: str):
    """``encode_ordinary`` of ``name`` through ``backend``, or None where that backend lacks the tokenizer."""
    import tokembed

    enc = tokembed.get_tokenizer(name)
    if backend == "tiktoken":
        return enc.encode_ordinary
    makers = {"gigatoken": _gigatoken, "riptoken": _riptoken, "quicktok": _quicktok, "bpe-openai": _bpe_openai}
    if backend in ("quicktok", "bpe-openai") and name == "gpt2":
        return None
    try:
        return makers[backend](enc)
    except ImportError:
        return None


def _time_one(fn, docs: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    n = sum(len(fn(d)) for d in docs)
    return time.perf_counter() - t0, n


def _exact(fn, ref, docs: list[str]) -> float:
    return sum(fn(d) == ref(d) for d in docs) / len(docs)


def stress_texts() -> list[str]:
    """Where fast BPEs have gone wrong: pieces over 500 bytes, whitespace runs, specials as text, scripts."""
    import random

    rnd = random.Random(0)
    ws = [" ", "\t", "\n", "\r\n", "\u3000", "\xa0", "\u2028"]
    runs = ["".join(rnd.choice(ws) * rnd.randint(1, 60) for _ in range(rnd.randint(1, 8))) for _ in range(200)]
    long = [c * n for c in ("a", "=", "-", "\xa0", "ab") for n in range(400, 1400, 50)]
    return runs + long + ["<|endoftext|> <|endofprompt|>", "naïve café 東京 🤖👍🏽 e\u0301", "x" * 5000 + " y"]


def _worker(args) -> tuple[float, int]:
    name, backend, docs = args
    return _time_one(encoder(name, backend), docs)


def two_processes(name: str, backend: str, docs: list[str]) -> float:
    """Tokens/s of two forked processes, each building its own encoder and encoding half the documents;
    only the encoding is timed (the slower process sets the pace)."""
    halves = [(name, backend, docs[0::2]), (name, backend, docs[1::2])]
    with mp.get_context("fork").Pool(2) as pool:
        results = pool.map(_worker, halves)
    return sum(n for _, n in results) / max(dt for dt, _ in results)


def bench_backends(docs: list[str], backends: list[str], repeats: int) -> list[dict]:
    rows = []
    for name in NAMES:
        available = [b for b in backends if encoder(name, b) is not None]
        best: dict[str, float] = {}
        tokens = 0
        for _ in range(repeats):  # interleaved: a busy moment hits every backend alike
            for b in available:
                fn = encoder(name, b)  # a fresh one: gigatoken's piece cache starts cold, as in a new worker
                dt, tokens = _time_one(fn, docs)
                best[b] = min(best.get(b, dt), dt)
        ref = encoder(name, "tiktoken")
        for b in available:
            rows.append(
                {
                    "tokenizer": name,
                    "backend": b,
                    "tok_per_s_1proc": tokens / best[b],
                    "vs_tiktoken": best["tiktoken"] / best[b],
                    "exact": _exact(encoder(name, b), ref, docs),
                    "exact_stress": _exact(encoder(name, b), ref, stress_texts()),
                    "tok_per_s_2proc": two_processes(name, b, docs),
                }
            )
            print(_fmt(rows[-1]), flush=True)
    return rows


def _fmt(r: dict) -> str:
    return (
        f"{r['tokenizer']:<12} {r['backend']:<11} {r['tok_per_s_1proc'] / 1e6:6.2f} M tok/s (x{r['vs_tiktoken']:.2f}), "
        f"2 procs {r['tok_per_s_2proc'] / 1e6:6.2f} M tok/s, exact {r['exact']:.4f} (stress {r['exact_stress']:.3f})"
    )


# --------------------------------------------------------------------------------------- prepare per worker


def _folder_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def corpora(size_mb: float) -> dict[str, Path]:
    """The benchmark corpus as JSON Lines, as one plain-text document (its documents joined by blank lines: cut
    into pieces by the planner) and as Parquet (row groups of 1,000 rows, as `datasets` writes them)."""
    jsonl = build_corpus(HERE / "data" / f"tokenize-{size_mb:g}mb.jsonl", size_mb)
    text, parquet = jsonl.with_suffix(".txt"), jsonl.with_suffix(".parquet")
    if not text.exists() or not parquet.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq

        docs = documents(size_mb)
        tmp = text.with_suffix(".tmp")
        tmp.write_text("\n\n".join(docs), encoding="utf-8")
        tmp.replace(text)
        pq.write_table(pa.table({"text": docs}), tmp, row_group_size=1000)
        tmp.replace(parquet)
    return {"jsonl": jsonl, "text": text, "parquet": parquet}


def _fresh_encoder(name: str, backend: str):
    """This process's encoder for ``name`` built anew (outside any timing): its piece cache starts cold, as in a
    new worker, and `prepare` (workers=1) uses it."""
    import tokembed
    from tokembed.tokenizer import fast

    fast._encoder.cache_clear()
    return fast.token_encoder(tokembed.get_tokenizer(name), backend)


def _raw(name: str, backend: str, docs: list[str]) -> tuple[float, int]:
    """The raw tokenizer: one call per document on in-memory texts, ids as it returns them (gigatoken: a numpy
    array; tiktoken: a list), a fresh encoder."""
    te = _fresh_encoder(name, backend)
    fn = te._fast.encode if te.backend == "gigatoken" else te.enc.encode_ordinary
    return _time_one(fn, docs)


def _prepare_seconds(name: str, backend: str, corpus: Path, workers: int) -> tuple[float, int, str]:
    import shutil
    import tempfile

    from tokembed.shards.prepare import prepare_corpus

    _fresh_encoder(name, backend)
    out = Path(tempfile.mkdtemp(prefix="bench-tok-"))
    try:
        t0 = time.perf_counter()
        r = prepare_corpus([corpus], out / "s", tokenizer=name, backend=backend, workers=workers, progress=False)
        dt = time.perf_counter() - t0
        return dt, sum(s["tokens"] for s in r.manifest["splits"].values()), _folder_hash(out / "s")
    finally:
        shutil.rmtree(out)


def bench_prepare(files: dict[str, Path], docs: list[str], repeats: int, backends: list[str]) -> list[dict]:
    """prepare with one worker (in this process, a fresh encoder each time) on each input format, through each
    backend, against the raw tokenizer on the same documents; all interleaved, best of ``repeats``."""
    rows = []
    for name in ("gpt2", "o200k_base"):
        best: dict[tuple[str, str], float] = {}
        tokens: dict[tuple[str, str], int] = {}
        hashes: dict[tuple[str, str], str] = {}
        for _ in range(repeats):
            for backend in backends:
                dt, tokens[backend, "raw"] = _raw(name, backend, docs)
                best[backend, "raw"] = min(best.get((backend, "raw"), dt), dt)
                for fmt, path in files.items():
                    dt, tokens[backend, fmt], hashes[backend, fmt] = _prepare_seconds(name, backend, path, 1)
                    best[backend, fmt] = min(best.get((backend, fmt), dt), dt)
        for backend in backends:
            row = {
                "tokenizer": name,
                "backend": backend,
                "raw_tok_per_s": tokens[backend, "raw"] / best[backend, "raw"],
            }
            for fmt in files:
                row[f"{fmt}_tok_per_s"] = tokens[backend, fmt] / best[backend, fmt]
                row[f"{fmt}_vs_raw"] = row[f"{fmt}_tok_per_s"] / row["raw_tok_per_s"]
                row[f"{fmt}_identical"] = hashes[backend, fmt] == hashes[backends[0], fmt]
            if "parquet" in files and "jsonl" in files:
                row["parquet_vs_jsonl"] = row["parquet_tok_per_s"] / row["jsonl_tok_per_s"]
            rows.append(row)
            shown = ", ".join(
                f"{fmt} {row[f'{fmt}_tok_per_s'] / 1e6:.2f} M tok/s ({row[f'{fmt}_vs_raw']:.2f}x raw)" for fmt in files
            )
            same = all(row[f"{fmt}_identical"] for fmt in files)
            print(
                f"prepare {name:<11} {backend:<9} 1 worker: raw {row['raw_tok_per_s'] / 1e6:.2f} M tok/s; {shown}; "
                f"shards identical to {backends[0]}'s: {same}",
                flush=True,
            )
    return rows


# ------------------------------------------------------------------------------------ profile of one worker

# Where each function's time goes: the step of the nearest caller named here (functions named nowhere, and the
# library code they call, pass their time up to their callers in proportion to the time spent in each call).
HARNESS = "the benchmark itself (not counted)"
STEPS = {
    "read": ["units.py:_read"],
    "hash input": ["units.py:_input_hash"],
    "decode UTF-8": ["base.py:decode", "base.py:decode_all", "base.py:refuse_non_text", "base.py:unicode"],
    "parse (JSON, lines, rows)": [
        "jsonl.py:line_text",
        "bytes.py:texts",
        "parquet.py:texts",
        "parquet.py:row_records",
        "text.py:texts",
        "json:",
    ],
    "blank / val split": ["units.py:_gather", "units.py:_route", "units.py:_in_val"],
    "tokenize (the tokenizer's own call)": ["BPETokenizer", "tiktoken/core.py:", "_tiktoken"],
    "cut + convert ids (EOT, index, dtype)": ["units.py:flush", "units.py:add", "units.py:result", "fast.py:"],
    "count (per-file stats, token counts)": ["units.py:_count", "counts.py:"],
    "join parts + sha256": ["units.py:join_parts"],
    "write + fsync shards and records": ["folder.py:write_unit"],
    "manifest (JSON, seal)": ["prepare.py:_write_manifest"],
    "plan (spans, units, parts)": ["units.py:iter_units", "units.py:unit_parts"],
    HARNESS: ["bench_tokenize.py:_folder_hash", "bench_tokenize.py:_fresh_encoder", "shutil.py:rmtree", "tempfile.py:"],
}


def _step_of(func: tuple) -> str | None:
    file, _, fn = func
    key = f"{file}:{fn}"
    found = None
    for step, names in STEPS.items():  # the most specific (longest) name wins: "units.py:flush" over "fast.py:"
        for n in names:
            if n in key and (found is None or len(n) > found[1]):
                found = (step, len(n))
    return found[0] if found else None


def step_shares(stats: dict) -> dict[str, float]:
    """Seconds per step from `pstats.Stats(...).stats` (each function's own time, passed up to the nearest named
    caller)."""
    memo: dict[tuple, dict[str, float]] = {}

    def share(func: tuple, seen: frozenset) -> dict[str, float]:
        if func in memo:
            return memo[func]
        step = _step_of(func)
        callers = stats[func][4] if func in stats else {}
        if step is not None or not callers or func in seen:
            out = {step or "other": 1.0}
        else:
            weights = {c: e[3] for c, e in callers.items() if c in stats}
            total = sum(weights.values()) or 1.0
            out = {}
            for c, w in weights.items():
                for k, v in share(c, seen | {func}).items():
                    out[k] = out.get(k, 0.0) + v * w / total
            out = out or {"other": 1.0}
        memo[func] = out
        return out

    seconds: dict[str, float] = {}
    for func, (_, _, tt, _, _) in stats.items():
        for k, v in share(func, frozenset()).items():
            seconds[k] = seconds.get(k, 0.0) + tt * v
    return seconds


def profile(name: str, backend: str, fmt: str, size_mb: float) -> dict:
    """One worker (in this process) preparing the corpus under cProfile: the share of each step of its time."""
    import cProfile
    import pstats

    files = corpora(size_mb)
    _prepare_seconds(name, backend, files[fmt], 1)  # the corpus in the page cache, imports done
    dt, tokens, _ = _prepare_seconds(name, backend, files[fmt], 1)
    raw_dt, raw_tokens = _raw(name, backend, documents(size_mb))
    prof = cProfile.Profile()
    prof.enable()
    _prepare_seconds(name, backend, files[fmt], 1)
    prof.disable()
    seconds = step_shares(pstats.Stats(prof).stats)
    seconds.pop(HARNESS, None)
    total = sum(seconds.values())
    print(
        f"{name}, {backend}, {fmt}, {size_mb:g} MB, 1 worker: prepare {tokens / dt / 1e6:.2f} M tok/s, raw "
        f"{raw_tokens / raw_dt / 1e6:.2f} M tok/s ({raw_tokens / raw_dt and tokens / dt / (raw_tokens / raw_dt):.2f}x raw); "
        f"under cProfile {total:.2f} s (which inflates per-call costs):"
    )
    for step, sec in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {step:<40} {sec:7.3f} s {100 * sec / total:5.1f}%")
    return {"tokenizer": name, "backend": backend, "format": fmt, "seconds": seconds, "prepare_tok_per_s": tokens / dt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 MB instead of 20 MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="tiktoken,gigatoken,riptoken,quicktok,bpe-openai")
    ap.add_argument("--prepare-only", action="store_true", help="only prepare against the raw tokenizer")
    ap.add_argument("--profile", action="store_true", help="only the share of each step of one worker's time")
    ap.add_argument("--tokenizer", default="gpt2", help="--profile: the tokenizer")
    ap.add_argument("--backend", default="gigatoken", help="--profile: the backend")
    ap.add_argument("--format", default="jsonl", choices=("jsonl", "text", "parquet"), help="--profile: the input")
    args = ap.parse_args()
    size = 4 if args.quick else 20
    if args.profile:
        profile(args.tokenizer, args.backend, args.format, size)
        return
    docs = documents(size)
    print(f"{len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} M characters", flush=True)
    load0 = os.getloadavg()[0]
    result: dict = {"size_mb": size, "cpus": os.cpu_count(), "load_start": load0}
    if not args.prepare_only:
        result["backends"] = bench_backends(docs, args.backends.split(","), args.repeats)
    backends = [b for b in ("tiktoken", "gigatoken") if b in args.backends.split(",")]
    result["prepare"] = bench_prepare(corpora(size), docs, args.repeats, backends)
    result["load_end"] = os.getloadavg()[0]
    print(f"load average {load0:.1f} at the start, {result['load_end']:.1f} at the end ({os.cpu_count()} CPUs)")
    (HERE / "results").mkdir(exist_ok=True)
    name = "tokenize-prepare.json" if args.prepare_only else "tokenize.json"
    (HERE / "results" / name).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
