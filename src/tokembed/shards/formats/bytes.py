"""Formats read as bytes: the planner's cursor, and three bases (a document per file, a record per line, a file
parsed whole) that text, JSON Lines and plugins such as CSV build on.

A byte format's spans are byte ranges ``[start, end)`` of the (decompressed) input. The planner reads a seekable,
uncompressed input only around the cut points (ranged reads of a few KB per unit); a stream (gzip, zstd, standard
input) is read through once and its spans carry their bytes. Workers read the rest (`ByteFormat.read`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from tokembed.shards.formats.base import (
    CONT,
    MORE,
    InputFile,
    InputFormat,
    PlanOptions,
    RecordContext,
    Span,
    UnreadableInput,
)
from tokembed.shards.formats.opened import OpenedInput, open_input
from tokembed.shards.formats.registry import codec_for

__all__ = ["SCAN", "ByteCursor", "ByteFormat", "LinesFormat", "WholeFileFormat", "find_cut", "line_cut", "line_number"]

SCAN = 1 << 16  # bytes read at a time when looking for a cut point
Cut = Callable[[bytes, int], int]  # cut(window, lo) -> the first index >= lo where a span may end, or -1


def line_cut(w: bytes, lo: int) -> int:
    """Just after the first newline at or after ``lo`` (-1 if none): where a span of whole lines may end."""
    i = w.find(b"\n", lo)
    return i + 1 if i >= 0 else -1


class ByteCursor:
    """Reads one input for planning: a seekable, uncompressed input with ranged reads around the cut points only; a
    stream (a codec, standard input) front to back, keeping the bytes from the last span's end on (they become span
    data). A seekable input is read only when a cut must be looked for in it: a small file is never read here."""

    def __init__(self, f: InputFile, carry: bool) -> None:
        self.name, self.disk_size, self.carry = f.path, f.size, carry
        self.codec = codec_for(f.path) if f.compressed else None
        self.opened: OpenedInput = open_input(f.path)
        self.seekable = self.opened.seekable and self.codec is None
        self.size = f.size if self.seekable else None
        self.raw: BinaryIO | None = None if self.seekable else self.opened.stream()
        self.stream = self.codec.wrap(self.raw) if self.codec and self.raw is not None else self.raw
        self.buf, self.base, self.eof = bytearray(), 0, False

    def window(self, pos: int, n: int) -> bytes:
        """Bytes ``[pos, pos + n)``, fewer at the end of the input. A stream never goes back before the last span's
        end."""
        if self.stream is None:  # (seekable: no stream was opened)
            return self.opened.read_at(pos, n)
        while not self.eof and self.base + len(self.buf) < pos + n:
            chunk = self.stream.read(max(SCAN, pos + n - self.base - len(self.buf)))
            if not chunk:
                self.eof = True
            self.buf += chunk
        return bytes(self.buf[pos - self.base : pos - self.base + n])

    def end(self) -> int | None:
        """The input's size, once known."""
        if self.seekable:
            return self.size
        return self.base + len(self.buf) if self.eof else None

    def take(self, start: int, end: int) -> bytes | None:
        """The bytes of a new span ``[start, end)`` when they travel with it, else None."""
        if self.seekable:
            return self.opened.read_at(start, end - start) if self.carry else None
        self.window(start, end - start)
        data = bytes(self.buf[start - self.base : end - self.base])
        del self.buf[: end - self.base]
        self.base = end
        return data

    def end_by_reading(self) -> int:
        """The input's size, reading a stream through to its end if need be (its bytes stay for `take`)."""
        while self.end() is None:
            self.window(self.read_so_far(), SCAN)
        return self.end()  # type: ignore[return-value]  # (known now)

    def read_so_far(self) -> int:
        """Bytes of the input (decompressed) read so far."""
        return self.base + len(self.buf)

    def disk_position(self, pos: int) -> int:
        """Bytes read from disk so far (compressed bytes for a codec), for progress."""
        if self.codec is None or self.raw is None:
            return pos
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return pos

    def close(self) -> None:
        if self.stream is not None and self.stream is not self.raw:
            self.stream.close()
        self.opened.close()


def find_cut(cur: ByteCursor | _SpanReader, floor: int, target: int, accept: Cut) -> int:
    """The first cut ``accept`` allows at or after byte ``target``; the end of the input if none. Nothing before
    ``floor`` (the current span's start) is read."""
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


class _BytePlan:
    """A byte format's `FilePlan`: its cursor and its `ByteFormat.plan_spans`."""

    def __init__(self, fmt: ByteFormat, f: InputFile, fi: int, options: PlanOptions) -> None:
        self.fmt, self.f, self.fi, self.options = fmt, f, fi, options
        self.cur = ByteCursor(f, options.carry)

    def spans(self, filled: Callable[[], int]) -> Iterator[Span]:
        return self.fmt.plan_spans(self.cur, self.fi, self.options, filled)

    def disk_position(self, end: int) -> int:
        return self.cur.disk_position(end)

    def disk_bytes(self) -> int:
        return self.f.size if self.f.size is not None else self.cur.disk_position(self.cur.end() or 0)

    def unreadable(self, error: BaseException) -> str:
        """What went wrong reading the input, how far the reading got, and what to do."""
        f, cur = self.f, self.cur
        if isinstance(error, UnreadableInput):
            return f"{f.path}: {error}"
        kind = cur.codec.name if cur.codec else "text"
        got = (
            f" after {cur.read_so_far():,} bytes{' (decompressed)' if f.compressed else ''}" if not cur.seekable else ""
        )
        return (
            f"{f.path}: cannot be read{got} ({error}); the file is truncated or not {kind} (or damaged): replace it and "
            "rerun (the units finished before it are kept)"
        )

    def close(self) -> None:
        self.cur.close()


class _SpanReader:
    """The bytes of one span (its data, or its input through ranged reads), as `find_cut` reads them."""

    def __init__(self, span: Span, name: str) -> None:
        self.span = span
        self.opened = open_input(name) if span.data is None else None

    def window(self, pos: int, n: int) -> bytes:
        n = max(0, min(n, self.span.end - pos))
        if self.opened is None:
            i = pos - self.span.start
            return self.span.data[i : i + n]  # type: ignore[index]  # (data is set when opened is None)
        return self.opened.read_at(pos, n)

    def end(self) -> int:
        return self.span.end

    def close(self) -> None:
        if self.opened is not None:
            self.opened.close()


class ByteFormat(InputFormat):
    """Base of the formats read as bytes. A subclass says how the planner cuts an input (`plan_spans`), how a
    span is cut into parts (`split`), and what the documents of a span's bytes are (`texts`)."""

    def open_plan(self, f: InputFile, fi: int, options: PlanOptions) -> _BytePlan:
        return _BytePlan(self, f, fi, options)

    def plan_spans(self, cur: ByteCursor, fi: int, options: PlanOptions, filled: Callable[[], int]) -> Iterator[Span]:
        """The spans of one input (``filled()``: bytes the unit being filled holds already)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement plan_spans")

    def read(self, span: Span, name: str) -> bytes:
        """The bytes of ``span`` (its data, or read from the input).

        Raises:
            ValueError: the input no longer holds those bytes (it changed or shrank since it was planned).
        """
        if span.data is not None:
            return span.data
        with open_input(name) as src:
            data = src.read_at(span.start, len(span))
        if len(data) != len(span):
            raise ValueError(
                f"{name} changed while it was being prepared (read {len(data)} of {len(span)} bytes at offset "
                f"{span.start}); rerun the same command"
            )
        return data

    def _split(self, span: Span, part_bytes: int, name: str, cut: Cut, *, pieces: bool) -> list[Span]:
        """Consecutive spans of at least ``part_bytes`` bytes (the last may be smaller), each ending where ``cut``
        allows: lines (``pieces=False``: line numbers carried on), or pieces of one document (`CONT` / `MORE`)."""
        if len(span) <= part_bytes:
            return [span]
        cur = _SpanReader(span, name)
        keep = span.flags & ~(CONT | MORE)
        out: list[Span] = []
        pos, line = span.start, span.line
        try:
            while pos < span.end:
                # a line that holds the part's last needed byte ends it; a piece ends at the first cut after it
                target = pos + part_bytes - (0 if pieces else 1)
                end = span.end if span.end - pos <= part_bytes else find_cut(cur, pos, target, cut)
                data = None if span.data is None else span.data[pos - span.start : end - span.start]
                flags = keep
                if pieces:
                    flags |= (span.flags & CONT if pos == span.start else CONT) | (
                        span.flags & MORE if end == span.end else MORE
                    )
                out.append(Span(span.file, pos, end, flags=flags, data=data, line=line, format=span.format))
                if not pieces and line and data is not None:
                    line += data.count(b"\n")
                pos = end
        finally:
            cur.close()
        return out


class LinesFormat(ByteFormat):
    """A record per line (JSON Lines, ...): units and parts end at a line's end; blank lines are skipped. A subclass
    gives `line_text`: the document's text from one line's text."""

    def line_text(self, text: str, records: RecordContext, offset: int, k: int) -> str | None:
        """The document in one (decoded, non-blank) line, or None to skip it (after ``records.bad(...)``)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement line_text")

    def plan_spans(self, cur: ByteCursor, fi: int, options: PlanOptions, filled: Callable[[], int]) -> Iterator[Span]:
        pos, line = 0, 1
        while True:
            # The line holding the unit's last needed byte ends the span (units end at a line's end).
            cut = find_cut(cur, pos, pos + options.unit_bytes - filled() - 1, line_cut)
            if cut == pos:
                return
            data = cur.take(pos, cut)
            yield Span(fi, pos, cut, data=data, line=line if data is not None else 0, format=self.name)
            if data is not None:
                line += data.count(b"\n")
            pos = cut

    def split(self, span: Span, part_bytes: int, name: str, cut_at: Cut | None) -> list[Span]:
        return self._split(span, part_bytes, name, line_cut, pieces=False)

    def texts(self, span: Span, data: bytes, records: RecordContext) -> Iterator[str]:
        # (Measured: decoding a clean span whole and splitting the text is 20% slower than this on the benchmark
        # corpus: a str of non-ASCII text splits slower than bytes.)
        offset = span.start
        for k, raw in enumerate(data.split(b"\n")):  # the last item follows the final newline: blank
            if raw and not raw.isspace():  # (= raw.strip(), without a copy)
                text = self.line_text(records.decode(raw, offset, k), records, offset, k)
                if text is not None:
                    yield text
            offset += len(raw) + 1

    def where(self, name: str, span: Span, offset: int, k: int) -> str:
        if k < 0:
            return name
        return f"{name}, line {span.line + k if span.line else line_number(name, offset)}"


class WholeFileFormat(ByteFormat):
    """A file is read whole by one worker and parsed there (CSV, XML dumps, ...): never cut, so a unit holds at
    least one whole file and memory is bounded by the largest file. A subclass gives `documents`."""

    def documents(self, text: str, records: RecordContext) -> Iterable[str | None]:
        """The documents of a whole file's text, in order (None: skipped, after ``records.bad(...)`` or
        ``records.empty()``)."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement documents")

    def plan_spans(self, cur: ByteCursor, fi: int, options: PlanOptions, filled: Callable[[], int]) -> Iterator[Span]:
        end = cur.end_by_reading()  # the whole input (a stream is read through)
        if end > 0:
            yield Span(fi, 0, end, data=cur.take(0, end), format=self.name)

    def texts(self, span: Span, data: bytes, records: RecordContext) -> Iterator[str]:
        return (t for t in self.documents(records.decode(data, 0), records) if t is not None)

    def where(self, name: str, span: Span, offset: int, k: int) -> str:
        return name if k < 0 else f"{name}, record {k + 1:,}"


def line_number(name: str, offset: int) -> int:
    """The 1-based line at byte ``offset`` of a plain input (only for error messages: reads it up to there)."""
    n, pos = 1, 0
    with open_input(name) as src:
        f = src.stream()
        while pos < offset:
            block = f.read(min(1 << 22, offset - pos))
            if not block:
                break
            n += block.count(b"\n")
            pos += len(block)
    return n
