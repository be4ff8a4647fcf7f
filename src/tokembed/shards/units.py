"""Work units: the plan of a corpus (byte spans -> units -> parts), and tokenizing one part in a worker.

`iter_units` turns the inputs' spans (`tokembed.sources.plan_units`) into numbered units, deciding the
split of documents that get cut; `unit_parts` cuts a unit into tasks of about `PART_BYTES`;
`tokenize_unit` runs in the workers (processes or Ray tasks): it reads a part's spans (bytes of text and
JSON Lines files, or Parquet rows packed by `tokembed.shards.parquet`), hashes them, decodes (refusing a
record that is mostly not text, replacing a few invalid UTF-8 sequences), parses and tokenizes; `join_parts` puts a unit's parts back together with the sha256 of the
files `tokembed.prepare` writes. Everything here is a pure function of the input bytes and the
`PrepareConfig`, which is why the output does not depend on workers, engines or ranks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tokembed.shards.format import INDEX_DTYPE, dtype_for_vocab
from tokembed.shards.parquet import ROWS, ParquetPlan, read_rows, row_records, row_where, split_rows
from tokembed.shards.sources import (
    CONT,
    CUTS,
    LINES,
    MORE,
    InputFile,
    Span,
    line_number,
    plan_units,
    read_span,
    split_span,
)

if TYPE_CHECKING:
    from tokembed.shards.config import PrepareConfig

__all__ = [
    "PART_BYTES",
    "VAL_KEY_BYTES",
    "Unit",
    "iter_units",
    "join_parts",
    "tokenize_unit",
    "trim_heap",
    "unit_input_hash",
    "unit_parts",
]

SPLITS = ("train", "val")
FILE_STATS = ("documents", "tokens", "chars", "text_bytes", "empty", "replaced", "bad_lines")


VAL = 8  # Span.flags: a piece of a cut document that belongs to the val split
VAL_KEY_BYTES = 1 << 20  # the validation split hashes a document's first MiB of text
PART_BYTES = 1 << 20  # units are tokenized in parts of about this size, so workers share even a few units
# A record (document, piece, JSON line, Parquet value) of at least NOT_TEXT_MIN_BYTES whose bytes are more than
# NOT_TEXT_SHARE invalid UTF-8 or control bytes is refused: binaries measure 35-65% (ELF, PNG, PDF, gzip, zip),
# text in a legacy 8-bit encoding of a Cyrillic or Greek script about 50%; Latin-1 French or German 1-5%.
NOT_TEXT_SHARE = 0.2
NOT_TEXT_MIN_BYTES = 64
_CONTROL = bytes(range(0x00, 0x09)) + bytes(range(0x0E, 0x20))  # C0 controls but \t \n \v \f \r
_ESCAPED = re.compile("[\udc80-\udcff]")  # an invalid byte, decoded with surrogateescape


@dataclass
class Unit:
    """One work unit: the byte spans of consecutive documents (see `tokembed.sources.plan_units`).
    Spans of plain files carry no bytes, so a unit pickles to a few hundred bytes; workers read them.

    A unit is tokenized as tasks of about `PART_BYTES` each (`unit_parts`): each task is a `Unit` with
    the same ``id``, its own share of the spans, and its ``part`` number.

    Attributes:
        id: the unit's number (= the number of its shards).
        spans: its spans, in input order.
        disk_bytes: input bytes read from disk for the unit (for progress; 0 on parts).
        part: which part of the unit this is.
    """

    id: int
    spans: list[Span]
    disk_bytes: int = 0
    part: int = 0


def _input_hash(spans: Sequence[Span], datas: Sequence[bytes]) -> str:
    """What a finished unit was made from: every span's place, flags and bytes."""
    h = hashlib.sha256()
    for sp, data in zip(spans, datas):
        h.update(struct.pack("<4q", sp.file, sp.start, sp.end, sp.flags))
        h.update(data)
    return h.hexdigest()[:32]


def _cut_rule(config: PrepareConfig):
    """Where the config's tokenizer lets a large document be cut without changing its ids."""
    from tokembed.tokenizer import document_cut

    return CUTS[document_cut(config.build_tokenizer())]


def unit_parts(unit: Unit, config: PrepareConfig, names: dict[int, str]) -> list[Unit]:
    """Cut a unit into parts of at least `PART_BYTES` (JSON lines, documents, or pieces of documents cut at
    safe points). The parts' results, put together in order, are the unit's; the cuts depend only on the
    input. A whole document that gets cut has its split decided here, from its head, like a cut document."""
    spans: list[Span] = []
    for sp in unit.spans:
        if not sp.flags & (LINES | ROWS | CONT | MORE) and len(sp) > PART_BYTES and config.val_fraction > 0:
            n = _head_bytes()
            head = (
                sp.data[:n]
                if sp.data is not None
                else read_span(Span(sp.file, sp.start, min(sp.end, sp.start + n)), names[sp.file])
            )
            if _head_in_val(head, config.val_fraction):
                sp = dataclasses.replace(sp, flags=sp.flags | VAL)
        spans += (
            split_rows(sp, PART_BYTES)
            if sp.flags & ROWS
            else split_span(sp, PART_BYTES, names[sp.file], _cut_rule(config))
        )
    groups: list[list[Span]] = [[]]
    size = 0
    for sp in spans:
        if size >= PART_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(sp)
        size += len(sp)
    return [Unit(unit.id, g, part=k) for k, g in enumerate(groups)]


def _unit_hash(part_hashes: Sequence[str]) -> str:
    return hashlib.sha256("".join(part_hashes).encode()).hexdigest()[:32]


def unit_input_hash(parts: Sequence[Unit], names: dict[int, str]) -> str:
    """What a unit is made from, as the workers' results report it (`join_parts`); reads the parts' bytes."""
    return _unit_hash([_input_hash(p.spans, [_read(sp, names[sp.file]) for sp in p.spans]) for p in parts])


def _read(sp: Span, path: str) -> bytes:
    """A span's bytes: Parquet rows packed (`tokembed.shards.parquet`), or the bytes of a text/JSON Lines file."""
    return read_rows(sp, path) if sp.flags & ROWS else read_span(sp, path)


def iter_units(files: Sequence[InputFile], config: PrepareConfig, *, carry: bool = False) -> Iterator[Unit]:
    """The plan: the inputs cut into units of at least ``config.unit_bytes`` bytes (the last may be smaller).

    A text document cut into pieces goes to one split as a whole: the split is decided here, once, from
    the document's first `VAL_KEY_BYTES` (the same rule the workers apply to whole documents).
    """
    in_val = False
    for uid, (spans, disk_bytes) in enumerate(
        plan_units(
            files,
            config.unit_bytes,
            carry=carry,
            head_bytes=_head_bytes() if config.val_fraction > 0 else 0,
            cut_at=_cut_rule(config),
            field=config.field,
            parquet=ParquetPlan,
        )
    ):
        for sp in spans:
            if sp.head is not None:
                in_val = _head_in_val(sp.head, config.val_fraction)
                sp.head = None
            if sp.flags & (CONT | MORE) and in_val:
                sp.flags |= VAL
        yield Unit(uid, spans, disk_bytes)


# ----------------------------------------------------------------------------------------------- worker side


def _in_val(text: str, val_fraction: float) -> bool:
    """Whether a document goes to the val split: a hash of its first `VAL_KEY_BYTES` bytes of UTF-8 text.

    The planner decides for documents it cuts into pieces from their first ``VAL_KEY_BYTES + 4`` raw
    bytes decoded: UTF-8 decoding is prefix-stable except for a character cut at the end, and decoded
    text is never shorter in bytes than the raw bytes it came from, so the key is the same.
    """
    if val_fraction <= 0.0:
        return False
    key = text[:VAL_KEY_BYTES].encode("utf-8", "surrogatepass")[:VAL_KEY_BYTES]  # (a char is >= 1 byte)
    h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return h < val_fraction * 2.0**64


def _head_bytes() -> int:
    """Raw bytes that decide the split of a document that gets cut: the key plus one UTF-8 character."""
    return VAL_KEY_BYTES + 4


def _head_in_val(head: bytes, val_fraction: float) -> bool:
    """`_in_val` of a document that gets cut, from its first `_head_bytes()` raw bytes (see `_in_val`)."""
    return _in_val(head.decode("utf-8", "replace"), val_fraction)


def trim_heap() -> None:
    """Give freed heap memory back to the OS (glibc keeps freed blocks of up to 32 MB in the heap, so
    without this a long run's resident memory creeps up with fragmentation instead of staying flat)."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


def _records(sp: Span, data: bytes) -> Iterator[tuple[bytes | None, int, int]]:
    """``(raw, offset, k)`` for each record of a span: its JSON lines (``k``-th line of the span), its Parquet
    rows (``offset`` the row number, ``raw`` None for a null), or its one document or piece (``k = -1``)."""
    if sp.flags & ROWS:
        yield from row_records(sp, data)
        return
    if not sp.flags & LINES:
        yield data, sp.start, -1
        return
    offset = sp.start
    for k, raw in enumerate(data.split(b"\n")):  # the last item follows the final newline: blank
        yield raw, offset, k
        offset += len(raw) + 1


def tokenize_unit(unit: Unit, config: PrepareConfig, names: Sequence[str] | dict[int, str]) -> dict[str, Any]:
    """Tokenize one unit (runs in a worker): read its spans, hash them, decode, parse, tokenize.

    Returns per-split token and index arrays with their sha256, the unit's input hash, and per-input-file
    counts. Raises ValueError naming the file and line or byte offset for bad input.
    """
    from tokembed.tokenizer.fast import token_encoder

    trim_heap()  # the previous unit's buffers are gone by now
    enc = config.build_tokenizer()
    encoder = token_encoder(enc, config.backend)  # tiktoken's ids, from gigatoken when installed (tested)
    datas = [_read(sp, names[sp.file]) for sp in unit.spans]
    input_hash = _input_hash(unit.spans, datas)
    acc = _UnitTokens(enc.eot_token, dtype_for_vocab(enc.n_vocab))
    for sp, data in zip(unit.spans, datas):
        st = acc.stats.setdefault(sp.file, dict.fromkeys(FILE_STATS, 0))
        for raw, offset, k in _records(sp, data):
            where = _Where(names[sp.file], sp, offset, k)
            text = _record_text(raw, where, config, st)
            if text is None:
                continue
            if sp.flags & (CONT | MORE):  # a piece of a cut document: never blank, its split decided by the planner
                split = "val" if sp.flags & VAL else "train"
            elif not text.strip():
                st["empty"] += 1
                continue
            else:
                split = "val" if _in_val(text, config.val_fraction) else "train"
            acc.add(split, encoder.encode_ordinary(text), text, sp, st)
    del datas
    return acc.result(unit, input_hash)


class _Where:
    """Where a record is, for error messages: the file, and the line for JSON Lines (counted on demand) or the
    row group and row for Parquet."""

    def __init__(self, name: str, sp: Span, offset: int, k: int) -> None:
        self.name, self.sp, self.offset, self.k = name, sp, offset, k

    def __str__(self) -> str:
        if self.k < 0:
            return self.name
        if self.sp.flags & ROWS:
            return row_where(self.name, self.sp, self.offset)
        line = self.sp.line + self.k if self.sp.line else line_number(self.name, self.offset)
        return f"{self.name}, line {line}"


def _record_text(raw: bytes | None, where: _Where, config: PrepareConfig, st: dict[str, int]) -> str | None:
    """The text of one record (a document, a piece of one, a Parquet value, or a JSON line's field); None to
    skip it."""
    lines = where.sp.flags & LINES
    if raw is None:  # a null in a Parquet column: an empty document
        st["empty"] += 1
        return None
    if lines and not raw.strip():
        return None  # blank line in JSON Lines
    text = _decode(raw, where, config, st)
    if not lines:
        return text
    return _json_field(text, where, config, st)


def _decode(raw: bytes, where: _Where, config: PrepareConfig, st: dict[str, int]) -> str:
    try:
        text = raw.decode("utf-8")
        _refuse_non_text(raw, 0, where)
        return text
    except UnicodeDecodeError as e:
        if config.strict:
            gz = " of the decompressed data" if where.name.endswith((".gz", ".zst")) else ""
            raise ValueError(
                f"{where}: invalid UTF-8 at byte offset {e.start if where.sp.flags & ROWS else where.offset + e.start}{gz} ({raw[e.start : e.start + 4]!r}); "
                "fix the file, or drop --strict to replace invalid bytes with U+FFFD"
            ) from None
    _refuse_non_text(raw, len(_ESCAPED.findall(raw.decode("utf-8", "surrogateescape"))), where)
    text = raw.decode("utf-8", "replace")
    st["replaced"] += text.count("\ufffd") - raw.count("\ufffd".encode())
    return text


def _refuse_non_text(raw: bytes, invalid: int, where: _Where) -> None:
    """Raise ValueError when ``raw`` is mostly not text: ``invalid`` bytes of invalid UTF-8 plus control bytes
    (NUL, ...) make more than `NOT_TEXT_SHARE` of it. A few invalid sequences are replaced and counted instead."""
    if len(raw) < NOT_TEXT_MIN_BYTES:
        return
    control = len(raw) - len(raw.translate(None, _CONTROL))
    share = (invalid + control) / len(raw)
    if share <= NOT_TEXT_SHARE:
        return
    at = f" (bytes {where.offset:,}-{where.offset + len(raw):,})" if where.sp.flags & (CONT | MORE) else ""
    raise ValueError(
        f"{where}{at}: {share:.0%} of its {len(raw):,} bytes are not text ({invalid:,} invalid UTF-8, {control:,} "
        "control bytes such as NUL): a binary file or text in another encoding; leave it out, or convert it to "
        "UTF-8 first (e.g. iconv -f cp1251 -t utf-8)"
    )


def _json_field(text: str, where: _Where, config: PrepareConfig, st: dict[str, int]) -> str | None:
    """The ``config.field`` string of a JSON line; None (counted) for a bad line under ``skip_bad_lines``."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if config.skip_bad_lines:
            st["bad_lines"] += 1
            return None
        raise ValueError(
            f"{where}: not valid JSON ({e.msg} at column {e.colno}); fix the line or pass --skip-bad-lines"
        ) from None
    value = obj.get(config.field) if isinstance(obj, dict) else None
    if isinstance(value, str):
        return value
    if config.skip_bad_lines:
        st["bad_lines"] += 1
        return None
    if not isinstance(obj, dict) or config.field not in obj:
        what = "lacks the field"
    else:
        what = f"has a non-string {type(value).__name__} in field"
    keys = f" (it has {', '.join(map(repr, list(obj)[:8]))})" if isinstance(obj, dict) else ""
    raise ValueError(
        f"{where}: the JSON record {what} {config.field!r}{keys}; choose the field with --field, or pass --skip-bad-lines"
    )


class _UnitTokens:
    """A unit's (or part's) tokens as they are made: per split the arrays, where documents start, counts."""

    def __init__(self, eot: int, dtype: np.dtype) -> None:
        self.eot, self.dtype = eot, dtype
        self.pieces: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
        self.starts: dict[str, list[int]] = {s: [] for s in SPLITS}  # document starts within the split's shard
        self.filled = dict.fromkeys(SPLITS, 0)
        self.stats: dict[int, dict[str, int]] = {}

    def add(self, split: str, ids: np.ndarray, text: str, sp: Span, st: dict[str, int]) -> None:
        """Append a document's (or piece's) ids, and its ``<|endoftext|>`` when the document ends here."""
        end = not sp.flags & MORE
        arr = np.empty(len(ids) + end, dtype=self.dtype)
        arr[: len(ids)] = ids
        if end:
            arr[-1] = self.eot
        if not sp.flags & CONT:
            self.starts[split].append(self.filled[split])
            st["documents"] += 1
        self.pieces[split].append(arr)
        self.filled[split] += len(arr)
        st["tokens"] += len(ids)
        st["chars"] += len(text)
        st["text_bytes"] += len(text.encode("utf-8", "surrogatepass"))

    def result(self, unit: Unit, input_hash: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "unit": unit.id,
            "part": unit.part,
            "input_hash": input_hash,
            "stats": self.stats,
            "splits": {},
        }
        for s in SPLITS:
            if self.pieces[s]:
                out["splits"][s] = {
                    "tokens": np.concatenate(self.pieces[s]),  # (n_tokens,)
                    "index": np.asarray(self.starts[s], dtype=INDEX_DTYPE),  # (n_documents,); none for a middle piece
                }
        return out


def join_parts(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One unit's result from its parts' (in order): tokens concatenated, document starts shifted, counts
    added, and the sha256 of the files to be written."""
    out: dict[str, Any] = {
        "unit": results[0]["unit"],
        "input_hash": _unit_hash([r["input_hash"] for r in results]),
        "stats": {},
        "splits": {},
    }
    for r in results:
        for fi, st in r["stats"].items():
            acc = out["stats"].setdefault(fi, dict.fromkeys(FILE_STATS, 0))
            for k, v in st.items():
                acc[k] += v
    for s in SPLITS:
        parts = [r["splits"][s] for r in results if s in r["splits"]]
        if not parts:
            continue
        offsets = np.cumsum([0] + [len(p["tokens"]) for p in parts[:-1]])
        tokens = np.concatenate([p["tokens"] for p in parts]) if len(parts) > 1 else parts[0]["tokens"]  # (n_tokens,)
        index = np.concatenate([p["index"] + o for p, o in zip(parts, offsets)]).astype(
            INDEX_DTYPE, copy=False
        )  # (n_documents,)
        out["splits"][s] = {
            "tokens": tokens,
            "index": index,
            "sha256": hashlib.sha256(memoryview(tokens).cast("B")).hexdigest(),
            "index_sha256": hashlib.sha256(memoryview(index).cast("B")).hexdigest(),
        }
    return out
