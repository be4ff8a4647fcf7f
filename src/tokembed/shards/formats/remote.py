"""Inputs at URLs: `RemoteInput`, the `opened.OpenedInput` of an object in a bucket (or on a web server).

Every scheme the storage layer knows (`tokembed.storage.urls.SCHEMES`: s3, gs, az, hf, https, ...) gets this
opener (`register_remote_openers`, called by the package). A format reads a remote input exactly as a local one:
``read_at`` is one ranged GET (text and JSON Lines spans, cut points), ``open_file`` a seekable file over ranged
GETs (pyarrow reads a Parquet footer and then only the row groups it needs), ``stream`` the object front to back
in large ranged reads (what gzip and zstd decompress). Credentials and options come from the environment and
the process's storage options (`tokembed.storage.options.set_remote_defaults`, the CLI's ``--storage-option``).

`expand_url` turns a URL that names a prefix ("folder") into its objects, and a glob (``s3://b/web/*.jsonl``) into
its matches, sorted, as ``find_inputs`` does with local folders and globs.
"""

from __future__ import annotations

import glob as globlib
import io
from typing import BinaryIO

from tokembed.shards.formats.opened import RangedFile, register_opener
from tokembed.storage.options import remote_options
from tokembed.storage.stores import Store, open_store
from tokembed.storage.urls import SCHEMES, refuse_credentials

__all__ = ["RemoteInput", "expand_url", "register_remote_openers", "storage_reads"]

_STREAM_BUFFER = 8 << 20  # a stream reads ahead in 8 MiB ranged GETs
_FILE_BUFFER = 1 << 20  # a seekable file (Parquet) reads 1 MiB at least: a footer costs one request


class RemoteInput:
    """One object at a URL, read by ranges through a `tokembed.storage.stores.Store` (see the module's notes)."""

    seekable = True

    def __init__(self, url: str) -> None:
        url = refuse_credentials(url)
        parent, _, key = url.rstrip("/").rpartition("/")
        if not key or parent.endswith(":/"):
            raise ValueError(f"{url} names a bucket, not an object; give the object's URL or a prefix with a '/'")
        self.name = url
        self.store: Store = open_store(parent, remote_options().storage_options)
        self.key = key
        self._size: int | None = None

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = self.store.size(self.key)
        return self._size

    @property
    def mtime_ns(self) -> int | None:
        """When the object was last written (the manifest records it as a local file's modification time)."""
        return self.store.modified_ns(self.key)

    def read_at(self, offset: int, n: int) -> bytes:
        end = min(self.size, offset + n)
        return self.store.read(self.key, offset, end) if end > offset else b""

    def stream(self) -> BinaryIO:
        return io.BufferedReader(RangedFile(self), buffer_size=_STREAM_BUFFER)

    def open_file(self) -> BinaryIO:
        return io.BufferedReader(RangedFile(self), buffer_size=_FILE_BUFFER)

    def close(self) -> None:
        pass

    def __enter__(self) -> RemoteInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def expand_url(url: str) -> tuple[list[str], bool]:
    """``([object URLs], named)``: the object itself (``named``: the user named it), else every object under the
    prefix, or the glob's matches, sorted. An empty list when nothing is there."""
    url = refuse_credentials(url)
    if globlib.has_magic(url):
        scheme, rest = url.split("://", 1)
        store = open_store(f"{scheme}://{rest.split('/', 1)[0]}", remote_options().storage_options)
        pattern = store._path("").rstrip("/") + "/" + rest.split("/", 1)[1]
        matches = store._call("listing", "", lambda: store.client().glob(pattern))  # retried as every request
        return sorted(f"{scheme}://{m}" for m in matches), False
    parent, _, key = url.rstrip("/").rpartition("/")
    if key and not url.endswith("/") and not parent.endswith(":/"):
        store = open_store(parent, remote_options().storage_options)
        if store.exists(key):
            return [url], True
    store = open_store(url.rstrip("/"), remote_options().storage_options)
    keys = [k for k in sorted(store.listing()) if not any(part.startswith(".") for part in k.split("/"))]
    return [f"{url.rstrip('/')}/{k}" for k in keys], False


def storage_reads(url: str) -> bool:
    """Whether ``url`` is read through the storage layer (its scheme's opener is `RemoteInput`), which can also
    list a prefix and match a glob; an opener registered for another scheme opens objects named one by one."""
    from tokembed.shards.formats.opened import opener_of

    return opener_of(url) is RemoteInput


def register_remote_openers() -> None:
    """Open every URL scheme the storage layer knows with `RemoteInput`."""
    for name in SCHEMES:
        register_opener(name, RemoteInput)
