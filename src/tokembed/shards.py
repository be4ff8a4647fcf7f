"""Token shards on disk: the format, a reader, a writer's atomic primitives, and a checker.

A shard folder ``DIR/`` holds, per split (``train``, ``val``):

- ``DIR/<split>/NNNNN.bin``: raw little-endian token ids, ``np.memmap(path, dtype=dtype, mode="r")``.
  uint16 is enough while the vocabulary fits (GPT-2's largest id is 50256 < 2**16), uint32 otherwise.
- ``DIR/<split>/NNNNN.idx``: raw little-endian int64, the offset in that shard where each document starts.
  Every document is its tokens followed by one ``<|endoftext|>``. A document longer than a shard (a huge
  text file) goes on in the next shards of its split: its start is listed in the shard where it begins, so
  a shard whose index does not start at 0 begins with the rest of the previous shard's last document.
  Global offsets (`ShardSet.doc_starts`) are what readers use.
- ``DIR/manifest.json``, written last and atomically: format version, tokenizer name and vocabulary hash,
  dtype, and per shard its counts, byte size and sha256 checksums (see `ShardInfo`).

Shard numbers are the numbers of the work units that produced them (see `tokembed.prepare`), so a split's
shard list may skip numbers (a unit with no document for that split writes no file); the manifest is the
only authority on which files belong to a split.

Readers open token files lazily and keep only paths and metadata in picklable objects, so a `ShardSet`
can cross process boundaries (DataLoader workers) without copying memory maps.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import atomic_write, atomic_write_json, fsync_dir, is_temp_file  # noqa: F401 (re-exported)
from tokembed._checks import check_positive_int

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "Plan",
    "RankPlan",
    "ShardInfo",
    "ShardSet",
    "add_rank_plans",
    "atomic_write",
    "check_shards",
    "dtype_for_vocab",
    "open_shards",
    "plan",
    "rank_plan",
    "read_manifest",
    "sha256_file",
    "shard_stats",
    "window_count",
]

FORMAT = "tokembed-shards"
VERSION = 2  # 2: a document may go on into the next shards (1: documents never straddle shards)
READABLE_VERSIONS = (1, 2)  # version 1 folders are valid version 2 folders
MANIFEST = "manifest.json"
INDEX_DTYPE = np.dtype("<i8")
_CHECK_HINT = "run `tokembed check {root}` to list every problem, then re-create the folder with `tokembed prepare ... --overwrite`"


def dtype_for_vocab(n_vocab: int) -> np.dtype:
    """The narrowest little-endian unsigned dtype that holds every id of an ``n_vocab``-sized vocabulary."""
    if n_vocab < 1:
        raise ValueError(f"n_vocab must be >= 1, got {n_vocab}")
    # uint16 is enough while the largest id (n_vocab - 1) is < 2**16: GPT-2's 50256 fits.
    return np.dtype("<u2") if n_vocab <= 2**16 else np.dtype("<u4")


@dataclass(frozen=True)
class ShardInfo:
    """One shard of one split, as recorded in the manifest.

    Attributes:
        tokens: path of the token file, relative to the shard folder (``"train/00000.bin"``).
        index: path of the document index (``"train/00000.idx"``).
        n_tokens: tokens in the shard, ``<|endoftext|>`` separators included.
        n_documents: documents that start in the shard (entries of the index).
        bytes: size of the token file in bytes (``n_tokens * itemsize``).
        sha256: sha256 of the token file.
        index_sha256: sha256 of the index file.
    """

    tokens: str
    index: str
    n_tokens: int
    n_documents: int
    bytes: int
    sha256: str
    index_sha256: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardInfo:
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in d]
        if missing:
            raise ValueError(f"shard entry {d!r} lacks {', '.join(missing)}")
        return cls(**{n: d[n] for n in names})


# ----------------------------------------------------------------------------------------------- files


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 22) -> str:
    """sha256 of a file, read in 4 MiB chunks (memory stays flat whatever the file size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- manifest


def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    """Load and validate the top level of ``root/manifest.json``.

    Raises:
        NotADirectoryError / FileNotFoundError: ``root`` is not a folder, or has no manifest.
        ValueError: the manifest is not valid JSON, not a tokembed shard manifest, or of an unknown version.
    """
    root = Path(root)
    if not root.is_dir():
        if root.exists():
            raise NotADirectoryError(f"{root} is a file, not a shard folder; give the folder that `tokembed prepare --out` wrote")
        raise FileNotFoundError(f"shard folder {root} does not exist; create it with `tokembed prepare INPUT... --out {root}`")
    path = root / MANIFEST
    if not path.is_file():
        hint = ""
        if any(root.glob("manifest.rank-*.json")):
            hint = f"; it holds per-rank manifests: when every rank is done, run `tokembed merge {root}`"
        elif (root / ".parts").is_dir():
            hint = "; it looks like an unfinished `tokembed prepare`: rerun the same command to finish it"
        raise FileNotFoundError(f"{path} not found: {root} is not a finished shard folder{hint}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); {_CHECK_HINT.format(root=root)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a tokembed shard manifest (format {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT!r})")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{path} has shard format version {manifest.get('version')!r}; this tokembed reads versions {', '.join(map(str, READABLE_VERSIONS))}: "
            "upgrade tokembed, or re-create the shards with this version's `tokembed prepare`"
        )
    for key in ("tokenizer", "dtype", "splits"):
        if key not in manifest:
            raise ValueError(f"{path} lacks {key!r}; {_CHECK_HINT.format(root=root)}")
    if manifest["dtype"] not in ("uint16", "uint32"):
        raise ValueError(f"{path} has dtype {manifest['dtype']!r}; expected 'uint16' or 'uint32'")
    return manifest


# ----------------------------------------------------------------------------------------------- reader


class ShardSet:
    """One split of a shard folder, seen as a single token stream.

    Token files are memory-mapped on first use and cached per process; pickling a `ShardSet` keeps only
    paths and metadata, so each DataLoader worker opens its own maps.

    Attributes:
        root: the shard folder.
        split: ``"train"`` or ``"val"`` (any split the manifest lists).
        dtype: token dtype (``<u2`` or ``<u4``).
        manifest: the parsed ``manifest.json``.
        shards: the split's `ShardInfo` list, in stream order.
        n_tokens: total tokens of the split (separators included).
        n_documents: total documents of the split.
        cumulative: int64 array ``(n_shards + 1,)``; shard ``i`` holds global tokens
            ``[cumulative[i], cumulative[i+1])``.
    """

    def __init__(self, root: Path, split: str, manifest: dict[str, Any], shards: list[ShardInfo]):
        self.root = Path(root)
        self.split = split
        self.manifest = manifest
        self.dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
        self.shards = shards
        self.cumulative = np.zeros(len(shards) + 1, dtype=np.int64)  # (n_shards+1,)
        np.cumsum([s.n_tokens for s in shards], out=self.cumulative[1:])
        self.n_tokens = int(self.cumulative[-1])
        self.n_documents = sum(s.n_documents for s in shards)
        self._maps: dict[int, np.ndarray] = {}
        self._doc_starts: np.ndarray | None = None
        self._pid = os.getpid()

    # Pickle paths and metadata only: memory maps are reopened lazily in the receiving process.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_maps"] = {}
        state["_doc_starts"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.n_tokens

    def __repr__(self) -> str:
        return f"ShardSet({str(self.root)!r}, split={self.split!r}, shards={len(self.shards)}, documents={self.n_documents}, tokens={self.n_tokens}, dtype={self.dtype.name})"

    @property
    def eot_token(self) -> int:
        return int(self.manifest["tokenizer"]["eot_token"])

    def tokens(self, i: int) -> np.ndarray:
        """The tokens of shard ``i``: a read-only ``np.memmap`` ``(n_tokens_i,)``, opened once per process."""
        if os.getpid() != self._pid:  # forked: never share maps across processes
            self._maps, self._pid = {}, os.getpid()
        if not 0 <= i < len(self.shards):
            raise IndexError(f"shard {i} does not exist: split {self.split!r} of {self.root} has {len(self.shards)} shards")
        mm = self._maps.get(i)
        if mm is None:
            info = self.shards[i]
            if info.n_tokens == 0:  # np.memmap cannot map an empty file
                mm = np.zeros(0, dtype=self.dtype)
            else:
                mm = np.memmap(self.root / info.tokens, dtype=self.dtype, mode="r", shape=(info.n_tokens,))
            self._maps[i] = mm
        return mm

    def index(self, i: int) -> np.ndarray:
        """Shard ``i``'s document starts, relative to the shard: int64 ``(n_documents_i,)``."""
        info = self.shards[i]
        return np.fromfile(self.root / info.index, dtype=INDEX_DTYPE, count=info.n_documents)

    def doc_starts(self) -> np.ndarray:
        """Global offsets of every document start over the concatenated split: int64 ``(n_documents,)``."""
        if self._doc_starts is None:
            parts = [self.index(i) + self.cumulative[i] for i in range(len(self.shards))]
            self._doc_starts = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        return self._doc_starts

    def read(self, start: int, stop: int) -> np.ndarray:
        """Global tokens ``[start, stop)`` of the split, across shard boundaries: ``(stop - start,)``.

        Within one shard the result is a read-only view of the memory map (no copy); across shards it is
        a new array. Copy it before modifying.
        """
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.n_tokens:
            raise IndexError(f"token range [{start}, {stop}) is outside split {self.split!r} of {self.root}, which has {self.n_tokens} tokens")
        if start == stop:
            return np.zeros(0, dtype=self.dtype)
        first = int(np.searchsorted(self.cumulative, start, side="right")) - 1
        last = int(np.searchsorted(self.cumulative, stop, side="left")) - 1
        c = self.cumulative
        if first == last:
            return np.asarray(self.tokens(first)[start - c[first] : stop - c[first]])
        pieces = [self.tokens(first)[start - c[first] :]]
        pieces += [self.tokens(i) for i in range(first + 1, last)]
        pieces.append(self.tokens(last)[: stop - c[last]])
        return np.concatenate(pieces)

    def documents(self) -> Iterator[np.ndarray]:
        """Yield each document's tokens (without its ``<|endoftext|>``), in order, across shard boundaries."""
        starts = self.doc_starts()
        ends = np.append(starts[1:], self.n_tokens)
        for a, b in zip(starts, ends):
            yield self.read(int(a), int(b) - 1)

    def plan(self, *, max_length: int, stride: int, batch_size: int, drop_last: bool = True) -> Plan:
        """The sliding-window plan over this split's token stream (see `plan`)."""
        return plan(self.n_tokens, max_length=max_length, stride=stride, batch_size=batch_size, drop_last=drop_last)


def open_shards(root: str | os.PathLike, *, split: str = "train", verify: bool = False) -> ShardSet:
    """Open one split of a shard folder written by `tokembed prepare`.

    Args:
        root: the shard folder.
        split: which split to open (``"train"`` or ``"val"``).
        verify: also check every file's sha256 and the document index (reads the whole split once).
            Without it, only the presence and size of each file are checked (cheap).

    Raises:
        FileNotFoundError: no folder or no manifest.
        ValueError: unknown split, or a shard that is missing, of the wrong size, or (with ``verify``)
            damaged; the message names the shard and points at ``tokembed check DIR``.
    """
    root = Path(root)
    manifest = read_manifest(root)
    splits = manifest["splits"]
    if split not in splits:
        raise ValueError(f"split {split!r} is not in {root}; it has {', '.join(map(repr, splits)) or 'no splits'}")
    shards = [ShardInfo.from_dict(d) for d in splits[split]["shards"]]
    itemsize = 2 if manifest["dtype"] == "uint16" else 4
    for s in shards:
        problems = _shard_file_problems(root, s, itemsize)
        if problems:
            raise ValueError(f"shard {s.tokens} of {root} is damaged: {problems[0]}; {_CHECK_HINT.format(root=root)}")
    if verify:
        problems = _check_split(root, manifest, split, full=True)
        if problems:
            raise ValueError(f"{root} is damaged: {problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; {_CHECK_HINT.format(root=root)}")
    return ShardSet(root, split, manifest, shards)


# ----------------------------------------------------------------------------------------------- checker


def _shard_file_problems(root: Path, s: ShardInfo, itemsize: int) -> list[str]:
    problems = []
    for rel, expected in ((s.tokens, s.n_tokens * itemsize), (s.index, s.n_documents * INDEX_DTYPE.itemsize)):
        p = root / rel
        if not p.is_file():
            problems.append(f"{rel} is missing")
        elif p.stat().st_size != expected:
            problems.append(f"{rel} has {p.stat().st_size} bytes, expected {expected}")
    if s.bytes != s.n_tokens * itemsize:
        problems.append(f"{s.tokens}: manifest says {s.bytes} bytes for {s.n_tokens} tokens of {itemsize} bytes")
    return problems


def _check_split(root: Path, manifest: dict[str, Any], split: str, *, full: bool) -> list[str]:
    problems: list[str] = []
    entry = manifest["splits"][split]
    dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
    n_vocab = int(manifest["tokenizer"].get("n_vocab", np.iinfo(dtype).max + 1))
    eot = manifest["tokenizer"].get("eot_token")
    try:
        shards = [ShardInfo.from_dict(d) for d in entry["shards"]]
    except (ValueError, TypeError, KeyError) as e:
        return [f"split {split!r}: bad shard list ({e})"]
    if sum(s.n_tokens for s in shards) != entry.get("tokens"):
        problems.append(f"split {split!r}: manifest total of {entry.get('tokens')} tokens differs from the sum over its shards ({sum(s.n_tokens for s in shards)})")
    if sum(s.n_documents for s in shards) != entry.get("documents"):
        problems.append(f"split {split!r}: manifest total of {entry.get('documents')} documents differs from the sum over its shards ({sum(s.n_documents for s in shards)})")
    previous_ends: bool | None = True  # the stream starts at a document start; None: unknown (damaged shard)
    for s in shards:
        file_problems = _shard_file_problems(root, s, dtype.itemsize)
        problems += file_problems
        if file_problems or not full:
            previous_ends = None
            continue
        bad_sum = False
        if sha256_file(root / s.tokens) != s.sha256:
            problems.append(f"{s.tokens}: sha256 mismatch (the token file was modified or damaged)")
            bad_sum = True
        if sha256_file(root / s.index) != s.index_sha256:
            problems.append(f"{s.index}: sha256 mismatch (the document index was modified or damaged)")
            bad_sum = True
        if bad_sum:
            previous_ends = None
            continue
        # Checksums match: the content is what prepare wrote; still check it is a valid shard.
        idx = np.fromfile(root / s.index, dtype=INDEX_DTYPE)
        toks = np.memmap(root / s.tokens, dtype=dtype, mode="r") if s.n_tokens else np.zeros(0, dtype)
        if len(idx) and (idx[0] < 0 or np.any(np.diff(idx) < 1) or idx[-1] >= s.n_tokens):
            problems.append(f"{s.index}: document starts are not strictly increasing within the shard's {s.n_tokens} tokens")
            previous_ends = None
            continue
        if s.n_tokens and eot is not None:
            # <|endoftext|> ends every document and appears nowhere else (documents are encoded as
            # ordinary text): it sits just before each listed start, and last if the shard ends a document.
            ends_document = bool(toks[-1] == eot)
            expected = np.append(idx[idx > 0] - 1, [s.n_tokens - 1] if ends_document else [])
            if not np.array_equal(np.flatnonzero(toks == eot), expected):
                problems.append(f"{s.tokens}: its <|endoftext|> tokens ({eot}) are not exactly where the index says documents end")
            starts_document = bool(len(idx) and idx[0] == 0)
            if previous_ends is not None and previous_ends != starts_document:
                if starts_document:
                    why = "starts a document, but the shard before it ends inside one (is a shard missing?)"
                elif s is shards[0]:
                    why = "is the split's first shard but begins inside a document (is a shard missing?)"
                else:
                    why = "begins inside a document, but the shard before it ends with <|endoftext|> (is a shard missing?)"
                problems.append(f"{s.tokens}: {why}")
            previous_ends = ends_document
        if s.n_tokens and int(toks.max()) >= n_vocab:
            problems.append(f"{s.tokens}: token id {int(toks.max())} is outside the vocabulary (size {n_vocab})")
        del toks
    if full and previous_ends is False and not problems:
        problems.append(f"split {split!r}: its last shard ends inside a document (no <|endoftext|>); a shard is missing at the end")
    return problems


def check_shards(root: str | os.PathLike) -> list[str]:
    """Verify a shard folder: structure, counts, sizes, checksums and document boundaries.

    Returns:
        One line per problem, naming the damaged or missing file; empty when the folder is healthy.
        A single flipped byte in any token or index file is found (sha256).
    """
    root = Path(root)
    try:
        manifest = read_manifest(root)
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        return [str(e)]
    problems: list[str] = []
    tok = manifest["tokenizer"]
    try:
        from tokembed.tokenizer import get_tokenizer, tokenizer_hash

        enc = get_tokenizer(tok.get("name"))
    except (ValueError, FileNotFoundError):
        enc = None  # a tokenizer this machine cannot build: its hash cannot be compared
    if enc is not None and tok.get("hash") != tokenizer_hash(enc):
        problems.append(f"manifest: tokenizer hash {tok.get('hash')!r} differs from the installed {tok.get('name')!r} tokenizer's {tokenizer_hash(enc)!r}")
    if not isinstance(manifest["splits"], dict):
        return problems + ["manifest: 'splits' is not an object"]
    listed: set[str] = set()
    for split in manifest["splits"]:
        problems += _check_split(root, manifest, split, full=True)
        for d in manifest["splits"][split].get("shards", []):
            listed.update((d.get("tokens"), d.get("index")))
    inputs = manifest.get("inputs") or []
    if inputs and all(isinstance(f, dict) and "documents" in f and "tokens" in f for f in inputs):
        # Per-input counts (tokens without separators) must add up to the splits (one separator per document).
        docs = sum(s.get("documents", 0) for s in manifest["splits"].values())
        toks = sum(s.get("tokens", 0) for s in manifest["splits"].values())
        in_docs = sum(f["documents"] for f in inputs)
        in_toks = sum(f["tokens"] for f in inputs)
        if in_docs != docs or in_toks + in_docs != toks:
            problems.append(f"manifest: the inputs count {in_docs} documents and {in_toks} tokens, the splits {docs} documents and {toks} tokens with separators")
    for split in manifest["splits"]:
        folder = root / split
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                rel = f"{split}/{p.name}"
                if rel not in listed and not is_temp_file(p.name):
                    problems.append(f"{rel}: not listed in the manifest (a stray file from another run?)")
    return problems


# ----------------------------------------------------------------------------------------------- plan


def window_count(n_tokens: int, max_length: int, stride: int) -> int:
    """The number of windows the chapter takes: ``len(range(0, n_tokens - max_length, stride))``."""
    return max(0, -(-(n_tokens - max_length) // stride))


@dataclass(frozen=True)
class Plan:
    """How a token stream is cut into sliding windows and batches (the chapter's arithmetic).

    Attributes:
        n_tokens: tokens in the stream.
        max_length: window length ``L``.
        stride: step between window starts.
        batch_size: windows per batch.
        drop_last: whether a last partial batch is dropped (the book's default).
        windows: ``window_count(n_tokens, max_length, stride)`` = ``len(range(0, n_tokens - L, stride))``.
        batches: batches per epoch.
        dropped_windows: windows in the dropped partial batch (0 without ``drop_last``).
        tail_tokens: tokens after the last window's last target that no window reads.
    """

    n_tokens: int
    max_length: int
    stride: int
    batch_size: int
    drop_last: bool
    windows: int
    batches: int
    dropped_windows: int
    tail_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def plan(n_tokens: int, *, max_length: int, stride: int, batch_size: int, drop_last: bool = True) -> Plan:
    """Windows, batches per epoch and dropped tail for a stream of ``n_tokens`` tokens.

    Uses `window_count`, the same arithmetic as the loaders, so the numbers agree.
    """
    for name, value in (("max_length", max_length), ("stride", stride), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    windows = int(window_count(int(n_tokens), int(max_length), int(stride)))
    batches, rest = divmod(windows, batch_size)
    if not drop_last and rest:
        batches, rest = batches + 1, 0
    # The last window starts at (windows-1)*stride and its targets end at start + max_length + 1.
    covered = (windows - 1) * stride + max_length + 1 if windows else 0
    return Plan(
        n_tokens=int(n_tokens), max_length=int(max_length), stride=int(stride), batch_size=int(batch_size), drop_last=drop_last,
        windows=windows, batches=batches, dropped_windows=rest, tail_tokens=int(n_tokens) - covered if windows else int(n_tokens),
    )


def shard_stats(root: str | os.PathLike, *, max_length: int | None = 256, stride: int | None = None, batch_size: int = 8, drop_last: bool = True) -> dict[str, Any]:
    """Counts of a shard folder, per split and per input file, and the window plan of each split.

    Args:
        root: the shard folder.
        max_length, stride, batch_size, drop_last: the loader settings to plan for (``stride`` defaults to
            ``max_length``); ``max_length=None`` leaves the plan out.

    Returns:
        ``{"splits": {split: {"documents", "tokens", "shards", "plan"}}, "inputs": [{"path", "documents",
        "tokens", "chars", "text_bytes", "tokens_per_char", "tokens_per_byte", ...}], "dtype", "tokenizer"}``.
        Token counts per input exclude the ``<|endoftext|>`` separators; split totals include them.
    """
    manifest = read_manifest(root)
    out: dict[str, Any] = {"root": str(root), "tokenizer": manifest["tokenizer"].get("name"), "dtype": manifest["dtype"], "splits": {}, "inputs": []}
    for name, s in manifest["splits"].items():
        entry = {"documents": s["documents"], "tokens": s["tokens"], "shards": len(s["shards"])}
        if max_length is not None:
            entry["plan"] = plan(s["tokens"], max_length=max_length, stride=stride if stride is not None else max_length, batch_size=batch_size, drop_last=drop_last).to_dict()
        out["splits"][name] = entry
    for f in manifest.get("inputs", []):
        row = dict(f)
        row["tokens_per_char"] = f["tokens"] / f["chars"] if f.get("chars") else None
        row["tokens_per_byte"] = f["tokens"] / f["text_bytes"] if f.get("text_bytes") else None
        out["inputs"].append(row)
    return out


# ----------------------------------------------------------------------------------------------- ranks


@dataclass(frozen=True)
class RankPlan:
    """How one epoch of ``windows`` is cut into batches for each of ``world_size`` ranks.

    Attributes:
        windows: windows in the epoch (``N``).
        batch_size: windows per full batch (``B``).
        world_size: ranks (``W``).
        drop_last: drop the tail (< W*B windows) instead of sharing it out.
        batches: batches per rank per epoch (the same on every rank).
        full_steps: steps where each rank gets a full batch, ``N // (W*B)``.
        last_batch_size: windows in each rank's last batch (``B`` unless the tail is shared out).
        dropped_windows: windows of the epoch no rank sees (``drop_last=True``).
        padded_windows: windows seen twice to even out the ranks' last batches (``drop_last=False``).
    """

    windows: int
    batch_size: int
    world_size: int
    drop_last: bool
    batches: int
    full_steps: int
    last_batch_size: int
    dropped_windows: int
    padded_windows: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def rank_plan(windows: int, *, batch_size: int, world_size: int = 1, drop_last: bool = True) -> RankPlan:
    """Batches per rank for an epoch of ``windows`` windows: the arithmetic the loader follows."""
    batch_size = check_positive_int("batch_size", batch_size)
    world_size = check_positive_int("world_size", world_size)
    step = batch_size * world_size
    full, tail = divmod(int(windows), step)
    if drop_last or tail == 0:
        return RankPlan(windows, batch_size, world_size, drop_last, full, full, batch_size if full else 0, tail, 0)
    share = -(-tail // world_size)  # ceil: every rank's last batch has the same size
    return RankPlan(windows, batch_size, world_size, drop_last, full + 1, full, share, 0, share * world_size - tail)


def add_rank_plans(stats: dict[str, Any], *, world_size: int) -> dict[str, Any]:
    """Add ``"rank_plan"`` (a `RankPlan` dict) to each split of ``tokembed.shards.shard_stats``'s result.

    ``tokembed stats --world-size`` prints it: the batches each rank's `create_dataloader` yields.
    """
    world_size = check_positive_int("world_size", world_size, hint="the number of ranks (processes) sharing each epoch")
    for split in stats["splits"].values():
        pl = split.get("plan")
        if pl is not None:
            split["rank_plan"] = rank_plan(pl["windows"], batch_size=pl["batch_size"], world_size=world_size, drop_last=pl["drop_last"]).to_dict()
    return stats
