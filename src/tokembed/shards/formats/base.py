"""What every input format is made of: the input file, the span of work, the format's contract, the record rules.

An `InputFormat` answers four questions for `tokembed prepare` and nothing else:

1. **Recognise**: ``name`` (``--format NAME``, recorded in the manifest) and ``suffixes`` (how a file is found
   in a folder); ``streamable`` says whether it can be read front to back (standard input, gzip, zstd).
2. **Plan**: ``open_plan(file, index, options)`` -> a `FilePlan` whose ``spans(filled)`` cuts the input into
   `Span` s (main process; reads as little as it can). ``split(span, part_bytes, ...)`` cuts a span further into
   parts that workers share (optional).
3. **Read**: ``read(span, name)`` -> the span's bytes (what is hashed for resume and shipped to Ray workers);
   ``texts(span, data, records)`` -> the documents' texts, a batch per span (worker process).
4. **Describe**: ``where(name, span, offset, k)`` -> where a record is, for error messages ("a.jsonl, line 57",
   "b.parquet, row group 2, row 57").

Everything else (the UTF-8 policy, empty documents, the validation split, tokenizing, counting) is shared and
lives outside the formats: a format gets it through `RecordContext`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, ClassVar, Protocol

__all__ = [
    "CONT",
    "MORE",
    "STDIN",
    "Codec",
    "FilePlan",
    "InputFile",
    "InputFormat",
    "PlanOptions",
    "RecordContext",
    "Span",
    "UnreadableInput",
]

STDIN = "-"
CONT = 1  # Span.flags: this span continues a document begun in an earlier span
MORE = 2  # Span.flags: the document goes on in the next span
# (8 is tokembed.shards.units' VAL; a format keeps its own state in its own Span subclass, not in flags)

# A record (document, piece, JSON line, Parquet value) of at least NOT_TEXT_MIN_BYTES whose bytes are more than
# NOT_TEXT_SHARE invalid UTF-8 or control bytes is refused: binaries measure 35-65% (ELF, PNG, PDF, gzip, zip),
# text in a legacy 8-bit encoding of a Cyrillic or Greek script about 50%; Latin-1 French or German 1-5%.
NOT_TEXT_SHARE = 0.2
NOT_TEXT_MIN_BYTES = 64
_CONTROL = bytes(range(0x00, 0x09)) + bytes(range(0x0E, 0x20))  # C0 controls but \t \n \v \f \r
_ESCAPED = re.compile("[\udc80-\udcff]")  # an invalid byte, decoded with surrogateescape
_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: no Unicode character (JSON can escape one)


@dataclass(frozen=True)
class InputFile:
    """One input file.

    Attributes:
        path: the path as found (``"-"`` for standard input).
        format: the name of its `InputFormat` (``"text"``, ``"jsonl"``, ``"parquet"``, or a registered one).
        compressed: read through a codec (gzip, zstd), chosen by the last suffix
            (`tokembed.shards.formats.codec_for`).
        size: bytes on disk (``None`` for standard input).
        mtime_ns: last modification time (``None`` for standard input); not part of `identity`.
    """

    path: str
    format: str
    compressed: bool
    size: int | None
    mtime_ns: int | None = None

    def identity(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "compressed": self.compressed, "bytes": self.size}


@dataclass
class Span:
    """A piece of work from one input: bytes ``[start, end)`` of the (decompressed) file for byte formats, or
    what a format's own subclass says (rows of a Parquet row group: `tokembed.shards.formats.parquet.RowSpan`).

    Attributes:
        file: index of the `InputFile`.
        start, end: where the span begins and ends (byte offsets for byte formats).
        flags: `CONT` and/or `MORE` for a piece of a document cut into pieces (higher bits are the caller's).
        data: the bytes, when the planner had to read them (a stream, or ``carry=True``); ``None`` means
            whoever tokenizes the span reads them (`InputFormat.read`).
        line: 1-based number of the span's first line when known (streams), else 0 (found on demand).
        head: for the first piece of a cut document, the document's first ``head_bytes`` bytes.
        format: the name of the `InputFormat` that planned it (and reads it).
    """

    file: int
    start: int
    end: int
    flags: int = 0
    data: bytes | None = None
    line: int = 0
    head: bytes | None = None
    format: str = "text"

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PlanOptions:
    """What the planner of one input needs to know besides the input.

    Attributes:
        unit_bytes: bytes of input per work unit (``--shard-mb``).
        carry: every span carries its bytes (for workers that cannot read the inputs: Ray).
        keep: a span carries the bytes the planner read anyway to plan it (a Parquet row group sized by decoding
            it), so that a worker in the planner's process does not read them again.
        head_bytes: give the first piece of each cut document its first ``head_bytes`` bytes (`Span.head`).
        cut_at: where a document may be cut without changing its ids (the tokenizer's rule,
            ``cut_at(window, lo) -> index or -1``; see `tokembed.shards.sources.CUTS`); None: nowhere (documents stay
            whole, and a seekable input need not be read to find out).
        field: the JSON field / Parquet column / ... holding the text (``--field``).
    """

    unit_bytes: int
    carry: bool = False
    keep: bool = False
    head_bytes: int = 0
    cut_at: Callable[[bytes, int], int] | None = None
    field: str = "text"


class FilePlan(Protocol):
    """One input as the planner reads it (made by `InputFormat.open_plan`)."""

    def spans(self, filled: Callable[[], int]) -> Iterator[Span]:
        """The input's spans in order; ``filled()`` says how many bytes the unit being filled holds already."""
        ...

    def disk_position(self, end: int) -> int:
        """Bytes of the input read from disk up to a span's ``end`` (compressed bytes for a codec), for progress."""
        ...

    def disk_bytes(self) -> int:
        """Bytes of the input read from disk in all, once its spans are planned."""
        ...

    def unreadable(self, error: BaseException) -> str:
        """The message for a read that failed while planning (how far it got, what to do)."""
        ...

    def close(self) -> None: ...


class RecordOptions(Protocol):
    """The options records are read with (a `tokembed.shards.config.PrepareConfig` has them)."""

    @property
    def field(self) -> str: ...

    @property
    def strict(self) -> bool: ...

    @property
    def skip_bad_lines(self) -> bool: ...


class InputFormat:
    """An input format for `tokembed prepare` (see the module docstring). Subclass one of the bases in
    `tokembed.shards.formats` (``TextFormat``, ``LinesFormat``, ``WholeFileFormat``) or this, and register it
    with `tokembed.shards.formats.register_format` (a class decorator too).

    Attributes:
        name: ``--format NAME``; recorded per input in the manifest (never rename a registered one).
        suffixes: lower-case file suffixes that select the format in folders, globs and explicit paths.
        summary: one line for ``--help`` and the docs ("one document per line, its text in --field").
        streamable: can be read front to back once (standard input, gzip, zstd); a format that needs ranged
            reads (Parquet: its index is at the end) says False and why in ``needs_ranged_reads``.
        title: how messages name the format ("Parquet").
        empty_what: how the "no documents" error names its empty records.
        nothing_what: how it names an input that held no record at all.
        bad_what: how it names the records `RecordContext.bad` skipped (``--skip-bad-lines``).
    """

    name: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    streamable: ClassVar[bool] = True
    needs_ranged_reads: ClassVar[str] = ""
    title: ClassVar[str] = ""
    empty_what: ClassVar[str] = "empty document(s)"
    nothing_what: ClassVar[str] = "no documents"
    bad_what: ClassVar[str] = "bad record(s) skipped"

    def __repr__(self) -> str:
        return f"<input format {self.name!r}: {type(self).__module__}.{type(self).__qualname__}>"

    # ------------------------------------------------------------------------------------- main process

    def check(self, f: InputFile, field: str) -> None:
        """Raise ValueError when ``f`` cannot be read as this format (before anything is written). Optional."""

    def open_plan(self, f: InputFile, fi: int, options: PlanOptions) -> FilePlan:
        """The planner of input number ``fi``."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement open_plan")

    def split(self, span: Span, part_bytes: int, name: str, cut_at: Callable[[bytes, int], int] | None) -> list[Span]:
        """Cut ``span`` into consecutive spans of about ``part_bytes`` (the parts workers share); tokenized one by one
        and put together they must give the span's tokens. By default a span stays whole. Pieces of one document
        carry `CONT` / `MORE` (then the span's bytes must be the document's: its split is decided from its head)."""
        return [span]

    # ------------------------------------------------------------------------------------------- worker

    def read(self, span: Span, name: str) -> bytes:
        """The bytes of ``span`` of input ``name``: what is hashed (resume) and what `texts` parses."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement read")

    def texts(self, span: Span, data: bytes, records: RecordContext) -> Iterable[str]:
        """The texts of the documents in ``span`` (its bytes ``data``), in order: a list (a batch) or an iterator.
        Records that are no document are skipped here and counted through ``records``."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement texts")

    def where(self, name: str, span: Span, offset: int, k: int) -> str:
        """Where the ``k``-th record of ``span`` (at ``offset``) is, for error messages; ``k < 0``: the span's
        only record."""
        return name


class UnreadableInput(ValueError):
    """Raised by a codec or a format's reader for an input it cannot read, with a message that does not name the
    input (the planner puts the input's name in front)."""


class Codec:
    """A compression layer that wraps any streamable format (gzip, zstd): chosen by the file's last suffix
    (``big.jsonl.zst`` is JSON Lines through zstd), read front to back. Register an instance with
    `tokembed.shards.formats.register_codec`.

    Attributes:
        name: how messages and the manifest's ``codec`` name it (``"gzip"``).
        suffix: the lower-case suffix that selects it (``".gz"``).
    """

    name: ClassVar[str] = ""
    suffix: ClassVar[str] = ""

    def wrap(self, raw: BinaryIO) -> BinaryIO:
        """A stream of the decompressed bytes of ``raw`` (closing it leaves ``raw`` open). A truncated input must
        raise (EOFError or OSError), never end quietly."""
        raise NotImplementedError(f"{type(self).__qualname__} does not implement wrap")

    def __repr__(self) -> str:
        return f"<codec {self.name!r} ({self.suffix})>"


class RecordContext:
    """What `InputFormat.texts` gets besides the bytes: the options, the shared rules for turning a record's bytes
    into text (UTF-8, strict or replaced and counted, binaries refused), and the input's counts.

    Attributes:
        fmt, name, span: the format, the input's name and the span being read.
        field: the field / column holding the text (``--field``).
        stats: the input's counts (``empty``, ``replaced``, ``bad_lines``, ...), added to the manifest.
        compressed: the input is read through a codec (byte offsets in messages are of the decompressed data).
    """

    def __init__(
        self,
        fmt: InputFormat,
        name: str,
        span: Span,
        options: RecordOptions,
        stats: dict[str, int],
        *,
        compressed: bool = False,
    ) -> None:
        self.fmt, self.name, self.span, self.options, self.stats = fmt, name, span, options, stats
        self.field, self.compressed = options.field, compressed

    def where(self, offset: int, k: int = -1) -> str:
        return self.fmt.where(self.name, self.span, offset, k)

    def empty(self) -> None:
        """Count a record that holds no document (a null)."""
        self.stats["empty"] += 1

    def bad(self, offset: int, k: int, problem: str) -> None:
        """A record that is not what the format expects: counted in ``bad_lines`` under ``--skip-bad-lines``, else
        ValueError ``"WHERE: PROBLEM"`` (say what to do in ``problem``)."""
        if self.options.skip_bad_lines:
            self.stats["bad_lines"] += 1
            return
        raise ValueError(f"{self.where(offset, k)}: {problem}")

    @staticmethod
    def control_free(data: bytes) -> bool:
        """Whether ``data`` holds no control byte (NUL, ...): then a record in it that is valid UTF-8 is never refused,
        and `decode` of it is ``raw.decode("utf-8")``."""
        return len(data.translate(None, _CONTROL)) == len(data)  # (5x faster than a regular expression's search)

    def decode(self, raw: bytes, offset: int, k: int = -1, *, bytes_from: int | None = None) -> str:
        """``raw`` as text: UTF-8; under ``strict`` invalid UTF-8 is an error naming the byte offset (counted from
        ``bytes_from``, default ``offset``: the record's place in the file), else replaced by U+FFFD and counted.
        A record that is mostly not text is refused (`refuse_non_text`)."""
        try:
            text = raw.decode("utf-8")
            self.refuse_non_text(raw, 0, offset, k)
            return text
        except UnicodeDecodeError as e:
            if self.options.strict:
                base = offset if bytes_from is None else bytes_from
                note = " of the decompressed data" if self.compressed else ""
                raise ValueError(
                    f"{self.where(offset, k)}: invalid UTF-8 at byte offset {base + e.start}{note} "
                    f"({raw[e.start : e.start + 4]!r}); fix the file, or drop --strict to replace invalid bytes with U+FFFD"
                ) from None
        self.refuse_non_text(raw, len(_ESCAPED.findall(raw.decode("utf-8", "surrogateescape"))), offset, k)
        text = raw.decode("utf-8", "replace")
        self.stats["replaced"] += text.count("\ufffd") - raw.count("\ufffd".encode())
        return text

    def unicode(self, text: str, offset: int, k: int = -1) -> str:
        """``text`` without lone surrogates (half of a UTF-16 pair, which a JSON ``\\ud800`` escape can make and no
        tokenizer can encode): an error under ``strict``, else each replaced by U+FFFD and counted in ``replaced``."""
        found = _SURROGATE.findall(text)
        if not found:
            return text
        if self.options.strict:
            raise ValueError(
                f"{self.where(offset, k)}: the text holds a lone surrogate ({ascii(found[0])}: half of a UTF-16 pair, "
                "no Unicode character, as a \\uXXXX escape can write it); fix the record, or drop --strict to replace "
                "it with U+FFFD"
            )
        self.stats["replaced"] += len(found)
        return _SURROGATE.sub("\ufffd", text)

    def refuse_non_text(self, raw: bytes, invalid: int, offset: int, k: int = -1) -> None:
        """Raise ValueError when ``raw`` is mostly not text: ``invalid`` bytes of invalid UTF-8 plus control bytes
        (NUL, ...) make more than `NOT_TEXT_SHARE` of it. A few invalid sequences are replaced and counted instead."""
        if len(raw) < NOT_TEXT_MIN_BYTES:
            return
        control = len(raw) - len(raw.translate(None, _CONTROL))
        share = (invalid + control) / len(raw)
        if share <= NOT_TEXT_SHARE:
            return
        at = f" (bytes {offset:,}-{offset + len(raw):,})" if self.span.flags & (CONT | MORE) else ""
        raise ValueError(
            f"{self.where(offset, k)}{at}: {share:.0%} of its {len(raw):,} bytes are not text ({invalid:,} invalid "
            f"UTF-8, {control:,} control bytes such as NUL): a binary file or text in another encoding; leave it out, "
            "or convert it to UTF-8 first (e.g. iconv -f cp1251 -t utf-8)"
        )
