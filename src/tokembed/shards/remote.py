"""The remote parts of reading a shard folder: the manifest, the listing, the blocks and the machine's cache.

``open_shards("s3://bucket/shards")`` (`tokembed.shards.reader.open_remote_shards`) fetches ``manifest.json``
(`fetch_manifest`), checks it as a local one is checked (schema, seal, tokenizer), lists the folder once to find
missing or resized files (`listing_problems`), and returns a `tokembed.shards.reader.RemoteShardSet`. Its files
are read in the blocks the manifest hashes (``"blocks"`` of each shard entry; a folder written before block
hashes existed is read in whole files, checked against their sha256: `block_specs`) through the machine's
`tokembed.storage.cache.BlockCache` (`machine_cache`), keyed by the manifest's hash: another version of the
folder at the same URL never mixes in. `tokembed check` downloads one shard at a time (`download_stage`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tokembed.shards.format import CHECK_HINT, MANIFEST, ShardInfo, checked_manifest, parse_manifest
from tokembed.storage.cache import BlockCache, BlockSpec
from tokembed.storage.options import RemoteOptions, remote_options
from tokembed.storage.stores import Store, open_store

__all__ = [
    "block_specs",
    "download_stage",
    "fetch_manifest",
    "listing_problems",
    "machine_cache",
    "read_remote_manifest",
]

_CACHES: dict[tuple[int, str, int], BlockCache] = {}


def machine_cache(options: RemoteOptions) -> BlockCache:
    """This process's handle on the machine's cache at ``options``' folder (one per folder and bound)."""
    root = options.resolved_cache_dir()
    key = (os.getpid(), str(root.resolve()), options.resolved_cache_bytes())
    cache = _CACHES.get(key)
    if cache is None:
        log = os.environ.get("TOKEMBED_CACHE_LOG")  # tests and benchmarks count fetches with it
        policy = os.environ.get("TOKEMBED_CACHE_POLICY", "belady")  # "lru": the baseline of the benchmarks
        cache = _CACHES[key] = BlockCache(root, key[2], policy=policy, fetch_log=Path(log) if log else None)
    return cache


def block_specs(info: ShardInfo) -> tuple[BlockSpec, BlockSpec]:
    """The blocks of a shard's token and index files: the manifest's, or each file whole (older manifests)."""
    if info.block_bytes:
        return (
            BlockSpec(info.tokens, info.bytes, info.block_bytes, info.block_sha256),
            BlockSpec(info.index, info.index_bytes, info.block_bytes, info.index_block_sha256),
        )
    return (
        BlockSpec(info.tokens, info.bytes, max(1, info.bytes), (info.sha256,)),
        BlockSpec(info.index, info.index_bytes, max(1, info.index_bytes), (info.index_sha256,)),
    )


def listing_problems(store: Store, shards: list[ShardInfo]) -> None:
    """One listing of the folder: every file of ``shards`` is there with the size the manifest says (else a
    ValueError naming the first that is not)."""
    sizes = store.listing()
    for s in shards:
        for key, expected in ((s.tokens, s.bytes), (s.index, s.index_bytes)):
            if key not in sizes:
                raise ValueError(f"shard {key} of {store.where()} is missing; {CHECK_HINT.format(root=store.where())}")
            if sizes[key] != expected:
                raise ValueError(
                    f"{store.where(key)} has {sizes[key]} bytes, the manifest says {expected}; "
                    f"{CHECK_HINT.format(root=store.where())}"
                )


def fetch_manifest(store: Store) -> dict[str, Any]:
    """The parsed ``manifest.json`` of a remote folder (format and version checked; the rest: `checked_manifest`)."""
    root = store.where()
    try:
        data = store.read(MANIFEST)
    except FileNotFoundError as e:
        reason = str(e).partition(" was not found (")[2].partition(")")[0]  # the server's words
        raise FileNotFoundError(
            f"{root}/{MANIFEST} not found ({reason or 'no such object'}): {root} is not a finished shard folder "
            f"(a `tokembed prepare --out {root}` that did not finish uploads the manifest last: rerun it)"
        ) from None
    return parse_manifest(data, path=f"{root}/{MANIFEST}", root=root)


def read_remote_manifest(url: str, options: RemoteOptions | None = None) -> dict[str, Any]:
    """`tokembed.shards.format.read_manifest` for a folder at ``url``: fetched, its schema and seal checked.

    Raises:
        FileNotFoundError: no bucket, or no manifest (an unfinished upload; names the URL).
        ValueError: a damaged manifest (names the first problem).
    """
    store = open_store(url, (options or remote_options()).storage_options)
    return checked_manifest(fetch_manifest(store), store.where())


def download_stage(store: Store):
    """`tokembed.shards.check.check_split`'s ``stage``: one shard's two files, downloaded by ranges into a
    temporary folder (not through the cache: a check must not fill it)."""

    @contextlib.contextmanager
    def stage(s: ShardInfo) -> Iterator[Path]:
        with tempfile.TemporaryDirectory(prefix="tokembed-check-") as tmp:
            for key, size in ((s.tokens, s.bytes), (s.index, s.index_bytes)):
                with contextlib.suppress(FileNotFoundError):  # a missing object is a missing file to the checks
                    _download(store, key, size, Path(tmp) / key)
            yield Path(tmp)

    return stage


def _download(store: Store, key: str, size: int, path: Path, chunk: int = 1 << 24) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    actual = store.size(key)
    with open(path, "wb") as f:
        for start in range(0, actual, chunk):
            f.write(store.read(key, start, min(actual, start + chunk)))
