"""Parquet inputs: one document per row of a string column, planned from the file's row groups.

The planner reads a file's footer only: per row group its rows and the text column's uncompressed bytes.
A row group of at most one unit (``--shard-mb``) becomes one span that the worker reads itself
(``read_row_group``, that one column), so memory is bounded by the shard size and the planner never
decompresses it. A larger row group (pyarrow writes up to 1Mi rows into one by default, so a 1 GB file
may be a single row group) is read by the planner in batches and cut at rows into spans that carry their
values, as a gzip file's spans carry their bytes. Units end at a row group's end, or inside a large row
group at the row that fills them: the cuts depend only on the file and ``--shard-mb``.

A span's bytes (hashed for resume, carried to Ray workers, parsed by `row_records`) are its rows packed as
``int64 length per row (-1 for null), then the values' bytes``, so every engine sees the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tokembed.shards.sources import STDIN, InputFile, Span

__all__ = ["ROWS", "ParquetPlan", "RowSpan", "check_columns", "read_rows", "row_records", "row_where", "split_rows"]

ROWS = 16  # Span.flags: the span holds Parquet rows (a `RowSpan`); 1, 2, 4 are sources', 8 is units' VAL
BATCH_BYTES = 1 << 20  # text bytes per batch when the planner reads a large row group


@dataclass
class RowSpan(Span):
    """Rows ``[start, end)`` of a Parquet file (row numbers in the file, from 0), all in row group ``group``.

    Attributes:
        group: the row group.
        column: the string column read.
        size: text bytes (for a whole row group, the column's uncompressed size from the footer).
        whole: the span is a whole row group (the worker reads it; never split into parts).
    """

    group: int = 0
    column: str = "text"
    size: int = 0
    whole: bool = True

    def __len__(self) -> int:
        return self.size


def _string_types():
    import pyarrow as pa

    return (pa.string(), pa.large_string(), pa.string_view())


def open_parquet(path: str):
    """A `pyarrow.parquet.ParquetFile` that reads through a 1 MiB buffer (memory bounded by a batch, not a
    column chunk) and verifies the pages' checksums where the writer stored them. Raises ValueError naming
    the file when it is not Parquet or its footer is missing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(
            f"{path}: not a readable Parquet file ({e}); a Parquet file keeps its row groups' index in a footer at its end, "
            "so a file cut short (an interrupted download) cannot be read at all: download it again"
        ) from None


def _describe_columns(schema) -> str:
    strings = [f.name for f in schema if f.type in _string_types()]
    if strings:
        return "its string columns are " + ", ".join(map(repr, strings))
    return "it has no string column (columns: " + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def text_column(pf, path: str, field: str) -> int:
    """Index of the leaf column ``field`` (a top-level string column). Raises ValueError listing the
    string columns when it is missing, nested or not strings."""
    import pyarrow as pa

    schema = pf.schema_arrow
    i = schema.get_field_index(field)
    if i < 0:
        top = schema.get_field_index(field.split(".")[0])
        if "." in field and top >= 0 and pa.types.is_struct(schema.field(top).type):
            raise ValueError(
                f"{path}: --field {field!r} is inside the struct column {field.split('.')[0]!r}; tokembed reads a top-level string column: {_describe_columns(schema)} (flatten the file first, e.g. with pyarrow's Table.flatten)"
            )
        raise ValueError(f"{path} has no column {field!r}; {_describe_columns(schema)}: name one with --field")
    if schema.field(i).type not in _string_types():
        raise ValueError(
            f"{path}: column {field!r} holds {schema.field(i).type}, not text; {_describe_columns(schema)}: name one with --field"
        )
    paths = [pf.metadata.schema.column(j).path for j in range(pf.metadata.num_columns)]
    return paths.index(field)


def check_columns(files: Sequence[InputFile], field: str) -> None:
    """Check, before anything is written, that every Parquet input opens and has the string column ``field``
    (raises ValueError naming the file, see `text_column`). Reads the footers only."""
    for f in files:
        if f.format == "parquet" and f.path == STDIN:
            raise ValueError(
                "Parquet cannot be read from standard input (its index is at the end of the file); save it to a file"
            )
        if f.format == "parquet":
            pf = open_parquet(f.path)
            try:
                text_column(pf, f.path, field)
            finally:
                pf.close()


def _packed(arr) -> bytes:
    """An Arrow string array's rows as ``int64 lengths (-1 for null) + values``."""
    import pyarrow as pa

    if arr.type == pa.string_view():
        arr = arr.cast(pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64 if arr.type == pa.large_string() else np.int32)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)  # (n + 1,)
    lengths = np.diff(offsets)  # (n,)
    if arr.null_count:
        lengths[np.asarray(arr.is_null())] = -1
    values = memoryview(bufs[2])[offsets[0] : offsets[-1]] if len(arr) and bufs[2] is not None else b""
    return lengths.astype("<i8").tobytes() + bytes(values)


def _row_sizes(data: bytes, n: int) -> np.ndarray:
    return np.maximum(np.frombuffer(data, "<i8", count=n), 0)  # (n,) bytes per row, 0 for null


def row_records(span: RowSpan, data: bytes) -> Iterator[tuple[bytes | None, int, int]]:
    """``(value, row, k)`` for the ``k``-th row of ``span`` (``value`` None for a null)."""
    n = span.end - span.start
    lengths = np.frombuffer(data, "<i8", count=n).tolist()
    pos = 8 * n
    for k, length in enumerate(lengths):
        if length < 0:
            yield None, span.start + k, k
            continue
        yield data[pos : pos + length], span.start + k, k
        pos += length


def row_where(name: str, span: RowSpan, row: int) -> str:
    return f"{name}, row group {span.group}, row {row:,}"


def read_rows(span: RowSpan, path: str) -> bytes:
    """The packed rows of ``span`` (its data, or its row group read from ``path``)."""
    if span.data is not None:
        return span.data
    pf = open_parquet(path)
    try:
        table = pf.read_row_group(span.group, columns=[span.column], use_threads=False)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged column chunk
        raise ValueError(
            f"{path}, row group {span.group}: cannot be read ({e}); the file is damaged: download it again"
        ) from None
    finally:
        pf.close()
    if table.num_rows != span.end - span.start:
        raise ValueError(
            f"{path} changed while it was being prepared (row group {span.group} has {table.num_rows:,} rows, not {span.end - span.start:,}); rerun the same command"
        )
    return _packed(table.column(0).combine_chunks())


def split_rows(span: RowSpan, part_bytes: int) -> list[RowSpan]:
    """Cut a span that carries rows read by the planner into spans of at least ``part_bytes`` text bytes."""
    if span.whole or span.size <= part_bytes:
        return [span]
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


def _cuts(sizes: np.ndarray, target: int) -> list[int]:
    """Row counts where spans end: each holds at least ``target`` bytes (the row that fills it ends it), the last
    the rest."""
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
    """One Parquet file as the planner sees it: its footer, and the large row groups it reads itself."""

    def __init__(self, f: InputFile, field: str):
        self.path, self.size, self.field = f.path, f.size or 0, field
        self.pf = open_parquet(f.path)
        self.col = text_column(self.pf, f.path, field)
        self.rows = self.pf.metadata.num_rows

    def spans(self, fi: int, unit_bytes: int, filled: Callable[[], int], carry: bool) -> Iterator[RowSpan]:
        """The file's spans: whole row groups of up to ``unit_bytes``, rows of larger ones."""
        row = 0
        for g in range(self.pf.metadata.num_row_groups):
            meta = self.pf.metadata.row_group(g)
            n, size = meta.num_rows, meta.column(self.col).total_uncompressed_size
            if n and size <= unit_bytes:
                span = RowSpan(fi, row, row + n, ROWS, group=g, column=self.field, size=size)
                span.data = read_rows(span, self.path) if carry else None
                yield span
            elif n:
                yield from self._large_group(fi, g, row, unit_bytes, filled)
            row += n

    def _large_group(self, fi: int, g: int, row: int, unit_bytes: int, filled: Callable[[], int]) -> Iterator[RowSpan]:
        """Rows of row group ``g`` in spans that end where the unit fills (read here, in batches)."""
        import pyarrow as pa

        _fixed_mmap_threshold()

        meta = self.pf.metadata.row_group(g)
        per_row = max(1, meta.column(self.col).total_uncompressed_size // max(1, meta.num_rows))
        held, held_bytes, start = [], 0, row
        batches = self.pf.iter_batches(
            batch_size=max(1, BATCH_BYTES // per_row), row_groups=[g], columns=[self.field], use_threads=False
        )
        for batch in batches:
            col = batch.column(0)
            sizes = _row_sizes(_packed(col), len(col))  # (rows,)
            lo = 0
            while lo < len(col):
                need = unit_bytes - filled() - held_bytes
                rest = sizes[lo:]
                i = int(np.searchsorted(np.cumsum(rest), need, side="left")) if need > 0 else 0
                if i >= len(rest):
                    held.append(col.slice(lo))
                    held_bytes += int(rest.sum())
                    break
                held.append(col.slice(lo, i + 1))
                yield self._span(fi, g, start, pa.concat_arrays(held))
                start += sum(len(h) for h in held)
                held, held_bytes, lo = [], 0, lo + i + 1
        if held:
            yield self._span(fi, g, start, pa.concat_arrays(held))

    def _span(self, fi: int, g: int, start: int, arr) -> RowSpan:
        data = _packed(arr)
        size = len(data) - 8 * len(arr)
        return RowSpan(fi, start, start + len(arr), ROWS, data, group=g, column=self.field, size=size, whole=False)

    def disk_position(self, row: int) -> int:
        """Bytes of the file "read" up to ``row`` (in proportion to the rows), for progress."""
        return self.size * row // max(1, self.rows)

    def close(self) -> None:
        self.pf.close()
