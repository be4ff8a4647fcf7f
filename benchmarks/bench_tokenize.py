"""Benchmark tokenizing: tokens/s of each tokenizer and backend on the same text, in one and two processes,
and `prepare` throughput per worker through each backend, all measured in one run.

    .venv/bin/python benchmarks/bench_tokenize.py            # 20 MB of text (a few minutes)
    .venv/bin/python benchmarks/bench_tokenize.py --quick    # 4 MB
    .venv/bin/python benchmarks/bench_tokenize.py --prepare-only   # prepare per worker against the raw tokenizer
    .venv/bin/python benchmarks/bench_tokenize.py --profile        # where one worker's time goes, step by step
    .venv/bin/python benchmarks/bench_tokenize.py --scaling        # prepare with 2 workers against 1 (100 MB)

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
    return te.encode_ordinary  # a numpy array, as prepare uses it (a list would add a conversion per id)


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
    return sum(list(map(int, fn(d))) == ref(d) for d in docs) / len(docs)


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


def _raw_call(te):
    """The tokenizer's own fastest call that prepare could make, per document: gigatoken's ``encode`` (a numpy
    array), tiktoken's ``encode_to_numpy`` with no special token (``encode_ordinary``'s ids; 13% faster on this
    corpus than ``encode_ordinary``, which builds a list, and what prepare calls)."""
    if te.backend == "gigatoken":
        return te._fast.encode
    if hasattr(te.enc, "encode_to_numpy"):
        import functools

        return functools.partial(te.enc.encode_to_numpy, allowed_special=set(), disallowed_special=())
    return te.enc.encode_ordinary


def _raw(name: str, backend: str, docs: list[str]) -> tuple[float, float, int]:
    """The raw tokenizer (`_raw_call`): one call per document on in-memory texts, a fresh encoder. Wall and CPU
    seconds, tokens."""
    te = _fresh_encoder(name, backend)
    fn = _raw_call(te)
    c0, t0 = time.process_time(), time.perf_counter()
    n = sum(len(fn(d)) for d in docs)
    return time.perf_counter() - t0, time.process_time() - c0, n


_IDS: dict[tuple[str, str, int], list] = {}  # the documents' ids per tokenizer and backend


def _floor_seconds(name: str, backend: str, corpus: Path, docs: list[str]) -> float:
    """CPU seconds of the work the shard format makes mandatory besides tokenizing, done the cheapest way on the
    same corpus: read the input and sha256 it (what resume checks), turn the ids into the shard's bytes (one pass:
    each document's ids and its ``<|endoftext|>``, in the vocabulary's dtype) and the index, count the ids (the
    manifest's token counts), sha256 both files whole and per `BLOCK_BYTES` block (what the manifest and a remote
    reader check), write both and fsync them; streamed in
    pieces of about 1 MiB of text, as a worker's parts, so memory stays warm in cache. The ids are made first,
    outside the time, by the backend's raw call. The floor is this plus the raw tokenizer's time."""
    import shutil
    import tempfile

    import numpy as np

    from tokembed.shards.format import BLOCK_BYTES, INDEX_DTYPE, dtype_for_vocab

    te = _fresh_encoder(name, backend)
    fn = _raw_call(te)
    if (name, backend, len(docs)) not in _IDS:  # (made once per run: tiktoken takes seconds)
        _IDS[name, backend, len(docs)] = [np.asarray(fn(d), dtype=np.uint32) for d in docs]  # (n_i,) each
    ids = _IDS[name, backend, len(docs)]
    dtype = dtype_for_vocab(te.enc.n_vocab)
    eot = np.array([te.enc.eot_token], dtype=dtype)  # (1,)
    groups, size = [[]], 0  # documents in pieces of about 1 MiB of text
    for d, a in zip(docs, ids):
        if size >= 1 << 20:
            groups.append([])
            size = 0
        groups[-1].append(a)
        size += len(d)
    out = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    try:
        c0 = time.process_time()
        with open(corpus, "rb") as f:
            h = hashlib.sha256()
            while chunk := f.read(1 << 20):
                h.update(chunk)
            h.hexdigest()
        shard, starts = _Hashed(out / "tokens.tmp", BLOCK_BYTES), []
        filled, counts = 0, np.zeros(te.enc.n_vocab, dtype=np.int64)  # (V,)
        for group in groups:
            piece = np.concatenate([x for a in group for x in (a, eot)], dtype=dtype, casting="same_kind")  # (n,)
            counts += np.bincount(piece, minlength=len(counts))  # the manifest's token counts
            lengths = np.fromiter(map(len, group), dtype=np.int64, count=len(group)) + 1  # (documents,)
            starts.append(np.cumsum(lengths) - lengths + filled)
            filled += len(piece)
            shard.add(piece.data.cast("B"))
        shard.close()
        index = _Hashed(out / "index.tmp", BLOCK_BYTES)
        index.add(np.concatenate(starts).astype(INDEX_DTYPE).data.cast("B"))
        index.close()
        return time.process_time() - c0
    finally:
        shutil.rmtree(out)


def _parse_seconds(corpus: Path) -> float:
    """CPU seconds of turning the input's bytes into the texts, the plainest way: orjson (else json) per line of
    JSON Lines, one UTF-8 decode of a text file, pyarrow's column as Python strings for Parquet."""
    import pyarrow.parquet as pq

    try:
        from orjson import loads
    except ImportError:
        loads = json.loads
    data = corpus.read_bytes()
    c0 = time.process_time()
    if corpus.suffix == ".jsonl":
        [loads(line)["text"] for line in data.split(b"\n") if line]
    elif corpus.suffix == ".parquet":
        pq.read_table(corpus, columns=["text"]).column("text").to_pylist()
    else:
        data.decode("utf-8")
    return time.process_time() - c0


class _Hashed:
    """A file written piece by piece with its sha256 whole and per block, then fsynced and renamed (the floor)."""

    def __init__(self, path: Path, block: int) -> None:
        self.path, self.block, self.f = path, block, open(path, "wb")  # noqa: SIM115  # closed by close()
        self.whole, self.part, self.filled, self.blocks = hashlib.sha256(), hashlib.sha256(), 0, []

    def add(self, data: memoryview) -> None:
        self.whole.update(data)
        pos = 0
        while pos < len(data):
            n = min(len(data) - pos, self.block - self.filled)
            self.part.update(data[pos : pos + n])
            pos, self.filled = pos + n, self.filled + n
            if self.filled == self.block:
                self.blocks.append(self.part.hexdigest())
                self.part, self.filled = hashlib.sha256(), 0
        self.f.write(data)

    def close(self) -> None:
        self.whole.hexdigest()
        self.blocks.append(self.part.hexdigest())
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.path, self.path.with_suffix(".bin"))


def _prepare_seconds(name: str, backend: str, corpus: Path, workers: int) -> tuple[float, float, int, str]:
    """Wall and CPU seconds (of this process) of `prepare_corpus` (a fresh encoder built first, outside the
    time), its tokens and the folder's hash."""
    import shutil
    import tempfile

    from tokembed.shards.prepare import prepare_corpus

    _fresh_encoder(name, backend)
    out = Path(tempfile.mkdtemp(prefix="bench-tok-"))
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        r = prepare_corpus([corpus], out / "s", tokenizer=name, backend=backend, workers=workers, progress=False)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        return dt, cpu, sum(s["tokens"] for s in r.manifest["splits"].values()), _folder_hash(out / "s")
    finally:
        shutil.rmtree(out)


def _keep_best(best: dict, key: tuple[str, str], wall: float, cpu: float) -> None:
    best[(*key, "wall")] = min(best.get((*key, "wall"), wall), wall)
    best[(*key, "cpu")] = min(best.get((*key, "cpu"), cpu), cpu)


def bench_prepare(files: dict[str, Path], docs: list[str], repeats: int, backends: list[str]) -> list[dict]:
    """prepare with one worker (in this process, a fresh encoder each time) on each input format, through each
    backend, against the raw tokenizer on the same documents; all interleaved, best of ``repeats``, by wall
    time and by this process's CPU time (which a shared machine disturbs less). Beside it the floor by CPU: the raw
    tokenizer plus the work the shard format makes mandatory (`_floor_seconds`, on the documents' ids: a text
    file's pieces tokenize to nearly the same), and that plus the plainest parse of the input (`_parse_seconds`)."""
    rows = []
    for name in ("gpt2", "o200k_base"):
        best: dict[tuple[str, str, str], float] = {}
        tokens: dict[tuple[str, str], int] = {}
        hashes: dict[tuple[str, str], str] = {}

        for _ in range(repeats):
            for backend in backends:
                wall, cpu, tokens[backend, "raw"] = _raw(name, backend, docs)
                _keep_best(best, (backend, "raw"), wall, cpu)
                for fmt, path in files.items():
                    wall, cpu, tokens[backend, fmt], hashes[backend, fmt] = _prepare_seconds(name, backend, path, 1)
                    _keep_best(best, (backend, fmt), wall, cpu)
                    floor = _floor_seconds(name, backend, path, docs)
                    _keep_best(best, (backend, f"{fmt} floor"), floor, floor)
                    parse = _parse_seconds(path)
                    _keep_best(best, (backend, f"{fmt} parse"), parse, parse)
        for backend in backends:
            row: dict = {"tokenizer": name, "backend": backend}
            for clock in ("wall", "cpu"):
                row[f"raw_tok_per_s_{clock}"] = tokens[backend, "raw"] / best[backend, "raw", clock]
                for fmt in files:
                    row[f"{fmt}_tok_per_s_{clock}"] = tokens[backend, fmt] / best[backend, fmt, clock]
                    row[f"{fmt}_vs_raw_{clock}"] = row[f"{fmt}_tok_per_s_{clock}"] / row[f"raw_tok_per_s_{clock}"]
                if "parquet" in files and "jsonl" in files:
                    row[f"parquet_vs_jsonl_{clock}"] = (
                        row[f"parquet_tok_per_s_{clock}"] / row[f"jsonl_tok_per_s_{clock}"]
                    )
            raw_cpu = best[backend, "raw", "cpu"]
            for fmt in files:
                row[f"{fmt}_identical"] = hashes[backend, fmt] == hashes[backends[0], fmt]
                floor = raw_cpu + best[backend, f"{fmt} floor", "cpu"]  # the tokenizer + the format's mandatory work
                parse = floor + best[backend, f"{fmt} parse", "cpu"]  # and the plainest parse of the input
                row[f"{fmt}_floor_vs_raw_cpu"], row[f"{fmt}_floor_parse_vs_raw_cpu"] = raw_cpu / floor, raw_cpu / parse
                row[f"{fmt}_vs_floor_cpu"] = floor / best[backend, fmt, "cpu"]
                row[f"{fmt}_vs_floor_parse_cpu"] = parse / best[backend, fmt, "cpu"]
            rows.append(row)
            shown = ", ".join(
                f"{fmt} {row[f'{fmt}_tok_per_s_wall'] / 1e6:.2f} M tok/s ({row[f'{fmt}_vs_raw_wall']:.2f}x raw; "
                f"by CPU {row[f'{fmt}_vs_raw_cpu']:.2f}x)"
                for fmt in files
            )
            floors = ", ".join(
                f"{fmt} {row[f'{fmt}_floor_vs_raw_cpu']:.2f}x ({row[f'{fmt}_floor_parse_vs_raw_cpu']:.2f}x with the "
                f"parse; prepare at {row[f'{fmt}_vs_floor_cpu']:.2f}x / {row[f'{fmt}_vs_floor_parse_cpu']:.2f}x of them)"
                for fmt in files
            )
            same = all(row[f"{fmt}_identical"] for fmt in files)
            print(
                f"prepare {name:<11} {backend:<9} 1 worker: raw {row['raw_tok_per_s_wall'] / 1e6:.2f} M tok/s "
                f"(CPU {row['raw_tok_per_s_cpu'] / 1e6:.2f}); {shown}; shards identical to {backends[0]}'s: {same}",
                flush=True,
            )
            print(f"  floor by CPU, of the raw tokenizer's speed: {floors}", flush=True)
    return rows


# ------------------------------------------------------------------------------------------ 2 workers / 1

SCALE = r"""
import json, sys, time
from tokembed.shards.prepare import prepare_corpus
inp, out, workers, name, backend = sys.argv[1:]
t0 = time.perf_counter()
r = prepare_corpus([inp], out, tokenizer=name, backend=backend, workers=int(workers), progress=False)
tokens = sum(s["tokens"] for s in r.manifest["splits"].values())
print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": tokens}))
"""


def scaling_corpus(size_mb: float, copies: int) -> Path:
    """``copies`` copies of the JSON Lines benchmark corpus in one file (built once)."""
    base = corpora(size_mb)["jsonl"]
    path = base.with_name(f"{base.stem}-x{copies}.jsonl")
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(base.read_bytes() * copies)
        tmp.replace(path)
    return path


def _prepare_wall(path: Path, name: str, backend: str, workers: int) -> tuple[float, int]:
    """Wall seconds of `prepare_corpus` in a fresh process (its import and start not counted), and its tokens."""
    import shutil
    import subprocess
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try:
        cmd = [sys.executable, "-c", SCALE, str(path), str(out / "s"), str(workers), name, backend]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        return r["seconds"], r["tokens"]
    finally:
        shutil.rmtree(out)


def bench_scaling(size_mb: float, copies: int, repeats: int, backends: list[str], docs: list[str]) -> list[dict]:
    """prepare with 2 workers against 1 on ``copies`` copies of the JSON Lines corpus (fresh processes, wall time,
    best of ``repeats`` interleaved), beside the machine's ceiling measured in the same run: the raw tokenizer in
    two forked processes against one, each encoding its share of the documents (no I/O, nothing shared)."""
    path = scaling_corpus(size_mb, copies)
    rows = []
    for backend in backends:
        best: dict[int, float] = {}
        ceiling = 0.0
        for _ in range(repeats):
            for workers in (1, 2):
                dt, tokens = _prepare_wall(path, "gpt2", backend, workers)
                best[workers] = min(best.get(workers, dt), dt)
            dt, n = _time_one(encoder("gpt2", backend), docs)
            ceiling = max(ceiling, two_processes("gpt2", backend, docs) / (n / dt))
        row = {"tokenizer": "gpt2", "backend": backend, "input_mb": path.stat().st_size / 1e6}
        row |= {"tok_per_s_1": tokens / best[1], "tok_per_s_2": tokens / best[2], "speedup": best[1] / best[2]}
        row |= {"ceiling": ceiling, "load": os.getloadavg()[0]}
        rows.append(row)
        print(
            f"prepare gpt2 {backend:<9} {row['input_mb']:.0f} MB JSON Lines: 1 worker {row['tok_per_s_1'] / 1e6:.2f} M "
            f"tok/s, 2 workers {row['tok_per_s_2'] / 1e6:.2f} M tok/s: {row['speedup']:.2f}x (the machine's ceiling "
            f"now, two processes tokenizing: {ceiling:.2f}x; load {row['load']:.1f})",
            flush=True,
        )
    return rows


# ------------------------------------------------------------------------------------ profile of one worker

# Steps timed by wrapping the functions that do them (called per part or per unit, so the wrapping costs nothing
# measurable): (step, module, attribute). Each step's time excludes the steps it calls.
TIMED = [
    ("read", "tokembed.shards.units", "_read"),
    ("hash input (sha256)", "tokembed.shards.units", "_input_hash"),
    ("decode + parse + blank/val (texts of the spans)", "tokembed.shards.units", "_gather"),
    ("tokenize (TokenEncoder.encode_batch)", "tokembed.tokenizer.fast", "TokenEncoder.encode_batch"),
    ("cut + convert ids (EOT, index, dtype)", "tokembed.shards.units", "_SplitTokens.flush"),
    ("count per-file stats", "tokembed.shards.units", "_SplitTokens._count"),
    ("join parts + sha256 of shards", "tokembed.shards.prepare", "join_parts"),
    ("write + fsync shards and records", "tokembed.shards.prepare", "write_unit"),
    ("count token ids (manifest token_counts)", "tokembed.shards.units", "part_counts"),
    ("count token ids (manifest token_counts)", "tokembed.shards.prepare", "split_token_counts"),
    ("manifest (JSON, seal, fsync)", "tokembed.shards.prepare", "_write_manifest"),
    ("give memory back (malloc_trim)", "tokembed.shards.units", "trim_heap"),
    ("give memory back (malloc_trim)", "tokembed.shards.prepare", "trim_heap"),
]


class _StepClock:
    """Wall and CPU seconds per step, each excluding the steps it calls (a stack of open steps)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.stack: list[list] = []  # [step, wall0, cpu0, wall of nested steps, cpu of nested steps]

    def wrap(self, step: str, fn):
        import functools

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self.stack.append([step, time.perf_counter(), time.process_time(), 0.0, 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                _, w0, c0, nw, nc = self.stack.pop()
                w, c = time.perf_counter() - w0, time.process_time() - c0
                self.wall[step] = self.wall.get(step, 0.0) + w - nw
                self.cpu[step] = self.cpu.get(step, 0.0) + c - nc
                if self.stack:
                    self.stack[-1][3] += w
                    self.stack[-1][4] += c

        return timed


def _patched(clock: _StepClock) -> list[tuple]:
    import importlib

    undo = []
    for step, module, attr in TIMED:
        owner = importlib.import_module(module)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        undo.append((owner, name, original))
        setattr(owner, name, clock.wrap(step, original))
    return undo


def profile(name: str, backend: str, fmt: str, size_mb: float, repeats: int = 3) -> dict:
    """One worker (in this process) preparing the corpus: the share of each step of its wall and CPU time, by
    timing the functions that do the steps (per part or unit, not per document, so the timing costs nothing
    measurable; cProfile would inflate every per-call cost). Runs ``repeats`` times, interleaved with the raw
    tokenizer; shows the run with the least CPU time and the raw tokenizer's best."""
    files = corpora(size_mb)
    docs = documents(size_mb)
    _prepare_seconds(name, backend, files[fmt], 1)  # the corpus in the page cache, imports done
    raw_cpu, floor_cpu, parse_cpu, best = float("inf"), float("inf"), float("inf"), None
    for _ in range(repeats):
        raw_cpu = min(raw_cpu, _raw(name, backend, docs)[1])
        floor_cpu = min(floor_cpu, _floor_seconds(name, backend, files[fmt], docs))
        parse_cpu = min(parse_cpu, _parse_seconds(files[fmt]))
        clock = _StepClock()
        undo = _patched(clock)
        try:
            wall, cpu, tokens, _ = _prepare_seconds(name, backend, files[fmt], 1)
        finally:
            for owner, attr, original in reversed(undo):
                setattr(owner, attr, original)
        if best is None or cpu < best[1]:
            best = (wall, cpu, tokens, clock)
    wall, cpu, tokens, clock = best
    rest = "the rest (plan, inputs, identity, lock, plan.json, pool)"
    clock.wall[rest], clock.cpu[rest] = wall - sum(clock.wall.values()), cpu - sum(clock.cpu.values())
    print(
        f"{name}, {backend}, {fmt}, {size_mb:g} MB, 1 worker, best of {repeats}: prepare {tokens / cpu / 1e6:.2f} M "
        f"tok/s by CPU ({cpu:.3f} s CPU, {wall:.3f} s wall); raw tokenizer {tokens / raw_cpu / 1e6:.2f} M tok/s "
        f"({raw_cpu:.3f} s CPU): {raw_cpu / cpu:.2f}x raw by CPU time; load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    floor = raw_cpu + floor_cpu
    print(
        f"floor: the raw tokenizer + what the shard format makes mandatory (read + sha256 the input, ids -> shard "
        f"bytes and index, count ids, sha256 whole and per block, write + fsync) = {raw_cpu:.3f} + {floor_cpu:.3f} s CPU: "
        f"{raw_cpu / floor:.2f}x raw, and prepare is at {floor / cpu:.2f}x of it; with the plainest parse of the "
        f"input ({parse_cpu:.3f} s) {raw_cpu / (floor + parse_cpu):.2f}x raw, prepare at {(floor + parse_cpu) / cpu:.2f}x"
    )
    print(f"  {'step':<58} {'CPU s':>7} {'share':>6} {'wall s':>7}")
    for step, sec in sorted(clock.cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {step:<58} {sec:7.3f} {100 * sec / cpu:5.1f}% {clock.wall[step]:7.3f}")
    return {
        "tokenizer": name,
        "backend": backend,
        "format": fmt,
        "cpu": clock.cpu,
        "wall": clock.wall,
        "raw_cpu": raw_cpu,
        "floor_cpu": floor,
        "parse_cpu": parse_cpu,
        "prepare_cpu": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 MB instead of 20 MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="tiktoken,gigatoken,riptoken,quicktok,bpe-openai")
    ap.add_argument("--prepare-only", action="store_true", help="only prepare against the raw tokenizer")
    ap.add_argument("--profile", action="store_true", help="only the share of each step of one worker's time")
    ap.add_argument(
        "--scaling", action="store_true", help="only prepare with 2 workers against 1 (needs both cores to itself)"
    )
    ap.add_argument("--copies", type=int, default=5, help="--scaling: copies of the corpus in its input")
    ap.add_argument("--tokenizer", default="gpt2", help="--profile: the tokenizer")
    ap.add_argument("--backend", default="gigatoken", help="--profile: the backend")
    ap.add_argument("--format", default="jsonl", choices=("jsonl", "text", "parquet"), help="--profile: the input")
    args = ap.parse_args()
    size = 4 if args.quick else 20
    if args.profile:
        profile(args.tokenizer, args.backend, args.format, size, args.repeats)
        return
    docs = documents(size)
    print(f"{len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} M characters", flush=True)
    load0 = os.getloadavg()[0]
    result: dict = {"size_mb": size, "cpus": os.cpu_count(), "load_start": load0}
    backends = [b for b in ("tiktoken", "gigatoken") if b in args.backends.split(",")]
    if args.scaling:
        result["scaling"] = bench_scaling(size, args.copies, args.repeats, backends, docs)
    else:
        if not args.prepare_only:
            result["backends"] = bench_backends(docs, args.backends.split(","), args.repeats)
        result["prepare"] = bench_prepare(corpora(size), docs, args.repeats, backends)
    result["load_end"] = os.getloadavg()[0]
    print(f"load average {load0:.1f} at the start, {result['load_end']:.1f} at the end ({os.cpu_count()} CPUs)")
    (HERE / "results").mkdir(exist_ok=True)
    name = (
        "tokenize-scaling.json" if args.scaling else "tokenize-prepare.json" if args.prepare_only else "tokenize.json"
    )
    (HERE / "results" / name).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
