"""`tokembed check`: find every damaged, missing or stray file of a shard folder, and say where."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import interrupted_commit, is_temp_file
from tokembed._lock import LOCK_NAME
from tokembed._paths import local_path
from tokembed.shards import megatron
from tokembed.shards.format import INDEX_DTYPE, MANIFEST, ShardInfo, load_manifest, seal_problems, sha256_file
from tokembed.shards.schema import MANIFEST_HASH, manifest_problems

__all__ = ["CheckReport", "check_report", "check_shards", "check_split", "manifest_sealed", "shard_file_problems"]


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


def check_split(root: Path, manifest: dict[str, Any], split: str, *, full: bool) -> list[str]:
    """Problems of one split: totals, file sizes, and with ``full`` checksums and document boundaries."""
    entry = manifest["splits"][split]
    dtype = np.dtype("<u2") if manifest["dtype"] == "uint16" else np.dtype("<u4")
    try:
        shards = [ShardInfo.from_dict(d) for d in entry["shards"]]
    except (ValueError, TypeError, KeyError) as e:
        return [f"split {split!r}: bad shard list ({e})"]
    problems = _total_problems(split, entry, shards)
    boundaries = _Boundaries(manifest["tokenizer"], dtype)
    for s in shards:
        file_problems = shard_file_problems(root, s, dtype.itemsize)
        problems += file_problems
        if file_problems or not full:
            boundaries.previous_ends = None
            continue
        sums = _checksum_problems(root, s)
        problems += sums
        if sums:
            boundaries.previous_ends = None
            continue
        problems += boundaries.problems(root, s, first=s is shards[0])  # checksums match: is it a valid shard?
    if full and boundaries.previous_ends is False and not problems:
        problems.append(
            f"split {split!r}: its last shard ends inside a document (no <|endoftext|>); a shard is missing at the end"
        )
    return problems


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
    problems = []
    if sha256_file(root / s.tokens) != s.sha256:
        problems.append(f"{s.tokens}: sha256 mismatch (the token file was modified or damaged)")
    if sha256_file(root / s.index) != s.index_sha256:
        problems.append(f"{s.index}: sha256 mismatch (the document index was modified or damaged)")
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
    root = local_path(root, what="the shard folder")  # a URL is a usage error, not a damaged folder
    if megatron.is_megatron_prefix(root):
        return megatron.check_megatron(root)
    stage = interrupted_commit(root.parent, root.name)
    if stage is not None and not root.is_dir():
        return [f"an export to {root} was interrupted ({stage} holds its finished files); run the export again"]
    try:
        manifest = load_manifest(root)
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        return [str(e)]
    changed, malformed = seal_problems(root, manifest), manifest_problems(manifest)
    if malformed:
        return changed + malformed  # the files cannot be checked against a malformed manifest
    problems = changed + _tokenizer_problems(manifest["tokenizer"])
    listed: set[str] = set()
    for split in manifest["splits"]:
        problems += check_split(root, manifest, split, full=True)
        for d in manifest["splits"][split]["shards"]:
            listed.update((d["tokens"], d["index"]))
    return problems + _input_count_problems(manifest) + _stray_problems(root, manifest, listed)


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
        return CheckReport(str(root), problems, {}, None)
    if megatron.is_megatron_prefix(root):  # one split of one shard, and no manifest to be sealed
        index = megatron.read_megatron_index(root)
        train = {"documents": len(index.doc_starts()), "tokens": int(index.lengths.sum()), "shards": 1}
        return CheckReport(str(root), [], {"train": train}, None)
    manifest = load_manifest(Path(root))
    splits = {
        name: {"documents": s["documents"], "tokens": s["tokens"], "shards": len(s["shards"])}
        for name, s in manifest["splits"].items()
    }
    return CheckReport(str(root), [], splits, MANIFEST_HASH in manifest)


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
