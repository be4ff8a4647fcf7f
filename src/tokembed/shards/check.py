"""`tokembed check`: find every damaged, missing or stray file of a shard folder, and say where."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import interrupted_commit, is_temp_file
from tokembed._lock import LOCK_NAME
from tokembed._paths import local_path
from tokembed.shards import megatron, remote
from tokembed.shards.format import (
    BLOCK_BYTES,
    INDEX_DTYPE,
    MANIFEST,
    ShardInfo,
    file_digests,
    load_manifest,
    seal_problems,
)
from tokembed.shards.schema import MANIFEST_HASH, manifest_problems
from tokembed.storage.options import remote_options
from tokembed.storage.stores import open_store
from tokembed.storage.urls import as_url, is_url, local_path_of, public_url

Stage = Callable[[ShardInfo], AbstractContextManager[Path]]

__all__ = [
    "CheckReport",
    "check_folder",
    "check_remote",
    "check_report",
    "check_shards",
    "check_split",
    "manifest_sealed",
    "shard_file_problems",
]


def shard_file_problems(root: Path, s: ShardInfo, itemsize: int) -> list[str]:
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


def check_split(
    root: Path, manifest: dict[str, Any], split: str, *, full: bool, stage: Stage | None = None
) -> list[str]:
    """Problems of one split: totals, file sizes, and with ``full`` checksums and document boundaries.

    ``stage(shard)``, when given, is a context manager that yields a local folder holding that shard's two
    files (a remote folder's check downloads them one shard at a time); else they are read in ``root``.
    """
    entry = manifest["splits"][split]
    dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
    try:
        shards = [ShardInfo.from_dict(d) for d in entry["shards"]]
    except (ValueError, TypeError, KeyError) as e:
        return [f"split {split!r}: bad shard list ({e})"]
    problems = _total_problems(split, entry, shards)
    boundaries = _Boundaries(manifest["tokenizer"], dtype)
    for s in shards:
        with stage(s) if stage is not None else contextlib.nullcontext(root) as where:
            problems += _one_shard_problems(where, s, dtype, boundaries, full=full, first=s is shards[0])
    if full and boundaries.previous_ends is False and not problems:
        problems.append(
            f"split {split!r}: its last shard ends inside a document (no <|endoftext|>); a shard is missing at the end"
        )
    return problems


def _one_shard_problems(
    root: Path, s: ShardInfo, dtype: np.dtype, boundaries: _Boundaries, *, full: bool, first: bool
) -> list[str]:
    file_problems = shard_file_problems(root, s, dtype.itemsize)
    if file_problems or not full:
        boundaries.previous_ends = None
        return file_problems
    sums = _checksum_problems(root, s)
    if sums:
        boundaries.previous_ends = None
        return sums
    return boundaries.problems(root, s, first=first)  # checksums match: is it a valid shard?


def _tokenizer_problems(entry: dict[str, Any] | None) -> list[str]:
    """The manifest's tokenizer against the one this machine builds from the same source (if it can)."""
    from tokembed.tokenizer import get_tokenizer, identity_from_manifest, tokenizer_identity

    recorded = identity_from_manifest(entry)
    try:
        here = tokenizer_identity(get_tokenizer(recorded.source, **dict(recorded.options)))
    except (ValueError, OSError):
        return []  # a tokenizer this machine cannot build: its hash cannot be compared
    if here.same_ids(recorded):
        return []
    return [
        f"manifest: tokenizer hash {recorded.hash!r} differs from the installed {recorded.source!r} tokenizer's "
        f"{here.hash!r}: the shards were made with {recorded.describe()}, this machine builds {here.describe()}"
    ]


def _total_problems(split: str, entry: dict[str, Any], shards: list[ShardInfo]) -> list[str]:
    problems = []
    for key, total in (("tokens", sum(s.n_tokens for s in shards)), ("documents", sum(s.n_documents for s in shards))):
        if total != entry.get(key):
            problems.append(
                f"split {split!r}: manifest total of {entry.get(key)} {key} differs from the sum over its shards ({total})"
            )
    return problems


def _checksum_problems(root: Path, s: ShardInfo) -> list[str]:
    """The files' sha256 and, where the manifest records them, each block's (naming the block's bytes)."""
    problems = []
    for rel, digest, blocks, what in (
        (s.tokens, s.sha256, s.block_sha256, "the token file"),
        (s.index, s.index_sha256, s.index_block_sha256, "the document index"),
    ):
        whole, got = file_digests(root / rel, s.block_bytes or BLOCK_BYTES)
        bad = [i for i, (a, b) in enumerate(zip(got, blocks)) if a != b]
        if blocks and len(got) != len(blocks):
            bad.append(min(len(got), len(blocks)))
        where = (
            f"; block {bad[0]}, bytes {bad[0] * s.block_bytes}-{(bad[0] + 1) * s.block_bytes - 1}, differs"
            if bad
            else ""
        )
        if whole != digest:
            problems.append(f"{rel}: sha256 mismatch ({what} was modified or damaged{where})")
        elif bad:  # the file is the one prepared: its block hashes in the manifest are wrong
            problems.append(f"{rel}: the manifest's block sha256 do not match the file{where}")
    return problems


class _Boundaries:
    """Checks a split's shards in order: ``<|endoftext|>`` exactly where documents end, documents that go
    on across a shard boundary on both sides of it, and every id inside the vocabulary.

    Attributes:
        previous_ends: whether the shard before ended a document (None: unknown, it was damaged).
    """

    def __init__(self, tokenizer: dict[str, Any], dtype: np.dtype) -> None:
        self.dtype = dtype
        self.n_vocab = int(tokenizer.get("n_vocab", np.iinfo(dtype).max + 1))
        self.eot = tokenizer.get("eot_token")
        self.previous_ends: bool | None = True  # the stream starts at a document start

    def problems(self, root: Path, s: ShardInfo, *, first: bool) -> list[str]:
        idx = np.fromfile(root / s.index, dtype=INDEX_DTYPE)
        toks = np.memmap(root / s.tokens, dtype=self.dtype, mode="r") if s.n_tokens else np.zeros(0, self.dtype)
        if len(idx) and (idx[0] < 0 or np.any(np.diff(idx) < 1) or idx[-1] >= s.n_tokens):
            self.previous_ends = None
            return [f"{s.index}: document starts are not strictly increasing within the shard's {s.n_tokens} tokens"]
        problems = self._eot_problems(s, idx, toks, first=first) if s.n_tokens and self.eot is not None else []
        if s.n_tokens and int(toks.max()) >= self.n_vocab:
            problems.append(f"{s.tokens}: token id {int(toks.max())} is outside the vocabulary (size {self.n_vocab})")
        return problems

    def _eot_problems(self, s: ShardInfo, idx: np.ndarray, toks: np.ndarray, *, first: bool) -> list[str]:
        # <|endoftext|> ends every document and appears nowhere else (documents are encoded as ordinary
        # text): it sits just before each listed start, and last if the shard ends a document.
        problems = []
        ends_document = bool(toks[-1] == self.eot)
        expected = np.append(idx[idx > 0] - 1, [s.n_tokens - 1] if ends_document else [])
        if not np.array_equal(np.flatnonzero(toks == self.eot), expected):
            problems.append(
                f"{s.tokens}: its <|endoftext|> tokens ({self.eot}) are not exactly where the index says documents end"
            )
        starts_document = bool(len(idx) and idx[0] == 0)
        if self.previous_ends is not None and self.previous_ends != starts_document:
            if starts_document:
                why = "starts a document, but the shard before it ends inside one (is a shard missing?)"
            elif first:
                why = "is the split's first shard but begins inside a document (is a shard missing?)"
            else:
                why = "begins inside a document, but the shard before it ends with <|endoftext|> (is a shard missing?)"
            problems.append(f"{s.tokens}: {why}")
        self.previous_ends = ends_document
        return problems


def check_shards(root: str | os.PathLike) -> list[str]:
    """Verify a shard folder: the manifest (schema and seal), counts, sizes, checksums, document boundaries,
    and that the folder holds nothing else. A Megatron prefix: `tokembed.shards.megatron.check_megatron`.

    Returns:
        One line per problem, naming the damaged, missing or stray file; empty when the folder is healthy.
        A single flipped byte in any token or index file is found (sha256), and any change to the content
        of a manifest that carries its ``manifest_sha256`` (a manifest without one, from a tokembed before
        it existed, is checked against the schema only: see `manifest_sealed`).
    """
    if is_url(root) and local_path_of(root) is None:
        return check_remote(str(root))
    root = local_path(local_path_of(root) or root, what="the shard folder")  # an unsupported URL: a usage error
    if megatron.is_megatron_prefix(root):
        return megatron.check_megatron(root)
    stage = interrupted_commit(root.parent, root.name)
    if stage is not None and not root.is_dir():
        return [f"an export to {root} was interrupted ({stage} holds its finished files); run the export again"]
    try:
        manifest = load_manifest(root)
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        return [str(e)]
    return check_folder(root, manifest, strays=lambda listed: _stray_problems(root, manifest, listed))


def check_folder(
    root: str | os.PathLike,
    manifest: dict[str, Any],
    *,
    strays: Callable[[set[str]], list[str]],
    stage: Stage | None = None,
) -> list[str]:
    """`check_shards` once the manifest is loaded: ``strays(listed files)`` finds what the folder holds beyond
    them, ``stage`` brings a shard's files to a local folder (see `check_split`)."""
    changed, malformed = seal_problems(root, manifest), manifest_problems(manifest)
    if malformed:
        return changed + malformed  # the files cannot be checked against a malformed manifest
    problems = changed + _tokenizer_problems(manifest["tokenizer"])
    listed: set[str] = set()
    for split in manifest["splits"]:
        problems += check_split(Path(root), manifest, split, full=True, stage=stage)
        for d in manifest["splits"][split]["shards"]:
            listed.update((d["tokens"], d["index"]))
    return problems + _input_count_problems(manifest) + strays(listed)


def manifest_sealed(root: str | os.PathLike) -> bool:
    """Whether the folder's manifest carries its ``manifest_sha256`` (manifests written before it do not;
    a Megatron dataset has no manifest: its export's record holds the ``.bin``'s sha256)."""
    return megatron.is_megatron_prefix(root) or MANIFEST_HASH in load_manifest(Path(root))


@dataclass(frozen=True)
class CheckReport:
    """What `tokembed check` finds in a shard folder (`check_report`).

    Attributes:
        folder: the folder checked, as given.
        problems: one line per damaged, missing or stray file (`check_shards`); empty when the folder is healthy.
        splits: per split, ``{"documents", "tokens", "shards"}`` from the verified manifest (empty when damaged).
        sealed: whether the manifest carries its ``manifest_sha256`` (`manifest_sealed`); None when damaged, and
            for a Megatron prefix (which has no manifest).
    """

    folder: str
    problems: list[str]
    splits: dict[str, dict[str, int]]
    sealed: bool | None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``tokembed check --json``), ``ok`` included."""
        return {
            "folder": self.folder,
            "ok": self.ok,
            "problems": self.problems,
            "splits": self.splits,
            "sealed": self.sealed,
        }


def check_report(root: str | os.PathLike) -> CheckReport:
    """`check_shards`, and for a healthy folder the sizes of its splits and whether its manifest is sealed."""
    problems = check_shards(root)
    if problems:
        return CheckReport(_shown(root), problems, {}, None)
    if megatron.is_megatron_prefix(root):  # one split of one shard, and no manifest to be sealed
        index = megatron.read_megatron_index(root)
        train = {"documents": len(index.doc_starts()), "tokens": int(index.lengths.sum()), "shards": 1}
        return CheckReport(_shown(root), [], {"train": train}, None)
    if is_url(root) and local_path_of(root) is None:
        manifest = remote.fetch_manifest(open_store(str(root), remote_options().storage_options))
    else:
        manifest = load_manifest(Path(local_path_of(root) or root))
    splits = {
        name: {"documents": s["documents"], "tokens": s["tokens"], "shards": len(s["shards"])}
        for name, s in manifest["splits"].items()
    }
    return CheckReport(_shown(root), [], splits, MANIFEST_HASH in manifest)


def _shown(root: str | os.PathLike) -> str:
    """The folder as a report shows it: a URL without credentials or query (`tokembed.storage.urls.public_url`)."""
    return public_url(as_url(root)) if is_url(root) else str(root)


def _input_count_problems(manifest: dict[str, Any]) -> list[str]:
    """Per-input counts (tokens without separators) must add up to the splits (one separator per document)."""
    inputs = manifest.get("inputs") or []
    if not (inputs and all("documents" in f and "tokens" in f for f in inputs)):
        return []
    docs = sum(s["documents"] for s in manifest["splits"].values())
    toks = sum(s["tokens"] for s in manifest["splits"].values())
    in_docs = sum(f["documents"] for f in inputs)
    in_toks = sum(f["tokens"] for f in inputs)
    if in_docs != docs or in_toks + in_docs != toks:
        return [
            f"manifest: the inputs count {in_docs} documents and {in_toks} tokens, the splits {docs} documents and {toks} tokens with separators"
        ]
    return []


def _stray_problems(root: Path, manifest: dict[str, Any], listed: set[str]) -> list[str]:
    """Files in the folder that the manifest does not list (temporary files of interrupted writes aside)."""
    problems = []
    for p in sorted(root.iterdir()):
        if p.name not in (MANIFEST, LOCK_NAME, *manifest["splits"]) and not is_temp_file(p.name):
            problems.append(
                f"{p.name}: not part of the shard folder (a stray {'folder' if p.is_dir() else 'file'}; move it away)"
            )
    for split in manifest["splits"]:
        folder = root / split
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                rel = f"{split}/{p.name}"
                if rel not in listed and not is_temp_file(p.name):
                    problems.append(f"{rel}: not listed in the manifest (a stray file from another run?)")
    return problems


def check_remote(url: str, *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """`tokembed check` for a remote folder: the same checks, each shard downloaded once (not through the cache).

    Returns:
        One line per problem, naming the object (relative to ``url``); empty when the folder is healthy.
    """
    try:
        store = open_store(url, remote_options(storage_options=storage_options).storage_options)
        manifest = remote.fetch_manifest(store)
        listing = store.listing()
    except (FileNotFoundError, ValueError) as e:  # refused credentials are no damage: raised (exit 2)
        return [str(e)]

    def strays(listed: set[str]) -> list[str]:
        extra = sorted(k for k in listing if k not in listed and k != MANIFEST)
        return [f"{k}: not listed in the manifest (a stray object from another run?)" for k in extra]

    return check_folder(store.where(), manifest, strays=strays, stage=remote.download_stage(store))
