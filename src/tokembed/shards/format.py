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
  dtype, and per shard its counts, byte size and sha256 checksums (see `ShardInfo`).

Shard numbers are the numbers of the work units that produced them (see `tokembed.shards.prepare`), so a split's
shard list may skip numbers (a unit with no document for that split writes no file); the manifest is the
only authority on which files belong to a split.

The reader is `tokembed.shards.reader`, the checker `tokembed.shards.check`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._paths import local_path
from tokembed.shards.schema import MANIFEST_HASH, manifest_digest, manifest_problems

__all__ = [
    "FORMAT",
    "INDEX_DTYPE",
    "MANIFEST",
    "READABLE_VERSIONS",
    "VERSION",
    "ShardInfo",
    "CHECK_HINT",
    "dtype_for_vocab",
    "load_manifest",
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
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
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


def seal_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    """A line when the manifest's content no longer matches its ``manifest_sha256`` (none without one)."""
    if MANIFEST_HASH in manifest and manifest[MANIFEST_HASH] != manifest_digest(manifest):
        return [
            f"{root / MANIFEST}: its content does not match its {MANIFEST_HASH} (it was changed after prepare wrote it)"
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
    manifest = load_manifest(root)
    problems = manifest_problems(manifest) or seal_problems(root, manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"{root / MANIFEST} is damaged: {problems[0]}{more}; {CHECK_HINT.format(root=root)}")
    return manifest
