"""Benchmark remote shard folders: S3 (OpenStack Swift with s3api on loopback) against the same folder on disk.

    .venv/bin/python benchmarks/bench_remote.py            # 64M tokens (128 MB) of shards, 20 MB of text to prepare
    .venv/bin/python benchmarks/bench_remote.py --quick    # 16M tokens, 5 MB

Everything in one run, against the same Swift server (tests/remote/swift_s3.py, started here, stopped at the end):

1. **tokens/s at 8 x 1024, shuffled**, one epoch each: the local folder (page cache warm) against the remote one
   through a cache larger than the corpus, cold (empty) and warm (a second epoch), and through a cache of 25% of
   the corpus with the locality option (``shuffle_group``: groups whose tokens fill a quarter of the cache).
2. **bytes fetched per epoch with a 25% cache**: tokembed's Belady eviction with prefetch against LRU on the same
   order (``TOKEMBED_CACHE_POLICY=lru``, demand fetches), (a) a full shuffle of a folder of 64 KiB blocks (with 4
   MiB blocks a full shuffle through a quarter-size cache refetches the corpus thousands of times whatever the
   policy: that is what the locality option is for), and (b) the locality order with the default 4 MiB blocks.
3. **MosaicML streaming** reading the same windows (MDS shards of 1025-token samples, the same server, a
   ``cache_limit`` of 25%, shuffled): tokens/s and bytes downloaded. It needs numpy < 2.2 and transformers < 5,
   which the dev environment's pins exclude, so it runs in its own venv (benchmarks/data/streaming-venv: ``python -m
   venv ... && pip install -c constraints.txt mosaicml-streaming``); there torchvision's wheel for the pinned torch
   does not load (``torchvision::nms`` is missing) and ``import streaming`` imports its vision datasets, so the
   runner registers empty ``streaming.vision/text/multimodal`` modules first (only ``streaming.base`` is used).
4. **prepare to a bucket vs to a local folder**: the same text (benchmarks/corpus.py), ``workers=2``.

Timings on a shared machine are noise: read the ratios, taken within one run. Results: benchmarks/results/remote.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / "data"
RESULTS = HERE / "results"
STREAMING_VENV = DATA / "streaming-venv"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "remote"))

EOT = 50256
B, T = 8, 1024


def write_folder(root: Path, n_tokens: int, *, shard_tokens: int, block_bytes: int, seed: int = 0) -> None:
    """A shard folder of random documents (uint16 ids, one <|endoftext|> every ~1000 tokens), with block hashes."""
    from tokembed.shards.format import block_digests
    from tokembed.shards.schema import seal
    from tokembed.tokenizer import get_tokenizer, tokenizer_hash

    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True, exist_ok=True)
    shards = []
    for i, start in enumerate(range(0, n_tokens, shard_tokens)):
        n = min(shard_tokens, n_tokens - start)
        toks = rng.integers(0, EOT, n, dtype=np.uint16)
        ends = np.sort(rng.choice(n - 1, size=max(1, n // 1000), replace=False))
        toks[ends] = EOT
        toks[-1] = EOT
        idx = np.concatenate([[0], ends[ends < n - 1] + 1]).astype("<i8")
        tb, ib = toks.astype("<u2").tobytes(), idx.tobytes()
        (root / f"train/{i:05d}.bin").write_bytes(tb)
        (root / f"train/{i:05d}.idx").write_bytes(ib)
        shards.append(
            {
                "tokens": f"train/{i:05d}.bin",
                "index": f"train/{i:05d}.idx",
                "n_tokens": n,
                "n_documents": len(idx),
                "bytes": len(tb),
                "sha256": hashlib.sha256(tb).hexdigest(),
                "index_sha256": hashlib.sha256(ib).hexdigest(),
                "blocks": {
                    "bytes": block_bytes,
                    "tokens": block_digests(tb, block_bytes),
                    "index": block_digests(ib, block_bytes),
                },
            }
        )
    tok = get_tokenizer("gpt2")
    manifest = {
        "format": "tokembed-shards",
        "version": 2,
        "tokenizer": {"name": "gpt2", "n_vocab": 50257, "eot_token": EOT, "hash": tokenizer_hash(tok)},
        "dtype": "uint16",
        "splits": {"train": {"tokens": n_tokens, "documents": sum(s["n_documents"] for s in shards), "shards": shards}},
    }
    (root / "manifest.json").write_text(json.dumps(seal(manifest), indent=1))


def upload(local: Path, url: str) -> float:
    from tokembed.shards.publish import upload_folder
    from tokembed.storage.stores import open_store

    open_store(url.rsplit("/", 1)[0]).make_bucket()
    t = time.perf_counter()
    upload_folder(local, url)
    return time.perf_counter() - t


def epoch(
    source, *, cache_dir: Path | None = None, log: Path | None = None, policy: str = "belady", threads: int = 8, **kw
) -> dict:
    """One shuffled epoch at B x T: tokens/s, and the bytes the cache fetched (from its fetch log)."""
    import tokembed

    env = {"TOKEMBED_CACHE_POLICY": policy, "TOKEMBED_PREFETCH_THREADS": str(threads)}
    if log is not None:
        env["TOKEMBED_CACHE_LOG"] = str(log)
        log.unlink(missing_ok=True)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        remote = {} if cache_dir is None else {"cache_dir": cache_dir}
        loader = tokembed.create_dataloader(source, batch_size=B, max_length=T, seed=kw.pop("seed", 0), **remote, **kw)
        t = time.perf_counter()
        tokens = sum(x.numel() for x, _ in loader)
        seconds = time.perf_counter() - t
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    fetched = (
        sum(int(line.split()[3]) for line in log.read_text().splitlines()) if log is not None and log.exists() else 0
    )
    return {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds),
        "fetched_bytes": fetched,
    }


def throughput(local: Path, url: str, corpus_bytes: int, work: Path) -> dict:
    big, quarter = 2 * corpus_bytes, corpus_bytes // 4
    group = quarter // 4 // (2 * T)  # windows whose tokens fill a quarter of the cache
    out = {"local": epoch(str(local))}
    out["remote_cold_big_cache"] = epoch(url, cache_dir=work / "big", cache_bytes=big, log=work / "cold.log")
    out["remote_warm_big_cache"] = epoch(url, cache_dir=work / "big", cache_bytes=big, log=work / "warm.log")
    out["remote_25pct_locality"] = epoch(
        url, cache_dir=work / "q", cache_bytes=quarter, shuffle_group=group, log=work / "q.log"
    )
    out["shuffle_group"] = group
    base = out["local"]["tokens_per_s"]
    for k in ("remote_cold_big_cache", "remote_warm_big_cache", "remote_25pct_locality"):
        out[k]["vs_local"] = round(out[k]["tokens_per_s"] / base, 3)
    return out


def fetched_bytes(url: str, corpus_bytes: int, work: Path, *, shuffle_group: int | None) -> dict:
    quarter = corpus_bytes // 4
    extra = {} if shuffle_group is None else {"shuffle_group": shuffle_group}
    out = {}
    for name, policy, threads in (
        ("belady_prefetch", "belady", 8),
        ("belady_demand", "belady", 0),
        ("lru_demand", "lru", 0),
    ):
        out[name] = epoch(
            url,
            cache_dir=work / name,
            cache_bytes=quarter,
            log=work / f"{name}.log",
            policy=policy,
            threads=threads,
            seed=1,
            **extra,
        )
        out[name]["epochs_of_corpus"] = round(out[name]["fetched_bytes"] / corpus_bytes, 3)
        shutil.rmtree(work / name, ignore_errors=True)
    out["lru_over_belady_prefetch"] = round(
        out["lru_demand"]["fetched_bytes"] / max(1, out["belady_prefetch"]["fetched_bytes"]), 3
    )
    return out


_STREAMING = textwrap.dedent(
    """
    import json, os, sys, time, types
    for m in ("streaming.vision", "streaming.text", "streaming.multimodal"):
        sys.modules[m] = types.ModuleType(m)  # their imports need torchvision, which does not load here
    import numpy as np
    from streaming import MDSWriter, StreamingDataset
    from streaming.base import stream as stream_module
    cfg = json.loads(sys.argv[1])
    if cfg["write"]:
        tokens = np.fromfile(cfg["stream"], dtype="<u2")
        n = (len(tokens) - 1) // cfg["T"]
        with MDSWriter(out=cfg["remote"], columns={"tokens": "ndarray:uint16"}, size_limit=cfg["shard_bytes"]) as w:
            for k in range(n):
                w.write({"tokens": tokens[k * cfg["T"] : k * cfg["T"] + cfg["T"] + 1]})
        print(json.dumps({"samples": n}))
        sys.exit(0)
    fetched = [0]
    original = stream_module.Stream._download_file
    def counting(self, from_basename, to_basename=None):
        path = original(self, from_basename, to_basename)
        fetched[0] += os.path.getsize(path)
        return path
    stream_module.Stream._download_file = counting
    block = {} if cfg["shuffle_block_size"] is None else {"shuffle_block_size": cfg["shuffle_block_size"]}
    ds = StreamingDataset(remote=cfg["remote"], local=cfg["local"], shuffle=True, shuffle_seed=0, batch_size=cfg["B"],
                          cache_limit=cfg["cache_limit"], predownload=cfg["B"] * 8, **block)
    t = time.perf_counter()
    tokens = samples = 0
    for sample in ds:
        tokens += len(sample["tokens"]) - 1
        samples += 1
        if samples == cfg["max_samples"]:
            break
    seconds = time.perf_counter() - t
    share = samples / ds.num_samples  # the part of the epoch read (the whole epoch unless max_samples stopped it)
    print(json.dumps({"tokens": tokens, "seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds),
                      "fetched_bytes": fetched[0], "share_of_epoch": round(share, 4),
                      "fetched_bytes_per_epoch": round(fetched[0] / share)}))
    """
)


def mosaic_streaming(local: Path, bucket_url: str, corpus_bytes: int, work: Path, server_env: dict, group: int) -> dict:
    python = STREAMING_VENV / "bin" / "python"
    if not python.exists():
        return {"skipped": f"no {STREAMING_VENV} (see the module's notes for how to make it)"}
    import tokembed

    stream = work / "stream.bin"
    ss = tokembed.open_shards(local)
    ss.read(0, ss.n_tokens).astype("<u2").tofile(stream)
    env = {**os.environ, **server_env, "S3_ENDPOINT_URL": server_env["AWS_ENDPOINT_URL"]}
    base = {
        "stream": str(stream),
        "T": T,
        "B": B,
        "remote": f"{bucket_url}/mds",
        "shard_bytes": corpus_bytes // 4 // 5,
    }  # streaming wants a cache_limit >= 4 shards

    def run(cfg: dict) -> dict:
        p = subprocess.run([str(python), "-c", _STREAMING, json.dumps(cfg)], env=env, capture_output=True, text=True)
        if p.returncode:
            return {"error": p.stderr.strip().splitlines()[-5:]}
        return json.loads(p.stdout.strip().splitlines()[-1])

    written = run({**base, "write": True})
    if "error" in written:
        return written
    read = {**base, "write": False, "cache_limit": corpus_bytes // 4}
    return {
        # its block shuffle with our locality's group size: the comparable order, a whole epoch
        "shuffle_block_like_locality": run(
            {**read, "local": str(work / "mds-a"), "shuffle_block_size": group, "max_samples": None}
        ),
        # its default shuffle (py1e, one block here): LRU over whole shards thrashes; the first 5% of an epoch
        "default_shuffle_first_5pct": run(
            {
                **read,
                "local": str(work / "mds-b"),
                "shuffle_block_size": None,
                "max_samples": max(1, written["samples"] // 20),
            }
        ),
    }


def prepare_speed(size_mb: float, bucket_url: str, work: Path) -> dict:
    import tokembed
    from corpus import build_corpus

    text = DATA / f"corpus-{size_mb:g}mb.txt"
    if not text.exists():
        build_corpus(text, size_mb)
    out = {}
    t = time.perf_counter()
    tokembed.prepare_corpus([text], work / "prep-local", workers=2, progress=False)
    out["local_seconds"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    tokembed.prepare_corpus([text], f"{bucket_url}/prepared", workers=2, progress=False)
    out["bucket_seconds"] = round(time.perf_counter() - t, 2)
    out["bucket_over_local"] = round(out["bucket_seconds"] / out["local_seconds"], 3)
    out["text_mb"] = size_mb
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16M tokens and 5 MB of text")
    args = parser.parse_args()
    n_tokens = (16 if args.quick else 64) << 20
    from swift_s3 import start_swift

    DATA.mkdir(exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-remote-", dir=DATA))
    server = start_swift(work / "swift")
    os.environ.update(server.env())
    os.environ["TOKEMBED_CACHE_DIR"] = str(work / "cache")
    try:
        load = os.getloadavg()[0]
        local = work / "local"
        write_folder(local, n_tokens, shard_tokens=n_tokens // 4, block_bytes=4 << 20)
        corpus_bytes = 2 * n_tokens
        results: dict = {"machine_load_1min": round(load, 1), "tokens": n_tokens, "corpus_bytes": corpus_bytes}
        results["upload_seconds"] = round(upload(local, "s3://bench/big"), 2)
        results["throughput_8x1024"] = throughput(local, "s3://bench/big", corpus_bytes, work)
        small = work / "small-blocks"
        n_small = n_tokens // 8
        write_folder(small, n_small, shard_tokens=n_small // 4, block_bytes=64 << 10)
        upload(small, "s3://bench/small")
        results["fetched_25pct_full_shuffle_64KiB_blocks"] = fetched_bytes(
            "s3://bench/small", 2 * n_small, work, shuffle_group=None
        )
        group = results["throughput_8x1024"]["shuffle_group"]
        results["fetched_25pct_locality_4MiB_blocks"] = fetched_bytes(
            "s3://bench/big", corpus_bytes, work, shuffle_group=group
        )
        results["mosaicml_streaming_25pct"] = mosaic_streaming(
            local, "s3://bench", corpus_bytes, work, server.env(), group
        )
        results["prepare"] = prepare_speed(5 if args.quick else 20, "s3://bench", work)
        results["machine_load_1min_end"] = round(os.getloadavg()[0], 1)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    name = "remote-quick.json" if args.quick else "remote.json"
    (RESULTS / name).write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
