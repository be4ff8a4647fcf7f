"""Corpus inputs: which files, in which order, and the raw documents they hold.

Inputs are files, folders (searched recursively), glob patterns, or ``-`` (standard input). Formats:

- plain text and markdown (``.txt .text .md .markdown .rst``): one document per file;
- JSON Lines (``.jsonl .ndjson``): one document per line, its text in a field (default ``text``);
- gzip-compressed versions of these (``.gz`` after the suffix).

The list is de-duplicated and sorted, so the same inputs always give the same documents in the same
order. Reading yields raw bytes; decoding and JSON parsing happen in the tokenizing workers.
"""

from __future__ import annotations

import glob
import gzip
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["FORMATS", "InputFile", "RawRecord", "iter_records", "resolve_inputs"]

FORMATS = ("auto", "text", "jsonl")
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
STDIN = "-"


@dataclass(frozen=True)
class InputFile:
    """One input file.

    Attributes:
        path: the path as found (``"-"`` for standard input).
        format: ``"text"`` (one document per file) or ``"jsonl"`` (one per line).
        compressed: gzip-compressed.
        size: bytes on disk (``None`` for standard input).
    """

    path: str
    format: str
    compressed: bool
    size: int | None

    def identity(self) -> dict:
        return {"path": self.path, "format": self.format, "compressed": self.compressed, "bytes": self.size}


@dataclass(frozen=True)
class RawRecord:
    """The raw bytes of one document, and where they came from (for error messages).

    Attributes:
        file: index of the `InputFile`.
        line: 1-based line number for JSON Lines, 0 for a whole-file document.
        offset: byte offset of the record in the (decompressed) file.
        data: the raw bytes.
    """

    file: int
    line: int
    offset: int
    data: bytes


def _format_of(path: str, forced: str) -> tuple[str, bool] | None:
    name = path.lower()
    compressed = name.endswith(".gz")
    base = name[:-3] if compressed else name
    if base.endswith(JSONL_SUFFIXES):
        return "jsonl", compressed
    if base.endswith(TEXT_SUFFIXES):
        return "text", compressed
    if forced != "auto":
        return forced, compressed
    return None


def resolve_inputs(inputs: Sequence[str | os.PathLike], *, format: str = "auto") -> list[InputFile]:
    """Expand files, folders and globs into a sorted, de-duplicated list of `InputFile`.

    Folders are searched recursively for the known suffixes (hidden files and folders are skipped);
    a file named explicitly with an unknown suffix needs ``format`` (``"text"`` or ``"jsonl"``).

    Raises:
        ValueError: no inputs, an unknown format, a folder or glob without any input file, ``-`` mixed
            with other inputs.
        FileNotFoundError: a path that does not exist.
        PermissionError: a file that cannot be read.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(p) for p in inputs]
    if not inputs:
        raise ValueError("no inputs: give files, folders, glob patterns, or - for standard input")
    if STDIN in inputs:
        if len(inputs) > 1:
            raise ValueError("- (standard input) must be the only input; got also " + ", ".join(p for p in inputs if p != STDIN))
        return [InputFile(STDIN, "jsonl" if format == "jsonl" else "text", False, None)]
    found: dict[str, InputFile] = {}

    def add(path: str, explicit: bool) -> bool:
        fmt = _format_of(path, format if explicit else "auto")
        if fmt is None:
            if explicit:
                raise ValueError(f"{path}: unknown file type; name it .txt/.md/.jsonl (optionally .gz) or pass --format text|jsonl")
            return False
        if not os.access(path, os.R_OK):
            raise PermissionError(f"{path} cannot be read (permission denied); fix its permissions or leave it out")
        found.setdefault(os.path.normpath(path), InputFile(os.path.normpath(path), fmt[0], fmt[1], os.path.getsize(path)))
        return True

    for item in inputs:
        if os.path.isdir(item):
            n = 0
            for dirpath, dirnames, filenames in os.walk(item, followlinks=True):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                for f in filenames:
                    if not f.startswith(".") and os.path.isfile(os.path.join(dirpath, f)):
                        n += add(os.path.join(dirpath, f), explicit=False)
            if n == 0:
                raise ValueError(f"folder {item} holds no input files (.txt .md .rst .jsonl .ndjson, optionally .gz)")
        elif os.path.isfile(item):
            add(item, explicit=True)
        elif glob.has_magic(item):
            matches = sorted(m for m in glob.glob(item, recursive=True) if os.path.isfile(m))
            if not matches:
                raise ValueError(f"glob {item!r} matches no file")
            for m in matches:
                add(m, explicit=True)
        elif os.path.exists(item):
            raise ValueError(f"{item} is neither a file nor a folder")
        else:
            raise FileNotFoundError(f"input {item} does not exist")
    return [found[k] for k in sorted(found)]


def _open(f: InputFile) -> BinaryIO:
    if f.path == STDIN:
        return sys.stdin.buffer
    raw = open(f.path, "rb")  # noqa: SIM115 (closed by the caller)
    return gzip.GzipFile(fileobj=raw, mode="rb") if f.compressed else raw


class _CountingReader:
    """Wraps a file: counts bytes read from disk (compressed bytes for gzip), for progress."""

    def __init__(self, f: InputFile):
        self.stream = _open(f)
        self.disk = self.stream.fileobj if isinstance(self.stream, gzip.GzipFile) else self.stream

    def disk_position(self) -> int:
        try:
            return self.disk.tell()
        except (OSError, ValueError):
            return 0


def iter_records(files: Sequence[InputFile], *, on_progress=None) -> Iterator[RawRecord]:
    """Yield every document's raw bytes, file by file, in order.

    Args:
        files: the inputs, from `resolve_inputs`.
        on_progress: optional callable ``(disk_bytes_delta) -> None``, called as input is consumed.
    """
    for i, f in enumerate(files):
        reader = _CountingReader(f)
        done = 0
        try:
            if f.format == "text":
                data = reader.stream.read()
                yield RawRecord(i, 0, 0, data)
            else:
                offset = 0
                for line_no, line in enumerate(reader.stream, start=1):
                    yield RawRecord(i, line_no, offset, line)
                    offset += len(line)
                    if on_progress is not None and line_no % 4096 == 0:
                        pos = reader.disk_position()
                        on_progress(pos - done)
                        done = pos
        except (OSError, EOFError) as e:
            raise ValueError(f"{f.path}: cannot be read ({e}); the file may be truncated or not {'gzip' if f.compressed else 'text'}") from None
        finally:
            if on_progress is not None:
                end = f.size if f.size is not None else reader.disk_position()
                on_progress(max(0, end - done))
            if f.path != STDIN:
                reader.stream.close()
                if reader.disk is not reader.stream:
                    reader.disk.close()
