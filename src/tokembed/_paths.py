"""What a path the user gave names, checked before anything is read or written.

- A URL (``s3://bucket/x``, ``gs://``, ``hf://``, ``https://``, ``file://``, any ``scheme://``) is never taken for a
  local path: ``Path("s3://bucket/x")`` is the local folder ``./s3:/bucket/x``, which a run would silently create.
  `is_url` recognises one (also as a `Path` collapsed it, ``s3:/bucket/x``); `local_path` refuses one, naming the
  scheme, where a command reads or writes local files only. Remote storage plugs in here: a command that supports
  a scheme routes the URL to its storage layer before it asks for a local path.
- A place inside a tokembed checkpoint (`enclosing_checkpoint`): an export or a shard folder written there would
  mix a user's files with what `tokembed train` writes and replaces at every save.
- A place inside (or onto) an input (`inside`): an output there could overwrite what it is being made from.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

__all__ = [
    "CHECKPOINT_FORMAT",
    "as_url",
    "enclosing_checkpoint",
    "inside",
    "is_url",
    "local_path",
    "output_path",
    "refuse_inside_checkpoint",
    "shown",
    "url_scheme",
]

CHECKPOINT_FORMAT = "tokembed-checkpoint"  # config.json's "format" in every checkpoint folder

# A scheme (RFC 3986: a letter, then letters, digits, + - .) of two or more characters, then ":/" (a Path
# collapses "s3://b" to "s3:/b"). One letter is a Windows drive ("C:/"), not a scheme.
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+):/")


def url_scheme(path: str | os.PathLike) -> str | None:
    """The scheme of a URL-looking ``path`` (``"s3"`` for ``s3://bucket/x``), lower-cased; None for a local path."""
    m = _URL.match(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else None
    return m.group(1).lower() if m else None


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a URL (``scheme://...``), also when a `Path` has collapsed it to ``scheme:/...``."""
    return url_scheme(path) is not None


def as_url(path: str | os.PathLike) -> str:
    """A URL as the user typed it: ``s3://bucket/x`` also from ``Path("s3://bucket/x")`` (``s3:/bucket/x``)."""
    text = os.fspath(path)
    scheme = url_scheme(text)
    if scheme is None:
        return text
    rest = text[len(scheme) + 1 :].lstrip("/")
    return f"{text[: len(scheme)]}://{rest}" if scheme != "file" else f"file:///{rest}"


def local_path(path: str | os.PathLike, *, what: str) -> Path:
    """``path`` as a local `Path`, refusing a URL (no command that calls this reads or writes remote storage).

    Args:
        path: what the user gave.
        what: the argument, for the message (``"--out"``, ``"the shard folder"``).

    Raises:
        ValueError: ``path`` is a URL; the message names its scheme and what to do.
    """
    scheme = url_scheme(path)
    if scheme is not None:
        url = as_url(path)
        raise ValueError(
            f"{what} {url} is a URL, and remote storage ({scheme}://) is not supported here: tokembed would have "
            f"written a local folder {os.fspath(path)!r}; copy the data to a local path and give that "
            f"(a local folder really named {os.fspath(path).split('/')[0]!r}: write ./{os.fspath(path)})"
        )
    return Path(path)


def _checkpoint_config(folder: Path) -> bool:
    try:
        with open(folder / "config.json", encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("format") == CHECKPOINT_FORMAT


def enclosing_checkpoint(path: str | os.PathLike) -> Path | None:
    """The tokembed checkpoint folder that ``path`` is (or is inside), spelled as ``path`` is; None when none is."""
    given = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    for candidates in ((given, *given.parents), (real, *real.parents)):
        for folder in candidates:
            if (folder / "config.json").is_file() and _checkpoint_config(folder):
                return folder
    return None


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` is ``folder`` or inside it, after symlinks (``path`` need not exist yet)."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def output_path(path: str | os.PathLike, *, what: str) -> Path:
    """An output the user named, as a local `Path`: not a URL (`local_path`), and not ``-``, which on a command
    line means standard output, where a command that writes files (or a folder) cannot write."""
    if os.fspath(path) == "-":
        raise ValueError(
            f"{what} - (standard output) is not supported: this command writes files; give a file name "
            "(./- for a file really named '-')"
        )
    return local_path(path, what=what)


def shown(path: str | os.PathLike) -> str:
    """``path`` as text that can be printed, drawn and written as UTF-8: the bytes of a name that is not UTF-8
    (which ``os.fsdecode`` keeps as lone surrogates, that no encoder takes) as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def refuse_inside_checkpoint(path: str | os.PathLike, *, what: str = "the output") -> None:
    """Raise when ``path`` is inside a tokembed checkpoint folder."""
    ckpt = enclosing_checkpoint(path)
    if ckpt is not None:
        raise ValueError(
            f"{what} {path} is inside the checkpoint {ckpt}; choose an output outside it "
            "(a checkpoint folder holds what `tokembed train` writes and replaces at each save)"
        )
