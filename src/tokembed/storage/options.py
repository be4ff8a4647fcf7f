"""The settings of remote reading: where the cache lives, how large it may grow, and the storage options.

- ``cache_dir``: ``TOKEMBED_CACHE_DIR``, else ``$XDG_CACHE_HOME/tokembed`` (``~/.cache/tokembed``; on macOS
  ``~/Library/Caches/tokembed``). One cache per machine, shared by every process that reads remote data.
- ``cache_bytes``: at most this many bytes of blocks on disk (plus the blocks in use at that moment);
  ``DEFAULT_CACHE_BYTES`` (16 GiB) unless ``TOKEMBED_CACHE_BYTES`` or the caller says otherwise. Sizes are
  written ``512MiB``, ``20GB``, ``1.5TiB`` or a number of bytes (`parse_size`).
- ``storage_options``: keyword arguments of the storage library (fsspec's ``storage_options``), for what the
  environment does not already say. Credentials are best left to the standard places (for S3:
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/credentials``,
  ``AWS_ENDPOINT_URL``); an option given here is never written to a manifest, a checkpoint, a log or a
  message (`redact`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "RemoteOptions",
    "default_cache_bytes",
    "default_cache_dir",
    "format_size",
    "parse_size",
    "parse_storage_options",
    "redact",
    "remote_options",
    "set_remote_defaults",
]

DEFAULT_CACHE_BYTES = 16 << 30  # 16 GiB: a few epochs' worth of blocks for a small corpus, a bounded slice of a big one
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]i?)?b?\s*", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from ``"512MiB"``, ``"20GB"``, ``"1.5T"``, ``"4096"`` (KiB/MiB/... are powers of 2, KB/MB/... of 10).

    Raises:
        ValueError: not a size; the message shows how to write one.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.fullmatch(str(text))
        if not m:
            raise ValueError(f"{text!r} is not a size; write e.g. 512MiB, 20GB, 1.5TiB or a number of bytes")
        value = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    if value < 0:
        raise ValueError(f"a size must be >= 0, got {text!r}")
    return value


def format_size(n: int) -> str:
    """``16 GiB``, ``512 MiB``, ``3.2 KiB``: powers of 2, as `parse_size` reads them."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"


def default_cache_dir() -> Path:
    """``TOKEMBED_CACHE_DIR``, else the user's cache folder + ``tokembed``."""
    given = os.environ.get("TOKEMBED_CACHE_DIR")
    if given:
        return Path(given).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "tokembed"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tokembed"


def default_cache_bytes() -> int:
    """``TOKEMBED_CACHE_BYTES`` (a size, see `parse_size`), else `DEFAULT_CACHE_BYTES`."""
    given = os.environ.get("TOKEMBED_CACHE_BYTES")
    if not given:
        return DEFAULT_CACHE_BYTES
    try:
        return parse_size(given)
    except ValueError as e:
        raise ValueError(f"TOKEMBED_CACHE_BYTES: {e}") from None


def parse_storage_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``["anon=true", "client_kwargs.region_name=eu-west-1"]`` -> ``{"anon": True, "client_kwargs": {...}}``.

    A value is read as JSON when it is JSON (``true``, ``3``, ``{"a": 1}``), else kept as a string; a dotted key
    makes nested dictionaries. The CLI's ``--storage-option KEY=VALUE`` uses this.

    Raises:
        ValueError: an item without ``=``, or an empty key (names the item, never its value).
    """
    out: dict[str, Any] = {}
    for item in pairs:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip() or any(not k for k in key.strip().split(".")):
            shown = f"the key {key!r}" if sep else "an item without '=' (not shown: it may be a secret)"
            raise ValueError(f"--storage-option takes KEY=VALUE (e.g. anon=true), got {shown}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        node = out
        *parents, leaf = key.strip().split(".")
        for k in parents:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ValueError(f"--storage-option {key}: {k} is given both as a value and as a group")
        node[leaf] = value
    return out


_SECRET_ENV: tuple[str, ...] = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "HF_TOKEN",
    "AZURE_STORAGE_KEY",
)
_SECRET_ENV += ("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "GOOGLE_APPLICATION_CREDENTIALS")


def _values(options: Any) -> Iterable[str]:
    if isinstance(options, Mapping):
        for v in options.values():
            yield from _values(v)
    elif isinstance(options, (list, tuple)):
        for v in options:
            yield from _values(v)
    elif isinstance(options, (str, int, float)) and not isinstance(options, bool):
        yield str(options)


def redact(text: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``text`` with every storage option's value and every credential in the environment replaced by ``***``.

    Values shorter than 4 characters (``true``, ``3``) are left: they are flags, not secrets, and replacing
    them would garble the message.
    """
    secrets = {v for v in _values(storage_options or {}) if len(v) >= 4}
    secrets |= {os.environ[k] for k in _SECRET_ENV if len(os.environ.get(k, "")) >= 4}
    for s in sorted(secrets, key=len, reverse=True):
        text = text.replace(s, "***")
    return text


@dataclass(frozen=True)
class RemoteOptions:
    """How remote folders are read: the storage options and the local cache.

    Attributes:
        storage_options: keyword arguments for the storage library (see the module's notes).
        cache_dir: the cache folder (None: `default_cache_dir`).
        cache_bytes: the cache's bound in bytes (None: `default_cache_bytes`).
    """

    storage_options: Mapping[str, Any] = field(default_factory=dict)
    cache_dir: str | os.PathLike | None = None
    cache_bytes: int | str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.storage_options, Mapping):
            raise TypeError(
                f"storage_options must be a dict of the storage library's options, got {type(self.storage_options).__name__}"
            )
        if self.cache_bytes is not None:
            object.__setattr__(self, "cache_bytes", parse_size(self.cache_bytes))
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a folder path, got {type(self.cache_dir).__name__}")

    def __repr__(self) -> str:  # never the options' values: they may be credentials
        keys = ", ".join(sorted(self.storage_options))
        return f"RemoteOptions(storage_options=<{keys or 'none'}>, cache_dir={self.cache_dir!r}, cache_bytes={self.cache_bytes!r})"

    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir).expanduser() if self.cache_dir is not None else default_cache_dir()

    def resolved_cache_bytes(self) -> int:
        return int(self.cache_bytes) if self.cache_bytes is not None else default_cache_bytes()


_DEFAULTS = RemoteOptions()


def set_remote_defaults(
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_bytes: int | str | None = None,
) -> RemoteOptions:
    """Set this process's defaults for remote folders (the CLI's ``--storage-option``, ``--cache-dir``,
    ``--cache-bytes``); keyword arguments of `remote_options` callers still win. Returns the old defaults."""
    global _DEFAULTS
    old = _DEFAULTS
    _DEFAULTS = RemoteOptions(storage_options=dict(storage_options or {}), cache_dir=cache_dir, cache_bytes=cache_bytes)
    return old


def remote_options(
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_bytes: int | str | None = None,
) -> RemoteOptions:
    """The given options, each one not given taken from this process's defaults (`set_remote_defaults`)."""
    d = _DEFAULTS
    return RemoteOptions(
        storage_options=d.storage_options if storage_options is None else storage_options,
        cache_dir=d.cache_dir if cache_dir is None else cache_dir,
        cache_bytes=d.cache_bytes if cache_bytes is None else cache_bytes,
    )
