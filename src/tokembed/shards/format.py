"""Token shards on disk: the format, its manifest and the primitives to read it.

A shard folder ``DIR/`` holds, per split (``train``, ``val``):

- ``DIR/<split>/NNNNN.bin``: raw little-endian token ids, ``np.memmap(path, dtype=dtype, mode="r")``.
  uint16 is enough while the vocabulary fits (GPT-2's largest id, GPT2_EOT, is < 2**16), uint32 otherwise.
- ``DIR/<split>/NNNNN.idx``: raw little-endian int64, the offset in that shard where each document starts.
  Every document is its tokens followed by one ``<|endoftext|>``. A document longer than a shard (a huge
  text file) goes on in the next shards of its split: its start is listed in the shard where it begins, so
  a shard whose index does not start at 0 begins with the rest of the previous shard's last document.
  Global offsets (`ShardSet.doc_starts`) are what readers use.
- ``DIR/manifest.json``, written last and atomically: format version, tokenizer name and vocabulary hash,
  dtype, and per shard its counts, byte size and sha256 checksums (see `ShardInfo`), and the sha256 of each
  ``BLOCK_BYTES`` block of both files (``"blocks"``: what a remote reader checks each block it fetches against;
  folders written before it have none, and are fetched and checked whole).

Shard numbers are the numbers of the work units that produced them (see `tokembed.shards.prepare`), so a split's
shard list may skip numbers (a unit with no document for that split writes no file); the manifest is the
only authority on which files belong to a split.

The reader is `tokembed.shards.reader`, the checker `tokembed.shards.check`.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._paths import local_path
from tokembed.shards.schema import MANIFEST_HASH, manifest_digest, manifest_problems
from tokembed.storage.cache import BLOCK_BYTES

__all__ = [
    "BLOCK_BYTES",
    "FORMAT",
    "INDEX_DTYPE",
    "MANIFEST",
    "READABLE_VERSIONS",
    "VERSION",
    "ShardInfo",
    "CHECK_HINT",
    "block_digests",
    "checked_manifest",
    "dtype_for_vocab",
    "file_digests",
    "load_manifest",
    "parse_manifest",
    "read_manifest",
    "seal_problems",
    "sha256_file",
]

FORMAT = "tokembed-shards"
VERSION = 2  # 2: a document may go on into the next shards (1: documents never straddle shards)
READABLE_VERSIONS = (1, 2)  # version 1 folders are valid version 2 folders
MANIFEST = "manifest.json"
INDEX_DTYPE = np.dtype("<i8")
CHECK_HINT = "run `tokembed check {root}` to list every problem, then re-create the folder with `tokembed prepare ... --overwrite`"


def dtype_for_vocab(n_vocab: int) -> np.dtype:
    """The narrowest little-endian unsigned dtype that holds every id of an ``n_vocab``-sized vocabulary."""
    if n_vocab < 1:
        raise ValueError(f"n_vocab must be >= 1, got {n_vocab}")
    # uint16 is enough while the largest id (n_vocab - 1) is < 2**16: GPT-2's fit, cl100k's and o200k's do not.
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
        block_bytes: the block size of ``block_sha256``/``index_block_sha256`` (0: none recorded, as in folders
            written before blocks were).
        block_sha256: sha256 of each ``block_bytes`` block of the token file (the last may be shorter; an
            empty file has one empty block).
        index_block_sha256: the same for the index file.

    In the manifest the block hashes are one entry, ``"blocks": {"bytes", "tokens", "index"}``, which readers
    that predate it ignore.
    """

    tokens: str
    index: str
    n_tokens: int
    n_documents: int
    bytes: int
    sha256: str
    index_sha256: str
    block_bytes: int = 0
    block_sha256: tuple[str, ...] = ()
    index_block_sha256: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {f: getattr(self, f) for f in _REQUIRED}
        if self.block_bytes:
            d["blocks"] = {
                "bytes": self.block_bytes,
                "tokens": list(self.block_sha256),
                "index": list(self.index_block_sha256),
            }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardInfo:
        missing = [n for n in _REQUIRED if n not in d]
        if missing:
            raise ValueError(f"shard entry {d!r} lacks {', '.join(missing)}")
        blocks = d.get("blocks") or {}
        return cls(
            **{n: d[n] for n in _REQUIRED},
            block_bytes=int(blocks.get("bytes", 0)),
            block_sha256=tuple(blocks.get("tokens", ())),
            index_block_sha256=tuple(blocks.get("index", ())),
        )

    @property
    def index_bytes(self) -> int:
        return self.n_documents * INDEX_DTYPE.itemsize


_REQUIRED = ("tokens", "index", "n_tokens", "n_documents", "bytes", "sha256", "index_sha256")


# ----------------------------------------------------------------------------------------------- files


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 22) -> str:
    """sha256 of a file, read in 4 MiB chunks (memory stays flat whatever the file size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def block_digests(data: bytes | memoryview | np.ndarray, block_bytes: int = BLOCK_BYTES) -> list[str]:
    """sha256 of each ``block_bytes`` block of ``data`` (an array: its raw bytes); one empty block when empty."""
    raw: Any = np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data  # numpy arrays are buffers
    view = memoryview(raw).cast("B")
    if not len(view):
        return [hashlib.sha256(b"").hexdigest()]
    return [hashlib.sha256(view[i : i + block_bytes]).hexdigest() for i in range(0, len(view), block_bytes)]


def file_digests(path: str | os.PathLike, block_bytes: int = BLOCK_BYTES) -> tuple[str, list[str]]:
    """``(sha256 of the file, sha256 of each block)`` in one read (`block_digests`'s blocks)."""
    whole, blocks = hashlib.sha256(), []
    with open(path, "rb") as f:
        while data := f.read(block_bytes):
            whole.update(data)
            blocks.append(hashlib.sha256(data).hexdigest())
    return whole.hexdigest(), blocks or [hashlib.sha256(b"").hexdigest()]


# ----------------------------------------------------------------------------------------------- manifest


def load_manifest(root: Path) -> dict[str, Any]:
    """Parse ``root/manifest.json`` and check its format and version (its content: `read_manifest`)."""
    root = local_path(root, what="the shard folder")
    if not root.is_dir():
        if root.exists():
            raise NotADirectoryError(
                f"{root} is a file, not a shard folder; give the folder that `tokembed prepare --out` wrote"
            )
        raise FileNotFoundError(
            f"shard folder {root} does not exist; create it with `tokembed prepare INPUT... --out {root}`"
        )
    path = root / MANIFEST
    if not path.is_file():
        hint = ""
        if any(root.glob("manifest.rank-*.json")):
            hint = f"; it holds per-rank manifests: when every rank is done, run `tokembed merge {root}`"
        elif (root / ".parts").is_dir():
            hint = "; it looks like an unfinished `tokembed prepare`: rerun the same command to finish it"
        raise FileNotFoundError(f"{path} not found: {root} is not a finished shard folder{hint}")
    return parse_manifest(path.read_bytes(), path=str(path), root=str(root))


def parse_manifest(data: bytes, *, path: str, root: str) -> dict[str, Any]:
    """Parse a manifest's bytes and check its format and version (``path`` and ``root`` name it in messages)."""
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}); {CHECK_HINT.format(root=root)}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a tokembed shard manifest (format {manifest.get('format') if isinstance(manifest, dict) else None!r}, expected {FORMAT!r})"
        )
    if manifest.get("version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{path} has shard format version {manifest.get('version')!r}; this tokembed reads versions {', '.join(map(str, READABLE_VERSIONS))}: "
            "upgrade tokembed, or re-create the shards with this version's `tokembed prepare`"
        )
    return manifest


def seal_problems(root: str | os.PathLike, manifest: dict[str, Any]) -> list[str]:
    """A line when the manifest's content no longer matches its ``manifest_sha256`` (none without one)."""
    if MANIFEST_HASH in manifest and manifest[MANIFEST_HASH] != manifest_digest(manifest):
        return [
            f"{os.fspath(root).rstrip('/')}/{MANIFEST}: its content does not match its {MANIFEST_HASH} (it was changed after prepare wrote it)"
        ]
    return []


def read_manifest(root: str | os.PathLike) -> dict[str, Any]:
    """Load and validate ``root/manifest.json``: format, version, schema (`tokembed.shards.schema`) and seal.

    Raises:
        NotADirectoryError / FileNotFoundError: ``root`` is not a folder, or has no manifest.
        ValueError: the manifest is not valid JSON, not a tokembed shard manifest, of an unknown version,
            malformed (the first problem is named), or changed since prepare wrote it.
    """
    root = Path(root)
    return checked_manifest(load_manifest(root), root)


def checked_manifest(manifest: dict[str, Any], root: str | os.PathLike) -> dict[str, Any]:
    """``manifest`` when its schema and seal hold, else a ValueError naming the first problem."""
    problems = manifest_problems(manifest) or seal_problems(root, manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        where = f"{os.fspath(root).rstrip('/')}/{MANIFEST}"
        raise ValueError(f"{where} is damaged: {problems[0]}{more}; {CHECK_HINT.format(root=root)}")
    return manifest
