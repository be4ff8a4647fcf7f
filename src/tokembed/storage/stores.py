"""A folder of objects at a URL: ranged reads, sizes, listings and uploads, through the ecosystem's libraries.

`open_store(url)` gives a `Store` for any registered scheme (`tokembed.storage.urls.SCHEMES`), served by fsspec
(s3fs, gcsfs, adlfs, huggingface_hub's ``HfFileSystem``, aiohttp for https); with
``TOKEMBED_STORAGE_BACKEND=obstore`` (or ``backend="obstore"``) reads of s3/gs/az/https go through obstore
instead, and writes stay with fsspec. Both were measured on the test server (Swift on loopback): ranged reads
of 4 MiB run at the same speed through either (the server is the limit; see the notes of issue 21), so the
default is fsspec, which reads credentials from every standard place (for S3 the whole botocore chain:
environment, ``~/.aws`` files, profiles, ``AWS_ENDPOINT_URL``) and serves every scheme.

Faults become errors that say what to do: a missing object or bucket is a `FileNotFoundError` naming the URL;
refused credentials a `PermissionError` naming the URL and where credentials come from; anything else (the
network, a server error) is retried ``TOKEMBED_RETRIES`` times (default 5) with exponential backoff from
``TOKEMBED_RETRY_WAIT`` seconds (default 0.5), then raised as `RemoteError` naming the URL and the byte range.
Messages never carry a storage option's value or a credential (`tokembed.storage.options.redact`).

A `Store` is picklable: it keeps the URL and the options, and each process makes its own client on first use
(an asyncio-based client does not survive a fork).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import importlib.util
import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from tokembed.storage.options import redact
from tokembed.storage.urls import Scheme, as_url, public_url, refuse_credentials, scheme_of, url_scheme

__all__ = ["BACKENDS", "RemoteError", "Store", "open_store"]

BACKENDS = ("fsspec", "obstore")
_T = TypeVar("_T")
_NOT_TRANSIENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
# A request the server refused as malformed (s3fs's codes for 400, 405, 501, ...): trying again cannot help
_BAD_REQUEST = {errno.EINVAL, errno.EPERM, errno.ENOSYS, errno.EMSGSIZE, errno.ENAMETOOLONG, errno.ENOTEMPTY}
# botocore's timeouts (s3fs's own defaults) and a single attempt: a server that never answers fails after
# TOKEMBED_RETRIES reads of ``read_timeout`` seconds, not after botocore's 5 x s3fs's 5 x 5 nested retries (minutes)
_S3_CONFIG = {"connect_timeout": 5, "read_timeout": 15, "retries": {"max_attempts": 1}}
_METADATA_KW = {"s3": "Metadata", "gs": "metadata", "az": "metadata", "abfs": "metadata"}  # user metadata on upload


_INHERITED: list[Any] = []
_OBSTORE_PID: list[int] = []  # the process that first used obstore (its runtime does not survive a fork)


def _forget_parent_sessions() -> None:
    """In a forked child: drop the finalizers of async clients inherited from the parent (s3fs, gcsfs register
    ``close_session`` with `weakref.finalize`). Run in the child, they would close the parent's connections on
    the child's event loop and print "attached to a different loop" tracebacks."""
    registry = getattr(weakref.finalize, "_registry", {})
    for f in list(registry):
        info = registry.get(f)
        if info is not None and getattr(info.func, "__name__", "") == "close_session":
            f.detach()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_sessions)


class RemoteError(ConnectionError):
    """A remote read or write that still failed after its retries; the message names the URL and the byte range."""


def _retry_settings() -> tuple[int, float]:
    try:
        return max(1, int(os.environ.get("TOKEMBED_RETRIES", "5"))), float(os.environ.get("TOKEMBED_RETRY_WAIT", "0.5"))
    except ValueError:
        raise ValueError("TOKEMBED_RETRIES must be an integer and TOKEMBED_RETRY_WAIT a number of seconds") from None


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ValueError:  # sys.modules[package] is None: blocked on purpose
        return False


def _is_not_found(e: BaseException) -> bool:
    return isinstance(e, FileNotFoundError) or type(e).__name__ in ("NotFoundError", "EntryNotFoundError")


def _is_refused(e: BaseException) -> bool:
    names = ("PermissionDeniedError", "UnauthenticatedError", "NoCredentialsError", "PartialCredentialsError")
    return isinstance(e, PermissionError) or type(e).__name__ in names  # (botocore's: none found, half given)


class Store:
    """The objects under one URL (a "folder"), read and written by fsspec.

    Args:
        url: the folder, ``scheme://bucket/prefix``.
        storage_options: keyword arguments of the fsspec filesystem (never shown in messages).

    Keys are paths relative to the folder (``"train/00000.bin"``).
    """

    backend = "fsspec"

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = refuse_credentials(url).rstrip("/")
        self.scheme: Scheme = scheme_of(self.url)
        self.storage_options = dict(storage_options or {})
        self.retries, self.retry_wait = _retry_settings()
        self._client: tuple[int, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({public_url(self.url)!r})"

    def where(self, key: str = "", span: tuple[int, int] | None = None) -> str:
        """The object's URL for messages (no credentials), with ``bytes A-B`` when a range is given."""
        url = public_url(f"{self.url}/{key}" if key else self.url)
        return f"{url} (bytes {span[0]}-{span[1] - 1})" if span else url

    # -- the client ---------------------------------------------------------------------------------

    def _need(self) -> None:
        for package in ("fsspec", self.scheme.package):
            if not _installed(package):
                raise ImportError(
                    f"reading {public_url(self.url)} needs the {package} package ({self.scheme.description}): "
                    f"{self.scheme.install_hint()}"
                )

    def _new_client(self) -> Any:
        self._need()
        import fsspec

        cls = fsspec.get_filesystem_class(self.scheme.protocol)
        options = dict(self.storage_options)
        if self.scheme.protocol == "s3":  # one try per request: `_call` retries (TOKEMBED_RETRIES), nothing nests
            options["config_kwargs"] = {**_S3_CONFIG, **options.get("config_kwargs", {})}
        client = cls(skip_instance_cache=True, **options)
        if self.scheme.protocol == "s3":
            client.retries = 1  # s3fs's own retries (5, and 5 more around each read) are a class attribute
        return client

    def client(self) -> Any:
        """This process's client (made on first use, again after a fork)."""
        if self._client is None or self._client[0] != os.getpid():
            if self._client is not None:
                # A client inherited through fork belongs to the parent's event loop: collecting it here would
                # run its finalizer against that loop. Keep it; a forked worker ends with os._exit.
                _INHERITED.append(self._client[1])
            self._client = (os.getpid(), self._new_client())
        return self._client[1]

    def _path(self, key: str) -> str:
        import fsspec

        full = f"{self.url}/{key}" if key else self.url
        return fsspec.get_filesystem_class(self.scheme.protocol)._strip_protocol(full)

    # -- errors and retries --------------------------------------------------------------------------

    def _call(self, what: str, key: str, op: Callable[[], _T], span: tuple[int, int] | None = None) -> _T:
        """``op()``, retried with backoff when the failure may pass; errors name the object (and range)."""
        where = self.where(key, span)
        for attempt in range(self.retries):
            try:
                return op()
            except (ImportError, TypeError, ValueError, AttributeError):
                raise
            except Exception as e:
                reason = redact(f"{type(e).__name__}: {e}", self.storage_options)
                if _is_not_found(e):
                    raise FileNotFoundError(
                        f"{where} was not found ({reason}); check the bucket and the path"
                    ) from None
                if _is_refused(e):
                    raise PermissionError(
                        f"{what} {where} was refused ({reason}); check the credentials: {self._credential_hint()}"
                    ) from None
                if isinstance(e, _NOT_TRANSIENT) or (isinstance(e, OSError) and e.errno in _BAD_REQUEST):
                    raise (
                        OSError(e.errno, f"{what} {where}: {reason}")
                        if e.errno
                        else type(e)(f"{what} {where}: {reason}")
                    ) from None
                if attempt + 1 == self.retries:
                    raise RemoteError(
                        f"{what} {where} failed {self.retries} times, the last with {reason}; check the network and "
                        "the endpoint (TOKEMBED_RETRIES and TOKEMBED_RETRY_WAIT set how long to keep trying)"
                    ) from None
                time.sleep(min(self.retry_wait * 2**attempt, 30.0))
        raise AssertionError("unreachable")  # the loop returns or raises

    def _credential_hint(self) -> str:
        if self.scheme.name == "s3":
            return (
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials, AWS_ENDPOINT_URL for "
                "an S3-compatible server, or --storage-option key=... --storage-option secret=..."
            )
        return (
            f"the {self.scheme.package} documentation says where credentials come from; or --storage-option KEY=VALUE"
        )

    # -- reading ---------------------------------------------------------------------------------------

    def read(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of object ``key`` (the whole object without a range)."""
        span = None if start is None or end is None else (start, end)
        data = self._call("reading", key, lambda: self._read(key, start, end), span)
        if span is not None and len(data) != end - start:  # type: ignore[operator]
            raise RemoteError(
                f"reading {self.where(key, span)} returned {len(data)} bytes, not {end - start}: the object is "  # type: ignore[operator]
                "shorter than the manifest says (was it replaced?)"
            )
        return data

    def _read(self, key: str, start: int | None, end: int | None) -> bytes:
        return bytes(self.client().cat_file(self._path(key), start=start, end=end))

    def size(self, key: str) -> int:
        """The size of object ``key`` in bytes."""
        return int(self._call("looking up", key, lambda: self.client().info(self._path(key))["size"]))

    def modified_ns(self, key: str) -> int | None:
        """When object ``key`` was last written, in nanoseconds since the epoch (None: the store does not say):
        what stands for a local file's modification time, so a rerun of prepare sees an input replaced in place."""

        def run() -> int | None:
            info = self.client().info(self._path(key))
            for name in ("LastModified", "last_modified", "mtime", "updated", "modified"):
                when = info.get(name)
                if isinstance(when, str) and when:
                    when = datetime.datetime.fromisoformat(when)
                if isinstance(when, datetime.datetime):
                    return int(when.timestamp()) * 10**9 + when.microsecond * 1000
            return None

        return self._call("looking up", key, run)

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except FileNotFoundError:
            return False
        return True

    def listing(self) -> dict[str, int]:
        """Every object under the folder: key -> size (empty when there is none)."""

        def run() -> dict[str, int]:
            fs = self.client()
            fs.invalidate_cache()
            root = self._path("")
            try:
                found = fs.find(root, detail=True)
            except FileNotFoundError:
                return {}
            return {
                p[len(root) :].lstrip("/"): int(d.get("size") or 0)
                for p, d in found.items()
                if d.get("type") != "directory"
            }

        return self._call("listing", "", run)

    def open(self, key: str) -> Any:
        """A binary file object over object ``key`` that reads by ranges (Parquet footers, streams)."""
        return self._call("opening", key, lambda: self.client().open(self._path(key), "rb"))

    # -- writing ---------------------------------------------------------------------------------------

    def put_file(self, key: str, local: str | os.PathLike, *, sha256: str | None = None) -> None:
        """Upload the local file to ``key``, with its sha256 as object metadata where the scheme keeps some."""
        kw = self._metadata(sha256)
        self._call("uploading to", key, lambda: self.client().put_file(os.fspath(local), self._path(key), **kw))

    def put_bytes(self, key: str, data: bytes, *, sha256: str | None = None) -> None:
        kw = self._metadata(sha256)
        self._call("uploading to", key, lambda: self.client().pipe_file(self._path(key), data, **kw))

    def _metadata(self, sha256: str | None) -> dict[str, Any]:
        name = _METADATA_KW.get(self.scheme.protocol)
        return {name: {"sha256": sha256}} if sha256 and name else {}

    def recorded_sha256(self, key: str) -> str | None:
        """The sha256 `put_file` recorded with the object (None: no object, or none recorded)."""

        def run() -> str | None:
            fs = self.client()
            path = self._path(key)
            try:
                meta = fs.metadata(path) if hasattr(fs, "metadata") else fs.info(path).get("metadata")
            except FileNotFoundError:
                return None
            return (meta or {}).get("sha256")

        return self._call("looking up", key, run)

    def delete(self, key: str) -> None:
        def run() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.client().rm_file(self._path(key))

        self._call("deleting", key, run)

    def make_bucket(self) -> None:
        """Create the bucket (or container) of the folder when it does not exist (tests and first uploads)."""
        fs = self.client()
        bucket = self._path("").split("/", 1)[0]
        if not fs.exists(bucket):
            self._call("creating", "", lambda: fs.mkdir(bucket))


class ObstoreStore(Store):
    """A `Store` whose reads go through obstore (Rust, ``object_store``); writes stay with fsspec.

    obstore reads credentials from the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``) and from
    ``storage_options`` (its own configuration keys); ``~/.aws`` profiles need boto3 (use the fsspec backend).
    obstore does not survive a fork (measured: a read in a forked child of a process that used it hangs), so a
    forked DataLoader worker reads through fsspec.
    """

    backend = "obstore"

    def _reader(self) -> Any:
        if not _installed("obstore"):
            raise ImportError("TOKEMBED_STORAGE_BACKEND=obstore needs obstore: pip install 'tokembed[obstore]'")
        key = ("obstore", os.getpid())
        cached = self.__dict__.get("_obstore")
        if cached is None or cached[0] != key:
            from obstore.store import from_url

            options = dict(self.storage_options)
            client = dict(options.pop("client_options", {}))
            endpoint = options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL", "")
            if str(endpoint).startswith("http://"):
                client.setdefault("allow_http", True)
            cached = (key, from_url(self.url, client_options=cast(Any, client or None), **options))
            self.__dict__["_obstore"] = cached
        return cached[1]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_obstore", None)
        return state

    def _read(self, key: str, start: int | None, end: int | None) -> bytes:
        import obstore

        if not _OBSTORE_PID:
            _OBSTORE_PID.append(os.getpid())
        if _OBSTORE_PID[0] != os.getpid():  # a forked child: obstore's runtime hangs here, fsspec reads instead
            return super()._read(key, start, end)
        if start is None or end is None:
            return bytes(obstore.get(self._reader(), key).bytes())
        return bytes(obstore.get_range(self._reader(), key, start=start, end=end))

    def size(self, key: str) -> int:
        import obstore

        return int(self._call("looking up", key, lambda: obstore.head(self._reader(), key)["size"]))


def open_store(
    url: str | os.PathLike, storage_options: Mapping[str, Any] | None = None, *, backend: str | None = None
) -> Store:
    """The `Store` of a remote folder.

    Args:
        url: ``scheme://bucket/prefix`` of a registered scheme.
        storage_options: keyword arguments of the storage library.
        backend: ``"fsspec"`` or ``"obstore"`` for reads; default ``TOKEMBED_STORAGE_BACKEND`` or fsspec.

    Raises:
        ValueError: an unknown scheme or backend (names the known ones).
        ImportError: the scheme's library is not installed (names the pip extra).
    """
    text = as_url(url)
    if url_scheme(text) == "file":
        raise ValueError(f"{text} is a local folder: read it as a path, not through a remote store")
    chosen = backend or os.environ.get("TOKEMBED_STORAGE_BACKEND") or "fsspec"
    if chosen not in BACKENDS:
        raise ValueError(f"storage backend must be one of {', '.join(BACKENDS)}, got {chosen!r}")
    scheme = scheme_of(text)
    if chosen == "obstore" and scheme.obstore:
        return ObstoreStore(text, storage_options)
    store = Store(text, storage_options)
    store._need()
    return store
