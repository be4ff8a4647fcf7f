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


def bench_prepare(corpus: Path, repeats: int) -> list[dict]:
    """prepare with one worker through each backend: tokens/s and whether the folders are identical."""
    import shutil
    import tempfile

    from tokembed.shards.prepare import prepare_corpus

    rows = []
    for name in ("gpt2", "o200k_base"):
        best: dict[str, float] = {}
        hashes: dict[str, str] = {}
        tokens = 0
        for _ in range(repeats):
            for backend in ("tiktoken", "gigatoken"):
                out = Path(tempfile.mkdtemp(prefix="bench-tok-"))
                t0 = time.perf_counter()
                r = prepare_corpus([corpus], out / "s", tokenizer=name, backend=backend, workers=1, progress=False)
                best[backend] = min(best.get(backend, 1e9), time.perf_counter() - t0)
                tokens = r.manifest["splits"]["train"]["tokens"]
                hashes[backend] = _folder_hash(out / "s")
                shutil.rmtree(out)
        row = {
            "tokenizer": name,
            "tiktoken_tok_per_s": tokens / best["tiktoken"],
            "gigatoken_tok_per_s": tokens / best["gigatoken"],
            "speedup": best["tiktoken"] / best["gigatoken"],
            "identical_shards": hashes["tiktoken"] == hashes["gigatoken"],
        }
        rows.append(row)
        print(
            f"prepare {name:<11} 1 worker: tiktoken {row['tiktoken_tok_per_s'] / 1e6:.2f} M tok/s, gigatoken "
            f"{row['gigatoken_tok_per_s'] / 1e6:.2f} M tok/s: x{row['speedup']:.2f}; identical shards: {row['identical_shards']}",
            flush=True,
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 MB instead of 20 MB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="tiktoken,gigatoken,riptoken,quicktok,bpe-openai")
    args = ap.parse_args()
    size = 4 if args.quick else 20
    docs = documents(size)
    print(f"{len(docs)} documents, {sum(map(len, docs)) / 1e6:.1f} M characters", flush=True)
    result = {
        "size_mb": size,
        "backends": bench_backends(docs, args.backends.split(","), args.repeats),
        "prepare": bench_prepare(HERE / "data" / f"tokenize-{size:g}mb.jsonl", args.repeats),
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "tokenize.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
