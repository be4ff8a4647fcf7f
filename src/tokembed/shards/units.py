"""Work units: the plan of a corpus (spans -> units -> parts), and tokenizing one part in a worker.

`iter_units` turns the inputs' spans (`tokembed.shards.sources.plan_units`) into numbered units, deciding the
split of documents that get cut; `unit_parts` cuts a unit into tasks of about `PART_BYTES` (each span by its
format's ``split``); `tokenize_unit` runs in the workers (processes or Ray tasks): it reads a part's spans
through their formats, hashes the bytes, has the format turn them into texts (the shared rules: UTF-8 replaced
and counted or strict, binaries refused), and tokenizes; `join_parts` puts a unit's parts back together with the
sha256 of the files `tokembed.shards.prepare` writes. Nothing here asks which format a span is. Everything is a
pure function of the input bytes and the `PrepareConfig`, which is why the output does not depend on workers,
engines or ranks.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tokembed.shards.counts import part_counts
from tokembed.shards.format import INDEX_DTYPE, dtype_for_vocab
from tokembed.shards.formats.base import CONT, MORE, RecordContext, Span
from tokembed.shards.formats.registry import codec_for, get_format
from tokembed.shards.sources import CUTS, InputFile, plan_units

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


VAL = 8  # Span.flags: a piece of a cut document that belongs to the val split (1, 2 are CONT, MORE)
VAL_KEY_BYTES = 1 << 20  # the validation split hashes a document's first MiB of text
PART_BYTES = 1 << 20  # units are tokenized in parts of about this size, so workers share even a few units


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
    """Where the config's tokenizer lets a large document be cut without changing its ids; None when no such place
    is known (documents stay whole, and the planner need not look for one)."""
    from tokembed.tokenizer import document_cut

    rule = document_cut(config.build_tokenizer())
    return None if rule is None else CUTS[rule]


def unit_parts(unit: Unit, config: PrepareConfig, names: dict[int, str]) -> list[Unit]:
    """Cut a unit into parts of at least `PART_BYTES` (each span as its format splits it: at line ends, at rows,
    at safe points of a document). The parts' results, put together in order, are the unit's; the cuts depend
    only on the input. A whole document that gets cut has its split decided here, from its head, like a cut
    document."""
    cut_at = _cut_rule(config)
    spans: list[Span] = []
    for sp in unit.spans:
        parts = get_format(sp.format).split(sp, PART_BYTES, names[sp.file], cut_at)
        if len(parts) > 1 and parts[0].flags & MORE and not sp.flags & (CONT | MORE) and config.val_fraction > 0:
            n = _head_bytes()  # (pieces of one document: the span's bytes are the document's)
            head = (
                sp.data[:n]
                if sp.data is not None
                else _read(replace(sp, end=min(sp.end, sp.start + n)), names[sp.file])
            )
            if _head_in_val(head, config.val_fraction):
                for p in parts:
                    p.flags |= VAL
        spans += parts
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


def _read(sp: Span, name: str) -> bytes:
    """A span's bytes, as its format reads them (what is hashed and parsed)."""
    return get_format(sp.format).read(sp, name)


def iter_units(
    files: Sequence[InputFile], config: PrepareConfig, *, carry: bool = False, keep: bool = False
) -> Iterator[Unit]:
    """The plan: the inputs cut into units of at least ``config.unit_bytes`` bytes (the last may be smaller);
    ``carry`` and ``keep`` as `tokembed.shards.sources.plan_units` takes them.

    A document cut into pieces goes to one split as a whole: the split is decided here, once, from the
    document's first `VAL_KEY_BYTES` (the same rule the workers apply to whole documents).
    """
    in_val = False
    for uid, (spans, disk_bytes) in enumerate(
        plan_units(
            files,
            config.unit_bytes,
            carry=carry,
            keep=keep,
            head_bytes=_head_bytes() if config.val_fraction > 0 else 0,
            cut_at=_cut_rule(config),
            field=config.field,
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


TRIM_EVERY = 16 << 20  # input bytes between two heap trims (1 GB peaks at 1.10x 100 MB; at 64 MiB it was 1.18x)


def trim_heap(handled: int) -> None:
    """Give freed heap memory back to the OS once this process has handled `TRIM_EVERY` bytes of input since it last
    did (glibc keeps freed blocks of up to 32 MB in the heap, so without this a long run's resident memory creeps up
    with fragmentation instead of staying flat). Not after every part: the memory given back is faulted in again by
    the next part's allocations, which cost 18% of a worker's CPU with gigatoken when trimmed per 1 MiB part
    (benchmarks/bench_tokenize.py --profile); one 1 GB text document then peaks at 1.10x one of 100 MB, as per part
    (benchmarks/bench_prepare.py)."""
    global _malloc_trim, _untrimmed
    _untrimmed += handled
    if _untrimmed < TRIM_EVERY:
        return
    _untrimmed = 0
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None
_untrimmed = 0  # input bytes handled since the last trim


def tokenize_unit(unit: Unit, config: PrepareConfig, names: Sequence[str] | dict[int, str]) -> dict[str, Any]:
    """Tokenize one unit (runs in a worker): read its spans, hash them, have their formats turn them into texts,
    tokenize them a batch at a time.

    Returns per-split token and index arrays with their sha256, the unit's input hash, and per-input-file
    counts. Raises ValueError naming the file and line, row or byte offset for bad input.
    """
    from tokembed.tokenizer.fast import token_encoder

    trim_heap(sum(map(len, unit.spans)))  # the previous parts' buffers are gone by now
    enc = config.build_tokenizer()
    encoder = token_encoder(enc, config.backend)  # tiktoken's ids, from gigatoken when installed (tested)
    datas = [_read(sp, names[sp.file]) for sp in unit.spans]
    input_hash = _input_hash(unit.spans, datas)
    dtype = dtype_for_vocab(enc.n_vocab)
    splits = {s: _SplitTokens(encoder, enc.eot_token, dtype) for s in SPLITS}
    stats: dict[int, dict[str, int]] = {}
    for sp, data in zip(unit.spans, datas):
        st = stats.setdefault(sp.file, dict.fromkeys(FILE_STATS, 0))
        fmt = get_format(sp.format)
        records = RecordContext(fmt, names[sp.file], sp, config, st, compressed=codec_for(names[sp.file]) is not None)
        _gather(sp, fmt.texts(sp, data, records), config.val_fraction, splits, st)
    del datas
    out: dict[str, Any] = {"unit": unit.id, "part": unit.part, "input_hash": input_hash, "stats": stats, "splits": {}}
    for s, tokens in splits.items():
        made = tokens.result()
        if made is not None:  # the split got a document (or a piece) from this part
            made["counts"] = part_counts(made["tokens"])  # (for the manifest: counted here, in parallel)
            out["splits"][s] = made
    return out


def _gather(sp: Span, texts: Iterable[str], val_fraction: float, splits: dict[str, _SplitTokens], st: dict) -> None:
    """Hand a span's texts to their splits, about `BATCH_CHARS` at a time (a row group of a few MB is never held
    as texts whole)."""
    batch: list[str] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= BATCH_CHARS:
            _route(sp, batch, val_fraction, splits, st)
            batch, size = [], 0
    _route(sp, batch, val_fraction, splits, st)


def _route(sp: Span, texts: list[str], val_fraction: float, splits: dict[str, _SplitTokens], st: dict) -> None:
    """A piece of a cut document goes where the planner decided (never blank); a whole document is skipped when
    blank (counted) and goes to the split its text hashes to."""
    if sp.flags & (CONT | MORE):
        splits["val" if sp.flags & VAL else "train"].add(sp, texts, st)
        return
    kept = [t for t in texts if t and not t.isspace()]  # = t.strip() (the same whitespace), without a copy
    st["empty"] += len(texts) - len(kept)
    if val_fraction <= 0.0:
        splits["train"].add(sp, kept, st)
        return
    in_val = [_in_val(t, val_fraction) for t in kept]
    splits["train"].add(sp, [t for t, v in zip(kept, in_val) if not v], st)
    splits["val"].add(sp, [t for t, v in zip(kept, in_val) if v], st)


BATCH_CHARS = 1 << 20  # characters of text tokenized in one call (bounds the texts held at once)


class _SplitTokens:
    """One split's tokens of a part as they are made: texts are tokenized a batch at a time (one tokenizer call
    for many documents), each batch becoming one array with the ``<|endoftext|>`` of every document that ends
    in it, plus where its documents start."""

    def __init__(self, encoder: Any, eot: int, dtype: np.dtype) -> None:
        self.encoder, self.dtype = encoder, dtype
        self.eot = np.array([eot], dtype=dtype)  # (1,)
        self.texts: list[str] = []
        self.groups: list[tuple[Span, int, dict[str, int]]] = []  # (span, documents, its file's stats) per span
        self.chars = 0
        self.filled = 0  # tokens of this split made so far
        self.chunks: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []

    def add(self, sp: Span, texts: list[str], st: dict[str, int]) -> None:
        """Texts of one span, in order (all ending where the span says: `MORE` = the document goes on)."""
        if not texts:
            return
        self.texts += texts
        self.groups.append((sp, len(texts), st))
        self.chars += sum(map(len, texts))
        if self.chars >= BATCH_CHARS:  # (a batch ends at a span's end: documents are never split across calls)
            self.flush()

    def flush(self) -> None:
        """Tokenize the texts gathered so far (`TokenEncoder.encode_batch`) into one array, each document followed
        by its ``<|endoftext|>`` where it ends here; count them into their files' stats."""
        if not self.texts:
            return
        arrays = self.encoder.encode_batch(self.texts)  # one (n_i,) uint32 array per text
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))  # (documents,)
        ends = np.repeat([not sp.flags & MORE for sp, _, _ in self.groups], [n for _, n, _ in self.groups])
        firsts = np.repeat([not sp.flags & CONT for sp, _, _ in self.groups], [n for _, n, _ in self.groups])
        if ends.all():  # (documents,) bool; the usual case: every document ends here
            pieces = [x for ids in arrays for x in (ids, self.eot)]
        else:
            pieces = [x for ids, end in zip(arrays, ends.tolist()) for x in ((ids, self.eot) if end else (ids,))]
        chunk = np.concatenate(pieces, dtype=self.dtype, casting="same_kind")  # one pass: joined and converted
        starts = np.zeros(len(arrays) + 1, dtype=np.int64)  # (documents + 1,) where each document starts, then the end
        np.cumsum(lengths + ends, out=starts[1:])
        self.starts.append(starts[:-1][firsts] + self.filled)
        self.chunks.append(chunk)
        self.filled += len(chunk)
        self._count(np.concatenate([[0], np.cumsum(lengths)]))
        self.texts, self.groups, self.chars = [], [], 0

    def _count(self, offsets: np.ndarray) -> None:
        i = 0
        for sp, n, st in self.groups:
            texts = self.texts[i : i + n]
            st["documents"] += 0 if sp.flags & CONT else n
            st["tokens"] += int(offsets[i + n] - offsets[i])
            st["chars"] += sum(map(len, texts))
            st["text_bytes"] += sum(len(t) if t.isascii() else len(t.encode("utf-8", "surrogatepass")) for t in texts)
            i += n

    def result(self) -> dict[str, Any] | None:
        self.flush()
        if not self.chunks:
            return None
        return {
            "tokens": np.concatenate(self.chunks) if len(self.chunks) > 1 else self.chunks[0],  # (n_tokens,)
            "index": np.concatenate(self.starts).astype(INDEX_DTYPE),  # (n_documents,); none for a middle piece
        }


def join_parts(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One unit's result from its parts' (in order): tokens concatenated, document starts shifted, counts
    added, the sha256 of the files to be written, and the parts' token id counts (`part_counts`)."""
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
            "sha256": hashlib.sha256(tokens.data.cast("B")).hexdigest(),
            "index_sha256": hashlib.sha256(index.data.cast("B")).hexdigest(),
            "counts": [p["counts"] for p in parts],  # each part's (ids, how often)
        }
    return out
