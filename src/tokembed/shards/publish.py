"""Uploading a finished shard folder to a URL: verified first, manifest last, resumable after a crash.

`upload_folder(local, url)` checks the local folder (`tokembed check`'s checks), then uploads each shard file the
manifest lists with its sha256 as object metadata, and ``manifest.json`` last: a remote folder without a
manifest is an unfinished upload, and no reader takes it for a shard folder. A rerun (after ``kill -9``, a lost
connection) keeps every object whose recorded sha256 and size match the manifest and uploads the rest, so the
remote folder ends with the same bytes as an uninterrupted upload. ``tokembed prepare ... --out s3://...``
prepares into a local staging folder and calls this.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokembed.shards.check import check_shards
from tokembed.shards.format import MANIFEST, ShardInfo, read_manifest
from tokembed.shards.remote import fetch_manifest
from tokembed.storage.options import remote_options
from tokembed.storage.stores import Store, open_store
from tokembed.storage.urls import public_url

__all__ = ["UploadResult", "staging_folder", "upload_folder"]

_SHARD_FILE = re.compile(r"[^/]+/\d{5}\.(bin|idx)")  # what an unfinished upload of a shard folder leaves


@dataclass
class UploadResult:
    """What `upload_folder` did: objects uploaded, objects kept (already there, verified by their recorded
    sha256), shard files removed (of an unfinished upload, or of the folder replaced)."""

    url: str
    uploaded: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def _files(manifest: dict[str, Any]) -> list[tuple[str, int, str]]:
    """``(key, size, sha256)`` of every file the manifest lists."""
    out = []
    for entry in manifest["splits"].values():
        for d in entry["shards"]:
            s = ShardInfo.from_dict(d)
            out += [(s.tokens, s.bytes, s.sha256), (s.index, s.index_bytes, s.index_sha256)]
    return out


def _existing_manifest(store: Store) -> bytes | None:
    try:
        return store.read(MANIFEST)
    except FileNotFoundError:
        return None


def upload_folder(
    local: str | os.PathLike,
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    verify: bool = True,
) -> UploadResult:
    """Upload the finished shard folder ``local`` to ``url`` (see the module's notes).

    Args:
        local: a shard folder `tokembed prepare` finished.
        url: where it goes (``s3://bucket/prefix``); the bucket must exist.
        storage_options: the storage library's options.
        overwrite: replace another shard folder at ``url`` (its manifest is removed first, so the folder reads
            as unfinished until the new manifest is in place). Shard files the manifest does not list (an
            unfinished upload of other inputs) are always removed; objects that are not shard files are never
            removed: their presence is refused (FileExistsError), with or without ``overwrite``.
        verify: check the local folder first (every checksum); a damaged folder is never uploaded.

    Raises:
        ValueError: the local folder is damaged (names the first problem).
        FileExistsError: ``url`` holds another shard folder and ``overwrite`` is False.
    """
    local = Path(local)
    manifest = read_manifest(local)
    if verify:
        problems = check_shards(local)
        if problems:
            raise ValueError(f"{local} is damaged, nothing was uploaded: {problems[0]}; prepare it again")
    store = open_store(url, storage_options)
    result = UploadResult(url=store.where())
    ours = (local / MANIFEST).read_bytes()
    theirs = _existing_manifest(store)
    if theirs == ours:
        return result  # finished before: the manifest goes last, so every file is there
    listing = store.listing()
    files = _files(manifest)
    wanted = {k for k, _, _ in files} | {MANIFEST}
    foreign = sorted(k for k in listing if k not in wanted and not _SHARD_FILE.fullmatch(k))
    if foreign:  # as a local --overwrite: what tokembed did not write is never deleted
        raise FileExistsError(
            f"{store.where()} holds objects tokembed did not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); move them away or choose an empty prefix: tokembed never "
            "deletes them, not even with --overwrite"
        )
    if theirs is not None:
        if not overwrite:
            raise FileExistsError(
                f"{store.where()} already holds another shard folder (its manifest differs from the one to upload); "
                "pass overwrite=True (--overwrite) to replace it, or choose another URL"
            )
        store.delete(MANIFEST)  # from here the remote folder reads as unfinished
    for key, size, sha in files:
        if listing.get(key) == size and store.recorded_sha256(key) == sha:
            result.kept.append(key)
            continue
        store.put_file(key, local / key, sha256=sha)
        result.uploaded.append(key)
    for key in sorted(
        set(listing) - wanted
    ):  # shard files of an unfinished earlier upload, or of the folder being replaced
        store.delete(key)
        result.removed.append(key)
    store.put_file(MANIFEST, local / MANIFEST)  # last: the folder is finished from here on
    fetch_manifest(store)  # read back: a folder that reads as finished
    return result


def staging_folder(url: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``prepare --out URL`` writes the shards before uploading them: a folder under the cache folder named
    by the URL, so that a rerun after a crash finds its finished units (and nothing else ever writes there)."""
    root = remote_options(cache_dir=cache_dir).resolved_cache_dir()
    return root / "prepare" / hashlib.sha256(public_url(url).encode()).hexdigest()[:24]
