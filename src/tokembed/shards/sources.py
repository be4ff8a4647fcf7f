"""Corpus inputs: which files, in which order, and how they are cut into byte spans for the workers.

Inputs are files, folders (searched recursively), glob patterns, or ``-`` (standard input). Formats:

- plain text and markdown (``.txt .text .md .markdown .rst``): one document per file;
- JSON Lines (``.jsonl .ndjson``): one document per line, its text in a field (default ``text``);
- gzip- or zstd-compressed versions of these (``.gz`` or ``.zst`` after the suffix; zstd files may hold
  many frames);
- Parquet (``.parquet``): one document per row of a string column (``field``), planned from the row
  groups by `tokembed.shards.parquet`.

The list is de-duplicated and sorted, so the same inputs always give the same documents in the same
order. `plan_units` cuts them into work units of byte `Span`s. A plain file is only read around the cut
points (the workers read the spans themselves); a stream (gzip, zstd, stdin) is read through once and each
span carries its bytes. Decoding, JSON parsing and tokenizing happen in the workers.

A text document larger than a unit is cut into pieces at **pre-tokenizer-safe points**: just before an
ASCII whitespace byte that follows a non-whitespace character. GPT-2's pre-tokenizer never joins a
non-whitespace character and the whitespace after it into one pre-token, and it matches from such a
point the same way whether or not text precedes it, so the pieces' token ids, concatenated, are exactly
the ids of the whole document (a test checks this on random text). A document with no such point
(no whitespace at all) stays whole.
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

__all__ = [
    "CONT",
    "FORMATS",
    "MORE",
    "LINES",
    "InputFile",
    "Span",
    "line_number",
    "plan_units",
    "read_span",
    "resolve_inputs",
    "CUTS",
    "never_cut",
    "safe_cut",
    "safe_space_cut",
]

FORMATS = ("auto", "text", "jsonl", "parquet")
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
CODECS = {".gz": "gzip", ".zst": "zstd"}  # compressed text and JSON Lines, by the last suffix
KNOWN_SUFFIXES = ".txt .md .rst .jsonl .ndjson (optionally .gz or .zst), .parquet"
STDIN = "-"
CONT = 1  # Span.flags: this span continues a document begun in an earlier span
MORE = 2  # Span.flags: the document goes on in the next span
LINES = 4  # Span.flags: the span holds JSON lines (else one text document or a piece of one)
SCAN = 1 << 16  # bytes read at a time when looking for a cut point


@dataclass(frozen=True)
class InputFile:
    """One input file.

    Attributes:
        path: the path as found (``"-"`` for standard input).
        format: ``"text"`` (one document per file), ``"jsonl"`` (one per line) or ``"parquet"`` (one per row).
        compressed: gzip- or zstd-compressed (`codec` says which, from the suffix).
        size: bytes on disk (``None`` for standard input).
    """

    path: str
    format: str
    compressed: bool
    size: int | None

    @property
    def codec(self) -> str | None:
        """``"gzip"`` or ``"zstd"`` for a compressed file, else None."""
        return CODECS.get(os.path.splitext(self.path.lower())[1]) if self.compressed else None

    def identity(self) -> dict:
        return {"path": self.path, "format": self.format, "compressed": self.compressed, "bytes": self.size}


@dataclass
class Span:
    """Bytes ``[start, end)`` of input file ``file`` (decompressed): whole JSON lines, or one text
    document, or a piece of one.

    Attributes:
        file: index of the `InputFile`.
        start, end: byte offsets in the (decompressed) file.
        flags: `LINES` for JSON lines; for a piece of a text document `CONT` and/or `MORE` (higher bits
            are free for the caller).
        data: the bytes, when the planner had to read them (a stream, or ``carry=True``); ``None`` means
            whoever tokenizes the span reads them from the file (`read_span`).
        line: 1-based number of the span's first line when known (streams), else 0 (found on demand).
        head: for the first piece of a cut document, the document's first ``head_bytes`` bytes.
    """

    file: int
    start: int
    end: int
    flags: int = 0
    data: bytes | None = None
    line: int = 0
    head: bytes | None = None

    def __len__(self) -> int:
        return self.end - self.start


def _format_of(path: str, forced: str) -> tuple[str, bool] | None:
    name = path.lower()
    base, last = os.path.splitext(name)
    compressed = last in CODECS
    if not compressed:
        base = name
        if name.endswith(PARQUET_SUFFIXES):
            return "parquet", False
    if base.endswith(JSONL_SUFFIXES):
        return "jsonl", compressed
    if base.endswith(TEXT_SUFFIXES):
        return "text", compressed
    if forced != "auto" and not (forced == "parquet" and compressed):  # Parquet compresses inside
        return forced, compressed
    return None


def resolve_inputs(inputs: Sequence[str | os.PathLike], *, format: str = "auto") -> list[InputFile]:
    """Expand files, folders and globs into a sorted, de-duplicated list of `InputFile`.

    Folders are searched recursively for the known suffixes (hidden files and folders are skipped);
    a file named explicitly with an unknown suffix needs ``format`` (``"text"``, ``"jsonl"`` or ``"parquet"``).

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
            raise ValueError(
                "- (standard input) must be the only input; got also " + ", ".join(p for p in inputs if p != STDIN)
            )
        return [InputFile(STDIN, "text" if format == "auto" else format, False, None)]
    found: dict[str, InputFile] = {}

    def add(path: str, explicit: bool) -> bool:
        fmt = _format_of(path, format if explicit else "auto")
        if fmt is None:
            if explicit:
                raise ValueError(
                    f"{path}: unknown file type; name it {KNOWN_SUFFIXES} or pass --format text|jsonl|parquet"
                )
            return False
        if not os.access(path, os.R_OK):
            raise PermissionError(f"{path} cannot be read (permission denied); fix its permissions or leave it out")
        found.setdefault(
            os.path.normpath(path), InputFile(os.path.normpath(path), fmt[0], fmt[1], os.path.getsize(path))
        )
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
                raise ValueError(f"folder {item} holds no input files ({KNOWN_SUFFIXES})")
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
    if f.codec == "zstd":
        from tokembed.shards.zstd import ZstdReader

        return ZstdReader(raw)
    return gzip.GzipFile(fileobj=raw, mode="rb") if f.compressed else raw


class _Cursor:
    """Reads one input for planning: a plain file with ``pread`` around the cut points only; a stream
    (gzip, zstd, stdin) front to back, keeping the bytes from the last span's end on (they become span data).
    A plain file is opened only when a cut must be looked for in it: a small file is never read here."""

    def __init__(self, f: InputFile, carry: bool):
        self.path = f.path
        self.seekable = f.path != STDIN and not f.compressed
        self.stream = None if self.seekable else _open(f)
        self.carry = carry
        self.size = f.size if self.seekable else None
        self.buf, self.base, self.eof = bytearray(), 0, False

    def window(self, pos: int, n: int) -> bytes:
        """Bytes ``[pos, pos + n)``, fewer at the end of the input. A stream never goes back before the
        last span's end."""
        if self.seekable:
            return os.pread(self._fd(), n, pos)
        while not self.eof and self.base + len(self.buf) < pos + n:
            chunk = self.stream.read(max(SCAN, pos + n - self.base - len(self.buf)))
            if not chunk:
                self.eof = True
            self.buf += chunk
        return bytes(self.buf[pos - self.base : pos - self.base + n])

    def _fd(self) -> int:
        if self.stream is None:
            self.stream = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        return self.stream.fileno()

    def end(self) -> int | None:
        """The input's size, once known."""
        if self.seekable:
            return self.size
        return self.base + len(self.buf) if self.eof else None

    def take(self, start: int, end: int) -> bytes | None:
        """The bytes of a new span ``[start, end)`` when they travel with it, else None."""
        if self.seekable:
            return os.pread(self._fd(), end - start, start) if self.carry else None
        self.window(start, end - start)
        data = bytes(self.buf[start - self.base : end - self.base])
        del self.buf[: end - self.base]
        self.base = end
        return data

    def read_so_far(self) -> int:
        """Bytes of the input (decompressed) read so far."""
        return self.base + len(self.buf)

    def disk_position(self, pos: int) -> int:
        """Bytes read from disk so far (compressed bytes for gzip and zstd), for progress."""
        if self.seekable:
            return pos
        disk = getattr(self.stream, "fileobj", None)
        try:
            return disk.tell() if disk is not None else pos
        except (OSError, ValueError):
            return pos

    def close(self) -> None:
        if self.stream is None or self.stream is sys.stdin.buffer:
            return
        disk = getattr(self.stream, "fileobj", None)
        self.stream.close()
        if disk is not None:
            disk.close()


# ASCII whitespace after an ASCII byte that is neither whitespace nor control (always a cut), or after a
# non-ASCII byte (`_non_ascii_non_space_before` decides). Runs of whitespace are skipped in C.
_CANDIDATE = re.compile(rb"(?<=[\x21-\x7e\x80-\xff])[\t\n\x0b\x0c\r ]")


def _non_ascii_non_space_before(w: bytes, i: int) -> bool:
    """Whether the non-ASCII character that ends just before ``w[i]`` is certainly not whitespace. Looks
    back at most 4 bytes (one UTF-8 character), so the answer depends only on the input, not on the window."""
    j = i - 1
    while j > max(0, i - 4) and 0x80 <= w[j] <= 0xBF:  # back to the lead byte
        j -= 1
    try:
        ch = w[j:i].decode("utf-8")
    except UnicodeDecodeError:
        return False  # invalid or cut UTF-8: not a place to cut
    # Letters, marks, numbers, punctuation and symbols are never Unicode White_Space (the regex's \s).
    return len(ch) == 1 and unicodedata.category(ch)[0] in "LMNPS"


def safe_cut(w: bytes, lo: int = 1) -> int:
    """The first index ``i >= lo`` where ``w`` may be cut for GPT-2-style tokenizers, or -1.

    ``w[i]`` is ASCII whitespace and the character before it is not whitespace, so
    ``encode(w[:i]) + encode(w[i:]) == encode(w)`` (see the module docstring)."""
    for m in _CANDIDATE.finditer(w, max(lo, 1)):
        if w[m.start() - 1] < 0x80 or _non_ascii_non_space_before(w, m.start()):
            return m.start()
    return -1


_SPACE_CANDIDATE = re.compile(rb"(?<=[\x21-\x7e\x80-\xff])[\t ]")


def safe_space_cut(w: bytes, lo: int = 1) -> int:
    """Like `safe_cut`, but only before a space or tab: safe for cl100k_base and o200k_base too, whose
    patterns glue newlines to the punctuation before them (``".\n"`` is one pre-token)."""
    for m in _SPACE_CANDIDATE.finditer(w, max(lo, 1)):
        if w[m.start() - 1] < 0x80 or _non_ascii_non_space_before(w, m.start()):
            return m.start()
    return -1


def never_cut(w: bytes, lo: int = 1) -> int:
    """No safe point is known for the tokenizer: documents stay whole."""
    return -1


# A tokenizer's rule for cutting a large document (`tokembed.tokenizer.document_cut`) -> where to cut.
CUTS = {"whitespace": safe_cut, "space": safe_space_cut, None: never_cut}


def _line_cut(w: bytes, lo: int) -> int:
    i = w.find(b"\n", lo)
    return i + 1 if i >= 0 else -1


def _find_cut(cur: _Cursor, floor: int, target: int, accept) -> int:
    """The first cut ``accept`` allows at or after byte ``target``; the end of the input if none. Nothing
    before ``floor`` (the current span's start) is read."""
    pos = max(floor, target - 4)  # 4 bytes of look-behind: a safe cut looks at the character before it
    lo = target - pos
    end = cur.end()
    if end is not None and target >= end:
        return end  # a plain file that ends before the target: nothing to read
    while True:
        w = cur.window(pos, SCAN)
        end = cur.end()
        if end is not None and target >= end:
            return end
        i = accept(w, lo)
        if i >= 0:
            return pos + i
        if len(w) < SCAN:
            return pos + len(w)
        pos, lo = pos + SCAN - 4, 4  # windows overlap by the look-behind


def _file_spans(
    cur: _Cursor, fi: int, f: InputFile, unit_bytes: int, filled, head_bytes: int, cut_at=safe_cut
) -> Iterator[Span]:
    """The spans of one input. ``filled()`` says how many bytes the current unit already holds."""
    pos = 0
    if f.format == "jsonl":
        line = 1
        while True:
            # The line holding the unit's last needed byte ends the span (units end at a line's end).
            cut = _find_cut(cur, pos, pos + unit_bytes - filled() - 1, _line_cut)
            if cut == pos:
                return
            data = cur.take(pos, cut)
            yield Span(fi, pos, cut, flags=LINES, data=data, line=line if data is not None else 0)
            if data is not None:
                line += data.count(b"\n")
            pos = cut
    # A text file is one document; one larger than a unit is cut into pieces of at least unit_bytes,
    # at safe points counted from the document's start (so the pieces do not depend on the units).
    while True:
        cut = _find_cut(cur, pos, pos + unit_bytes, cut_at)
        end = cur.end()
        more = end is None or cut < end
        flags = (CONT if pos > 0 else 0) | (MORE if more else 0)
        head = cur.window(0, head_bytes) if head_bytes and flags == MORE else None
        yield Span(fi, pos, cut, flags=flags, data=cur.take(pos, cut), head=head)
        if not more:
            return
        pos = cut


def plan_units(
    files: Sequence[InputFile],
    unit_bytes: int,
    *,
    carry: bool = False,
    head_bytes: int = 0,
    cut_at=safe_cut,
    field: str = "text",
    parquet=None,
) -> Iterator[tuple[list[Span], int]]:
    """Cut the inputs, in order, into work units of at least ``unit_bytes`` bytes (the last may be smaller).

    A unit ends at the end of the JSON line, text document or document piece that fills it. The cuts
    depend only on the input bytes and ``unit_bytes``.

    Args:
        files: the inputs, from `resolve_inputs`.
        unit_bytes: bytes of input per unit.
        carry: read every span's bytes here (for workers without access to the files); streams always do.
        head_bytes: give the first piece of each cut document its first ``head_bytes`` bytes (`Span.head`).
        cut_at: where a document may be cut (one of `CUTS`: the tokenizer's rule).
        field: the Parquet column holding the text.
        parquet: what plans a Parquet file, ``parquet(file, field)`` (`tokembed.shards.parquet.ParquetPlan`,
            given by `tokembed.shards.units.iter_units`; this module does not import it).

    Yields:
        ``(spans, disk_bytes)``: the unit's spans, and the bytes read from disk up to its end (compressed
        bytes for gzip and zstd), for progress.
    """
    unit: list[Span] = []
    size, done_files, marked = 0, 0, 0

    def filled() -> int:
        return size  # bytes the unit being filled holds so far

    for fi, f in enumerate(files):
        cur, spans = _open_plan(
            f, fi, unit_bytes, filled, carry=carry, head_bytes=head_bytes, cut_at=cut_at, planner=(parquet, field)
        )
        try:
            for span in spans:
                unit.append(span)
                size += len(span)
                if size >= unit_bytes:
                    disk = done_files + cur.disk_position(span.end)
                    yield unit, disk - marked
                    unit, size, marked = [], 0, disk
            done_files += f.size if f.size is not None else cur.disk_position(cur.end() or 0)
        except (OSError, EOFError) as e:
            raise ValueError(_unreadable(f, cur, e)) from None
        finally:
            cur.close()
    if unit:
        yield unit, max(0, done_files - marked)


def _open_plan(f: InputFile, fi: int, unit_bytes: int, filled, *, carry: bool, head_bytes: int, cut_at, planner: tuple):
    """``(cursor, spans)`` for one input: a Parquet file's row groups (``planner`` is ``(ParquetPlan, field)``),
    or a text/JSON Lines file's bytes."""
    if f.format == "parquet":
        make, field = planner
        if make is None:
            raise ValueError(f"{f.path}: plan Parquet inputs with tokembed.shards.units.iter_units (it knows how)")
        plan = make(f, field)
        return plan, plan.spans(fi, unit_bytes, filled, carry)
    cur = _Cursor(f, carry)
    return cur, _file_spans(cur, fi, f, unit_bytes, filled, head_bytes, cut_at)


def _unreadable(f: InputFile, cur, e: BaseException) -> str:
    """What went wrong reading ``f``, how far the reading got, and what to do."""
    kind = f.codec or "text"
    stream = isinstance(cur, _Cursor) and not cur.seekable
    got = f" after {cur.read_so_far():,} bytes{' (decompressed)' if f.compressed else ''}" if stream else ""
    return (
        f"{f.path}: cannot be read{got} ({e}); the file is truncated or not {kind} (or damaged): replace it and rerun "
        "(the units finished before it are kept)"
    )


class _SpanCursor:
    """The bytes of one span (its data, or its file through ``pread``), as `_find_cut` reads them."""

    def __init__(self, span: Span, path: str):
        self.span = span
        self.fd = os.open(path, os.O_RDONLY) if span.data is None else None

    def window(self, pos: int, n: int) -> bytes:
        n = max(0, min(n, self.span.end - pos))
        if self.fd is None:
            i = pos - self.span.start
            return self.span.data[i : i + n]
        return os.pread(self.fd, n, pos)

    def end(self) -> int:
        return self.span.end

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def split_span(span: Span, part_bytes: int, path: str, cut_at=safe_cut) -> list[Span]:
    """Cut ``span`` into consecutive spans of at least ``part_bytes`` bytes (the last may be smaller):
    at line ends for JSON lines, at safe points for text (each part of a document then carries `CONT` /
    `MORE` like a piece). Tokenized one by one and put together, the parts give the span's tokens."""
    if len(span) <= part_bytes:
        return [span]
    cur = _SpanCursor(span, path)
    lines = bool(span.flags & LINES)
    keep = span.flags & ~(CONT | MORE)
    out: list[Span] = []
    pos, line = span.start, span.line
    try:
        while pos < span.end:
            if span.end - pos <= part_bytes:
                cut = span.end
            elif lines:
                cut = _find_cut(cur, pos, pos + part_bytes - 1, _line_cut)
            else:
                cut = _find_cut(cur, pos, pos + part_bytes, cut_at)
            data = None if span.data is None else span.data[pos - span.start : cut - span.start]
            flags = keep
            if not lines:
                flags |= (span.flags & CONT if pos == span.start else CONT) | (
                    span.flags & MORE if cut == span.end else MORE
                )
            out.append(Span(span.file, pos, cut, flags=flags, data=data, line=line))
            if lines and line and data is not None:
                line += data.count(b"\n")
            pos = cut
    finally:
        cur.close()
    return out


def read_span(span: Span, path: str) -> bytes:
    """The bytes of ``span`` (its data, or read from ``path``).

    Raises:
        ValueError: the file no longer holds those bytes (it changed or shrank since it was planned).
    """
    if span.data is not None:
        return span.data
    with open(path, "rb") as f:
        data = os.pread(f.fileno(), len(span), span.start)
    if len(data) != len(span):
        raise ValueError(
            f"{path} changed while it was being prepared (read {len(data)} of {len(span)} bytes at offset {span.start}); rerun the same command"
        )
    return data


def line_number(path: str, offset: int) -> int:
    """The 1-based line at byte ``offset`` of a plain file (only for error messages: reads the file up to there)."""
    n, pos = 1, 0
    with open(path, "rb") as f:
        while pos < offset:
            block = f.read(min(1 << 22, offset - pos))
            if not block:
                break
            n += block.count(b"\n")
            pos += len(block)
    return n
