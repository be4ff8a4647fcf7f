"""An opened input: the bytes of one input, wherever they live, as the formats read them.

Formats never open paths or file descriptors themselves: they call ``open_input(name)`` and read through the
`OpenedInput` it returns, with three kinds of access:

- ``read_at(offset, n)``: a ranged read (``os.pread`` locally; an HTTP range request for an object in a bucket),
  when ``seekable``;
- ``stream()``: the bytes from the start, read once front to back (standard input, or what a codec decompresses);
- ``open_file()``: a seekable binary file object (``read``/``seek``/``tell``) for libraries that want one
  (pyarrow reads a Parquet footer and row groups through it). `RangedFile` makes one from ``read_at`` and
  ``size``, so an implementation that can do ranged reads gets it for free.

Here: `LocalInput` (a file; opened lazily, so a small file the planner never reads is never opened) and
`StdinInput` (``-``). A URL (``s3://bucket/key``, ``https://...``) is opened by the opener registered for its
scheme (`register_opener`); none is registered in this package, so a URL is an error naming it, never a local
path by accident.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, Protocol, TypeVar

from tokembed._paths import url_scheme

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_C = TypeVar("_C", bound="_Closing")

__all__ = ["LocalInput", "OpenedInput", "RangedFile", "StdinInput", "is_url", "open_input", "register_opener"]

STDIN = "-"


class OpenedInput(Protocol):
    """The bytes of one input (see the module docstring). Use it as a context manager or call `close`.

    Attributes:
        name: the input as the user named it (a path, ``-``, a URL): what messages say.
        size: its size in bytes; None when it is known only after reading it through (standard input).
        seekable: `read_at` and `open_file` work (else only `stream`).
    """

    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int | None: ...

    @property
    def seekable(self) -> bool: ...

    def read_at(self, offset: int, n: int) -> bytes:
        """Bytes ``[offset, offset + n)``, fewer only at the end of the input."""
        ...

    def stream(self) -> BinaryIO:
        """A binary stream of the bytes from the start (its ``tell()`` says how far it has read, where it can)."""
        ...

    def open_file(self) -> BinaryIO:
        """A seekable binary file of the input's bytes (closed by `close`)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> OpenedInput: ...

    def __exit__(self, *exc: object) -> None: ...


class _Closing:
    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError


class LocalInput(_Closing):
    """A local file: ``read_at`` is ``os.pread`` on a descriptor opened at the first read."""

    seekable = True

    def __init__(self, path: str) -> None:
        self.name = path
        self._fd: int | None = None
        self._files: list[BinaryIO] = []

    @property
    def size(self) -> int:
        return os.stat(self.name).st_size

    def read_at(self, offset: int, n: int) -> bytes:
        if self._fd is None:
            self._fd = os.open(self.name, os.O_RDONLY)
        data = os.pread(self._fd, n, offset)
        while 0 < len(data) < n:  # a very large read may come back in pieces (Linux: at most 2 GiB at once)
            more = os.pread(self._fd, n - len(data), offset + len(data))
            if not more:
                break
            data += more
        return data

    def stream(self) -> BinaryIO:
        f = open(self.name, "rb")  # noqa: SIM115 (closed by close())
        self._files.append(f)
        return f

    open_file = stream  # a local file object is seekable

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for f in self._files:
            f.close()
        self._files.clear()


class StdinInput(_Closing):
    """Standard input (``-``): a stream only, read once; never closed here."""

    name = STDIN
    size = None
    seekable = False

    def read_at(self, offset: int, n: int) -> bytes:
        raise ValueError("standard input cannot be read at an offset; it is read once, front to back")

    def stream(self) -> BinaryIO:
        return sys.stdin.buffer

    def open_file(self) -> BinaryIO:
        raise ValueError("standard input is not a seekable file; save it to a file first")

    def close(self) -> None:
        pass


class RangedFile(io.RawIOBase):
    """A seekable, read-only file over an opened input's ``read_at`` and ``size``: what ``open_file`` can return
    for an input that has ranged reads but no file object of its own (wrap it in ``io.BufferedReader``)."""

    def __init__(self, source: OpenedInput) -> None:
        if source.size is None:
            raise ValueError(f"{source.name}: its size is unknown, so it cannot be read as a seekable file")
        self.source, self.size, self.pos = source, source.size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self.pos = base + offset
        return self.pos

    def readinto(self, b: WriteableBuffer) -> int:
        view = memoryview(b).cast("B")
        data = self.source.read_at(self.pos, min(len(view), max(0, self.size - self.pos)))
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)


_OPENERS: dict[str, Callable[[str], OpenedInput]] = {}


def register_opener(scheme: str, opener: Callable[[str], OpenedInput]) -> None:
    """Open URLs ``SCHEME://...`` with ``opener(url) -> OpenedInput`` (for a storage layer: s3, gs, hf, https...)."""
    _OPENERS[scheme.lower()] = opener


def opener_of(name: str) -> Callable[[str], OpenedInput] | None:
    """The opener registered for ``name``'s URL scheme (None for a local path or a scheme without one)."""
    scheme = url_scheme(name)
    return None if scheme is None else _OPENERS.get(scheme)


def is_url(name: str) -> bool:
    """Whether ``name`` is a URL (``scheme://...``) rather than a local path (`tokembed._paths.is_url`)."""
    return url_scheme(name) is not None


def open_input(name: str) -> OpenedInput:
    """The `OpenedInput` of ``name``: ``-`` (standard input), a URL with a registered opener, or a local path.

    Raises:
        ValueError: a URL whose scheme no opener handles (it never becomes a local path).
    """
    if name == STDIN:
        return StdinInput()
    scheme = url_scheme(name)
    if scheme is None:
        return LocalInput(os.fspath(name))
    opener = _OPENERS.get(scheme)
    if opener is None:
        raise ValueError(
            f"input {name} is a URL, and no reader for {scheme}:// URLs is installed; "
            "copy it to a local file first (tokembed prepare reads local files and standard input)"
        )
    return opener(name)
