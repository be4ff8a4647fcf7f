"""Shard folders for the remote tests, written by hand from the format's contract, with small blocks.

`make_folder` writes a version-2 shard folder (`handmade_shards.write_cut_stream`: random documents, shards cut
wherever), then records each file's blocks of ``block_bytes`` (hashlib, not tokembed) and seals the manifest, so
a test can have many blocks in a few hundred KB. `upload` copies a local folder into a bucket with s3fs (not
with tokembed), manifest last.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: handmade_shards
from handmade_shards import write_cut_stream  # noqa: E402


def _blocks(data: bytes, block_bytes: int) -> list[str]:
    if not data:
        return [hashlib.sha256(b"").hexdigest()]
    return [hashlib.sha256(data[i : i + block_bytes]).hexdigest() for i in range(0, len(data), block_bytes)]


def _seal(manifest: dict) -> dict:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    return {**body, "manifest_sha256": digest.hexdigest()}


def add_blocks(root: Path, block_bytes: int | None) -> None:
    """Record each shard file's block hashes (``None``: leave the folder without, as older manifests are)."""
    manifest = json.loads((root / "manifest.json").read_text())
    for entry in manifest["splits"].values():
        for d in entry["shards"]:
            if block_bytes is None:
                d.pop("blocks", None)
                continue
            d["blocks"] = {
                "bytes": block_bytes,
                "tokens": _blocks((root / d["tokens"]).read_bytes(), block_bytes),
                "index": _blocks((root / d["index"]).read_bytes(), block_bytes),
            }
    (root / "manifest.json").write_text(json.dumps(_seal(manifest), indent=1))


def make_folder(
    root: Path,
    *,
    n_tokens: int = 60_000,
    n_shards: int = 4,
    block_bytes: int | None = 4096,
    seed: int = 0,
    align: int = 1,
) -> np.ndarray:
    """A shard folder of about ``n_tokens`` tokens of random documents; returns its token stream. Shards are
    cut at multiples of ``align`` tokens."""
    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < n_tokens:
        n = int(rng.integers(20, 1500))
        docs.append(rng.integers(0, 50256, n).tolist())
        total += n + 1
    cuts = sorted({int(c) // align * align for c in np.linspace(0, total, n_shards + 1)[1:-1]} - {0})
    stream, _ = write_cut_stream(Path(root), docs, cuts)
    add_blocks(Path(root), block_bytes)
    return stream


def upload(local: Path, url: str) -> None:
    """Copy a local folder to ``url`` (``s3://bucket/prefix``) with s3fs, the manifest last."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    base = url.removeprefix("s3://").rstrip("/")
    files = sorted(p for p in Path(local).rglob("*") if p.is_file() and not p.name.startswith("."))
    for p in sorted(files, key=lambda p: p.name == "manifest.json"):
        fs.put_file(str(p), f"{base}/{p.relative_to(local)}")


def put_bytes(url: str, data: bytes) -> None:
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True).pipe_file(url.removeprefix("s3://"), data)


def cache_bytes(cache: Path) -> int:
    """Bytes of block and temporary files under a cache folder (what its bound counts); a file evicted while the
    folder is walked counts nothing."""
    total = 0
    for p in cache.rglob("*"):
        if p.parent.name == ".locks" or p.name in ("source.json", ".tokembed-cache.lock"):
            continue
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size if p.is_file() else 0
    return total
