"""Parquet (``.parquet``): one document per row of a string column (``--field``), planned from the row groups.

The planner reads a file's footer: per row group its rows and the text column's uncompressed size. Where the
column is dictionary-encoded (pyarrow's default) that size says little about the text (a value repeated a million
times is stored once), so the planner also reads the column's value lengths once to learn its decoded size; a
plain-encoded column is never larger decoded than encoded, so its footer is enough. A row group of at most one
unit (``--shard-mb``, by the larger of the two sizes) becomes one span that the worker reads itself (that one
column), so memory is bounded by the shard size; where the worker runs in the planner's process, or spans carry
their bytes (Ray), the span takes the rows the planner decoded to size it instead: nothing is read twice. A
larger row group (pyarrow writes up to 1Mi rows into one by default, so a 1 GB file may be a single row group) is
read by the planner in batches of about 1 MiB of text (`ParquetPlan._batches` bounds them) and cut at rows into
spans that carry their values, as a gzip file's spans carry their bytes. Units end at a row group's end, or inside
a large row group at the row that fills them: the cuts depend only on the file and ``--shard-mb``.

A span's bytes (hashed for resume, carried to Ray workers, parsed by `row_records`) are its rows packed as
``int64 length per row (-1 for null), then the values' bytes``, so every engine sees the same bytes. The file is
read through an opened input (`tokembed.shards.formats.opened`): a footer and row groups by ranged reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokembed.shards.formats.base import InputFile, InputFormat, PlanOptions, RecordContext, Span
from tokembed.shards.formats.opened import OpenedInput, open_input

if TYPE_CHECKING:  # pyarrow has no type information (Any to mypy); the names say what each value is
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["ParquetFormat", "RowSpan", "read_rows", "row_records", "split_rows"]

BATCH_BYTES = 1 << 20  # text bytes per batch when the planner reads a row group
# A batch of a row group read decoded holds rows whose text may be far larger than their stored bytes where a value
# repeats (a dictionary) or shares bytes with the previous one (DELTA_BYTE_ARRAY): such a batch holds at most
# max(GUARD_ROWS, CUT_BATCH_BYTES // the longest dictionary value) rows, GUARD_ROWS without a dictionary.
CUT_BATCH_BYTES = 16 << 20
GUARD_ROWS = 64
# Encodings that store every value's bytes (plus lengths): the decoded text is never larger than the footer says.
_STORED = {"PLAIN", "RLE", "BIT_PACKED", "DELTA_LENGTH_BYTE_ARRAY"}


@dataclass
class RowSpan(Span):
    """Rows ``[start, end)`` of a Parquet file (row numbers in the file, from 0), all in row group ``group``.

    Attributes:
        group: the row group.
        column: the string column read.
        size: text bytes (for a whole row group the larger of the footer's uncompressed size and the decoded size).
        whole: the span is a whole row group (the worker reads it; never split into parts).
    """

    group: int = 0
    column: str = "text"
    size: int = 0
    whole: bool = True
    format: str = "parquet"

    def __len__(self) -> int:
        return self.size


def _row_span(span: Span) -> RowSpan:
    if not isinstance(span, RowSpan):
        raise TypeError(f"the parquet format reads the RowSpans it planned, not {span!r}")
    return span


def _is_text_type(t: Any) -> bool:
    """A string type, or a dictionary of strings (a categorical column)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def open_parquet(src: OpenedInput) -> pq.ParquetFile:
    """A `pyarrow.parquet.ParquetFile` over an opened input, read through a 1 MiB buffer (memory bounded by a
    batch, not a column chunk), verifying the pages' checksums where the writer stored them. Raises ValueError
    naming the file when it is not Parquet or its footer is missing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(src.open_file(), pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(
            f"{src.name}: not a readable Parquet file ({e}); a Parquet file keeps its row groups' index in a footer "
            "at its end, so a file cut short (an interrupted download) cannot be read at all: download it again"
        ) from None


def _describe_columns(schema: pa.Schema) -> str:
    strings = [f.name for f in schema if _is_text_type(f.type)]
    if strings:
        return "its string columns are " + ", ".join(map(repr, strings))
    return "it has no string column (columns: " + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def text_column(pf: pq.ParquetFile, path: str, field: str) -> int:
    """Index of the leaf column ``field`` (a top-level string column, or a dictionary of strings). Raises ValueError
    listing the string columns when it is missing, nested, not strings, or named twice."""
    import pyarrow as pa

    schema = pf.schema_arrow
    same = schema.get_all_field_indices(field)
    if len(same) > 1:
        raise ValueError(
            f"{path} has {len(same)} columns named {field!r} (columns {', '.join(map(str, same))}), so tokembed cannot "
            "tell which holds the text; rename them apart (e.g. pyarrow's Table.rename_columns) and write the file again"
        )
    if not same:
        top = schema.get_field_index(field.split(".")[0])
        if "." in field and top >= 0 and pa.types.is_struct(schema.field(top).type):
            raise ValueError(
                f"{path}: --field {field!r} is inside the struct column {field.split('.')[0]!r}; tokembed reads a "
                f"top-level string column: {_describe_columns(schema)} (flatten the file first, e.g. with pyarrow's "
                "Table.flatten)"
            )
        raise ValueError(f"{path} has no column {field!r}; {_describe_columns(schema)}: name one with --field")
    if not _is_text_type(schema.field(same[0]).type):
        raise ValueError(
            f"{path}: column {field!r} holds {schema.field(same[0]).type}, not text; {_describe_columns(schema)}: "
            "name one with --field"
        )
    paths = [pf.metadata.schema.column(j).path for j in range(pf.metadata.num_columns)]
    return paths.index(field)


def _strings(arr: pa.Array) -> pa.Array:  # -> a string or large_string array
    import pyarrow as pa

    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    return arr


def _offsets(arr: pa.Array) -> np.ndarray:  # a string array -> its (n + 1,) int64 offsets
    import numpy as np
    import pyarrow as pa

    dtype = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


def _packed(*arrays: pa.Array) -> bytes:
    """Arrow string arrays' rows, end to end, as ``int64 lengths (-1 for null) + values``."""
    import numpy as np

    lengths, values = [], []
    for arr in map(_strings, arrays):
        offsets = _offsets(arr)  # (n + 1,)
        n = np.diff(offsets)  # (n,)
        if arr.null_count:
            n[np.asarray(arr.is_null())] = -1
        lengths.append(n)
        data = arr.buffers()[2]
        if len(arr) and data is not None:
            values.append(memoryview(data)[offsets[0] : offsets[-1]])
    head = (lengths[0] if len(lengths) == 1 else np.concatenate([np.zeros(0, np.int64), *lengths])).astype("<i8")
    return b"".join((head.tobytes(), *values))  # (the values copied once)


def _row_lengths(arr: pa.Array) -> np.ndarray:  # -> (n,) int64
    """Text bytes per row of an Arrow string (or dictionary-of-strings) array, 0 for a null, without decoding it."""
    import numpy as np
    import pyarrow as pa

    if pa.types.is_dictionary(arr.type):
        lengths = np.diff(_offsets(_strings(arr.dictionary)))  # (n_values,)
        rows = lengths[arr.indices.fill_null(0).to_numpy(zero_copy_only=False)] if len(lengths) else np.zeros(len(arr))
    else:
        rows = np.diff(_offsets(_strings(arr)))  # (n,)
    if arr.null_count:
        rows = np.where(np.asarray(arr.is_valid()), rows, 0)
    return rows.astype(np.int64, copy=False)


def _row_sizes(data: bytes, n: int) -> np.ndarray:  # -> (n,) int64
    import numpy as np

    return np.maximum(np.frombuffer(data, "<i8", count=n), 0)  # (n,) bytes per row, 0 for null


def row_records(span: RowSpan, data: bytes) -> Iterator[tuple[bytes | None, int, int]]:
    """``(value, row, k)`` for the ``k``-th row of ``span`` (``value`` None for a null)."""
    import numpy as np

    n = span.end - span.start
    lengths = np.frombuffer(data, "<i8", count=n).tolist()
    pos = 8 * n
    for k, length in enumerate(lengths):
        if length < 0:
            yield None, span.start + k, k
            continue
        yield data[pos : pos + length], span.start + k, k
        pos += length


def read_rows(span: RowSpan, path: str) -> bytes:
    """The packed rows of ``span`` (its data, or its row group read from input ``path``)."""
    if span.data is not None:
        return span.data
    with open_input(path) as src:
        pf = open_parquet(src)
        try:
            table = pf.read_row_group(span.group, columns=[span.column], use_threads=False)
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged column chunk
            raise ValueError(
                f"{path}, row group {span.group}: cannot be read ({e}); the file is damaged: download it again"
            ) from None
        finally:
            pf.close()
    _check_rows(path, span.group, table.num_rows, span.end - span.start)
    return _packed(*table.column(0).chunks)


def _check_rows(path: str, group: int, got: int, expected: int) -> None:
    if got != expected:
        raise ValueError(
            f"{path} changed while it was being prepared (row group {group} has {got:,} rows, not {expected:,}); "
            "rerun the same command"
        )


def split_rows(span: RowSpan, part_bytes: int) -> list[RowSpan]:
    """Cut a span that carries rows read by the planner into spans of at least ``part_bytes`` text bytes."""
    if span.whole or span.data is None or span.size <= part_bytes:
        return [span]  # (a span that is not a whole row group carries its rows)
    n = span.end - span.start
    sizes = _row_sizes(span.data, n)
    ends = _cuts(sizes, part_bytes)
    out, lo, pos = [], 0, 8 * n
    for hi in ends:
        nbytes = int(sizes[lo:hi].sum())
        lengths = span.data[8 * lo : 8 * hi]
        out.append(
            RowSpan(
                span.file,
                span.start + lo,
                span.start + hi,
                span.flags,
                lengths + span.data[pos : pos + nbytes],
                group=span.group,
                column=span.column,
                size=nbytes,
                whole=False,
            )
        )
        lo, pos = hi, pos + nbytes
    return out


def _cuts(sizes: np.ndarray, target: int) -> list[int]:  # sizes: (rows,) int64
    """Row counts where spans end: each holds at least ``target`` bytes (the row that fills it ends it), the last
    the rest."""
    import numpy as np

    csum = np.cumsum(sizes)  # (rows,)
    ends, base, need = [], 0, target
    while True:
        i = int(np.searchsorted(csum, base + need, side="left"))  # the row that fills the span ends it
        if i >= len(sizes) - 1:
            ends.append(len(sizes))
            return ends
        ends.append(i + 1)
        base, need = int(csum[i]), target


def _fixed_mmap_threshold() -> None:
    """Have glibc serve allocations of 1 MiB and more with mmap, so they go back to the OS when freed. Its
    default raises the threshold to the largest block freed so far, after which the planner's unit-sized
    buffers come from the heap and fragment it: from a 20 MB to a 200 MB file of large row groups (2 workers)
    the main process's peak grew by 16 MB, and by 8 MB with the threshold fixed."""
    global _mmap_fixed
    if _mmap_fixed:
        return
    _mmap_fixed = True
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (not glibc: nothing to do)
    except (OSError, AttributeError):
        pass


_mmap_fixed = False


class ParquetPlan:
    """One Parquet file as the planner sees it (a `FilePlan`): its footer, and the row groups it reads itself."""

    def __init__(self, f: InputFile, fi: int, options: PlanOptions) -> None:
        self.path, self.size, self.fi, self.options = f.path, f.size or 0, fi, options
        self.field, self.unit_bytes = options.field, options.unit_bytes
        self.src = open_input(f.path)
        try:
            self.pf = open_parquet(self.src)
            self.col = text_column(self.pf, f.path, self.field)
        except BaseException:
            self.src.close()
            raise
        self.rows = self.pf.metadata.num_rows
        self.encoded: pq.ParquetFile | None = None  # the same file, its dictionary kept (`_dictionary_reader`)

    def spans(self, filled: Callable[[], int]) -> Iterator[RowSpan]:
        """The file's spans: whole row groups of up to ``unit_bytes`` text bytes, rows of larger ones."""
        row, keep = 0, self.options.carry or self.options.keep
        for g in range(self.pf.metadata.num_row_groups):
            n = self.pf.metadata.row_group(g).num_rows
            size, read = self._text_bytes(g, keep)
            if n and size <= self.unit_bytes:
                span = RowSpan(self.fi, row, row + n, group=g, column=self.field, size=size)
                if read is not None:  # the rows read to size the group: a worker does not read them again
                    _check_rows(self.path, g, sum(len(a) for a in read), n)
                    span.data, read = _packed(*read), None
                elif self.options.carry:
                    span.data = read_rows(span, self.path)
                yield span
            elif n:
                yield from self._large_group(g, row, n, filled)
            row += n

    def _text_bytes(self, g: int, keep: bool) -> tuple[int, list[Any] | None]:
        """Row group ``g``'s text bytes as the plan counts them: the footer's uncompressed size, or the decoded size
        where that is larger (a dictionary-encoded column of repeated values: its lengths are read, never decoded);
        with ``keep``, also the column's arrays where they were read (dictionary arrays: no larger than stored).
        A column whose encodings store every value's bytes is never larger decoded: its footer is enough; nor is a
        row group larger than a unit measured (it is cut at rows by decoded sizes anyway)."""
        stored = self.pf.metadata.row_group(g).column(self.col).total_uncompressed_size
        if stored > self.unit_bytes or not self._encoded(g):
            return stored, None  # larger than a unit either way (cut at rows), or never larger decoded
        read, size = [], 0
        for batch in self._batches(g, stored):
            size += int(_row_lengths(batch.column(0)).sum())
            if size > self.unit_bytes:
                return size, None  # larger than a unit: cut at rows (read again, in bounded batches)
            if keep:
                read.append(batch.column(0))
        return max(stored, size), read if keep else None

    def _encoded(self, g: int) -> bool:
        """Whether row group ``g``'s text column may decode to more than its stored bytes (a dictionary, or an
        encoding that shares bytes between values): then the planner reads it to learn its size (`_batches`)."""
        chunk = self.pf.metadata.row_group(g).column(self.col)
        return chunk.has_dictionary_page or not set(chunk.encodings) <= _STORED

    def _batches(self, g: int, size: int, *, cut: bool = False) -> Iterator[pa.RecordBatch]:
        """Batches of row group ``g``'s text column, about `BATCH_BYTES` of stored text each (``size``: the group's
        text bytes).

        To size a group of at most a unit, a dictionary-encoded column comes as dictionary arrays: repeated values
        are not repeated in memory, however often they occur. A group cut at rows (``cut``) comes decoded:
        pyarrow would dictionary-encode the plain pages a writer falls back to after its dictionary page fills
        (values hashed one by one, and kept until the group ends: about twice the group's text), so instead a
        batch holds at most `CUT_BATCH_BYTES` of text, or `GUARD_ROWS` copies of the longest dictionary value,
        where every row repeats it (one long value among short ones costs no more than 64-row batches).
        """
        chunk = self.pf.metadata.row_group(g).column(self.col)
        rows = max(1, BATCH_BYTES // max(1, size // max(1, self.pf.metadata.row_group(g).num_rows)))
        pf = self.pf
        if chunk.has_dictionary_page:
            if cut:  # (the dictionary page is read whole with the first row)
                reader = self._dictionary_reader()
                first = next(reader.iter_batches(batch_size=1, row_groups=[g], columns=[self.field], use_threads=False))
                longest = int(_row_lengths(first.column(0).dictionary).max(initial=0))
                rows = min(rows, max(GUARD_ROWS, CUT_BATCH_BYTES // max(1, longest)))
            else:
                pf = self._dictionary_reader()
        elif self._encoded(g):  # values that share bytes (DELTA_BYTE_ARRAY): no bound known
            rows = min(rows, GUARD_ROWS)
        return pf.iter_batches(batch_size=rows, row_groups=[g], columns=[self.field], use_threads=False)

    def _dictionary_reader(self) -> pq.ParquetFile:
        """The file again, read with the text column's dictionary kept (opened on first use)."""
        import pyarrow.parquet as pq

        if self.encoded is None:
            self.encoded = pq.ParquetFile(
                self.src.open_file(),
                read_dictionary=[self.field],
                pre_buffer=False,
                buffer_size=1 << 20,
                page_checksum_verification=True,
            )
        return self.encoded

    def _large_group(self, g: int, row: int, n: int, filled: Callable[[], int]) -> Iterator[RowSpan]:
        """Rows of row group ``g`` (``n`` by the footer) in spans that end where the unit fills (read here, in
        batches; only the rows of the span being made are decoded)."""
        import numpy as np

        _fixed_mmap_threshold()
        stored = self.pf.metadata.row_group(g).column(self.col).total_uncompressed_size
        held: list[Any] = []
        held_bytes, start, got = 0, row, 0
        for batch in self._batches(g, stored, cut=True):
            col = batch.column(0)
            got += len(col)
            sizes = _row_lengths(col)  # (rows,)
            lo = 0
            while lo < len(col):
                need = self.unit_bytes - filled() - held_bytes
                rest = sizes[lo:]
                i = int(np.searchsorted(np.cumsum(rest), need, side="left")) if need > 0 else 0
                if i >= len(rest):
                    held.append(_strings(col.slice(lo)))
                    held_bytes += int(rest.sum())
                    break
                held.append(_strings(col.slice(lo, i + 1)))
                yield self._span(g, start, held)
                start += sum(len(h) for h in held)
                held, held_bytes, lo = [], 0, lo + i + 1
        _check_rows(self.path, g, got, n)
        if held:
            yield self._span(g, start, held)

    def _span(self, g: int, start: int, held: list[Any]) -> RowSpan:
        rows = sum(len(h) for h in held)
        data = _packed(*held)
        size = len(data) - 8 * rows
        return RowSpan(self.fi, start, start + rows, 0, data, group=g, column=self.field, size=size, whole=False)

    def disk_position(self, end: int) -> int:
        """Bytes of the file "read" up to row ``end`` (in proportion to the rows), for progress."""
        return self.size * end // max(1, self.rows)

    def disk_bytes(self) -> int:
        return self.size

    def unreadable(self, error: BaseException) -> str:
        return f"{self.path}: cannot be read ({error}); the file is damaged: download it again"

    def close(self) -> None:
        self.pf.close()
        if self.encoded is not None:
            self.encoded.close()
        self.src.close()


class ParquetFormat(InputFormat):
    """One document per row of the top-level string column ``--field``; a null or blank value is an empty document."""

    name = "parquet"
    suffixes = (".parquet",)
    summary = "Parquet: one document per row of the string column --field"
    title = "Parquet"
    streamable = False
    needs_ranged_reads = "its index is at the end of the file"
    empty_what = "empty document(s) or null value(s)"
    nothing_what = "no rows"

    def check(self, f: InputFile, field: str) -> None:
        """The file opens and has the string column ``field`` (reads the footer only)."""
        with open_input(f.path) as src:
            pf = open_parquet(src)
            try:
                text_column(pf, f.path, field)
            finally:
                pf.close()

    def open_plan(self, f: InputFile, fi: int, options: PlanOptions) -> ParquetPlan:
        return ParquetPlan(f, fi, options)

    def split(self, span: Span, part_bytes: int, name: str, cut_at: Callable[[bytes, int], int] | None) -> list[Span]:
        return list(split_rows(span, part_bytes)) if isinstance(span, RowSpan) else [span]

    def read(self, span: Span, name: str) -> bytes:
        return read_rows(_row_span(span), name)

    def texts(self, span: Span, data: bytes, records: RecordContext) -> Iterator[str]:
        rows = _row_span(span)
        clean = records.control_free(data[8 * (rows.end - rows.start) :])  # the values, after the lengths
        for raw, row, k in row_records(rows, data):
            if raw is None:  # a null: an empty document
                records.empty()
                continue
            text = _valid_utf8(raw) if clean else None  # no control byte anywhere: valid UTF-8 is all decode checks
            yield text if text is not None else records.decode(raw, row, k, bytes_from=0)

    def where(self, name: str, span: Span, offset: int, k: int) -> str:
        group = span.group if isinstance(span, RowSpan) else 0
        return name if k < 0 else f"{name}, row group {group}, row {offset:,}"


def _valid_utf8(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
