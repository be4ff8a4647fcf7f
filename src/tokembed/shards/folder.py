"""The state of a shard folder between runs: what a run is, what is finished, what may be removed.

``DIR/.parts/plan.json`` records the run (tokenizer, options, inputs); ``DIR/.parts/NNNNN.json`` records a
finished unit (input hash, shard entries); ``manifest.json`` is assembled from the records at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import atomic_write, atomic_write_json, fsync_dir, is_temp_file
from tokembed._lock import LOCK_NAME
from tokembed.shards.check import shard_file_problems
from tokembed.shards.config import PrepareConfig
from tokembed.shards.format import (
    BLOCK_BYTES,
    FORMAT,
    INDEX_DTYPE,
    MANIFEST,
    VERSION,
    ShardInfo,
    block_digests,
    dtype_for_vocab,
    sha256_file,
)
from tokembed.shards.formats import InputFile, InputFormat, get_format
from tokembed.shards.units import FILE_STATS, SPLITS

__all__ = [
    "PARTS",
    "assemble_manifest",
    "damaged_units",
    "folder_files",
    "inputs_changed",
    "load_record",
    "prepare_folder",
    "rank_manifest_name",
    "record_ok",
    "refuse_inputs_inside",
    "remove_leftovers",
    "remove_units_past",
    "run_identity",
    "tokenizer_entry",
    "unit_number",
    "write_unit",
]

PARTS = ".parts"  # the unfinished run's plan and finished-unit records


def tokenizer_entry(config: PrepareConfig) -> tuple[dict[str, Any], np.dtype]:
    """The manifest's ``"tokenizer"`` entry (its `TokenizerIdentity`) and the token dtype it needs."""
    from tokembed.tokenizer import tokenizer_identity

    ident = tokenizer_identity(config.build_tokenizer())
    return ident.to_dict(), dtype_for_vocab(ident.n_vocab)


def run_identity(
    config: PrepareConfig, files: Sequence[InputFile], tok: dict[str, Any], dtype: np.dtype
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "tokenizer": tok,
        "dtype": dtype.name,
        "config": config.to_dict(),
        "inputs": [f.identity() for f in files],
    }


def same_identity(existing: dict[str, Any], identity: dict[str, Any]) -> list[str]:
    """What differs between the run that made a folder and this one: each a phrase naming the option (as the
    command line spells it) with the folder's value and this run's, empty when nothing does."""
    from tokembed.tokenizer import identity_from_manifest

    diffs = [
        f"{what} ({existing.get(key)!r} in the folder, {identity[key]!r} now)"
        for key, what in (("format", "format"), ("version", "format version"), ("dtype", "token dtype"))
        if existing.get(key) != identity[key]
    ]
    found = existing.get("config")
    old_config: dict[str, Any] = found if isinstance(found, dict) else {}
    for key in sorted(set(old_config) | set(identity["config"])):
        if key == "tokenizer":
            continue  # compared by the ids it gives, below
        old, new = old_config.get(key), identity["config"].get(key)
        if old != new:
            diffs.append(f"--{key.replace('_', '-')} ({_shown(old)} in the folder, {_shown(new)} now)")
    old_tok, new_tok = identity_from_manifest(existing.get("tokenizer")), identity_from_manifest(identity["tokenizer"])
    if not old_tok.same_ids(new_tok):
        diffs.append(f"--tokenizer ({old_tok.describe()} in the folder, {new_tok.describe()} now)")
    old_inputs = [{k: f.get(k) for k in ("path", "format", "compressed", "bytes")} for f in existing.get("inputs", [])]
    if old_inputs != identity["inputs"]:
        diffs.append(_inputs_diff(old_inputs, identity["inputs"]))
    return diffs


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def _inputs_diff(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    """The first input that differs, named."""
    for a, b in zip(old, new):
        if a != b:
            if a["path"] != b["path"]:
                return f"set of inputs ({a['path']} in the folder, {b['path']} now)"
            return f"input {a['path']} ({_shown(a['bytes'])} bytes in the folder, {_shown(b['bytes'])} now)"
    return f"number of inputs ({len(old)} in the folder, {len(new)} now)"


def rank_manifest_name(rank: int, world_size: int) -> str:
    return f"manifest.rank-{rank:05d}-of-{world_size:05d}.json"


_SHARD_FILE = re.compile(r"\d{5}\.(bin|idx)")
_PARTS_FILE = re.compile(r"\d{5}\.json|plan\.json")
_RANK_MANIFEST = re.compile(r"manifest\.rank-\d{5}-of-\d{5}\.json")


def _own_file(p: Path) -> bool:
    """A top-level file of tokembed's: the manifest, a rank manifest, a temporary file of an atomic write."""
    name = p.name
    return (
        p.is_file()
        and not p.is_symlink()
        and (name == MANIFEST or bool(_RANK_MANIFEST.fullmatch(name)) or is_temp_file(name))
    )


def folder_files(out: Path) -> tuple[list[Path], list[str]]:
    """The files in ``out`` that tokembed wrote (by exact name and place), and the names of all others.

    Tokembed's own: ``manifest.json``, rank manifests, ``SPLIT/NNNNN.bin|.idx``, ``.parts/NNNNN.json`` and
    ``.parts/plan.json``, and temporary files of its atomic writes. Anything else (another name, a folder
    or symlink where a file belongs) is foreign: never deleted, not even by ``--overwrite``.
    """
    ours: list[Path] = []
    foreign: list[str] = []
    for p in sorted(out.iterdir()):
        if p.name in (*SPLITS, PARTS) and p.is_dir() and not p.is_symlink():
            pattern = _PARTS_FILE if p.name == PARTS else _SHARD_FILE
            for q in sorted(p.iterdir()):
                if q.is_file() and not q.is_symlink() and (pattern.fullmatch(q.name) or is_temp_file(q.name)):
                    ours.append(q)
                else:
                    foreign.append(f"{p.name}/{q.name}")
        elif p.name == LOCK_NAME:
            continue  # held by this run: kept (see `tokembed._lock`)
        elif _own_file(p):
            ours.append(p)
        else:
            foreign.append(p.name)
    return ours, foreign


def _clear(out: Path, files: Sequence[Path]) -> None:
    """Delete tokembed's own ``files`` in ``out`` (from `folder_files`), then its folders left empty."""
    for p in files:
        p.unlink(missing_ok=True)
    for name in (*SPLITS, PARTS):
        with contextlib.suppress(OSError):  # absent (a folder with foreign files never gets here)
            (out / name).rmdir()


def refuse_inputs_inside(out: Path, files: Sequence[InputFile]) -> None:
    """An input inside the output folder could be overwritten or deleted: refuse before touching anything."""
    root = os.path.realpath(out)
    inside = [f.path for f in files if f.size is not None and os.path.realpath(f.path).startswith(root + os.sep)]
    if inside:
        raise ValueError(
            f"input {inside[0]} is inside the output folder {out}; choose an --out folder outside the inputs"
        )


def damaged_units(out: Path, manifest: dict[str, Any], *, full: bool) -> dict[int, str]:
    """The units of a finished folder whose shard files are missing or of another size (``full``: or whose sha256
    differs from the manifest's), each with its first problem."""
    itemsize = 2 if manifest.get("dtype") == "uint16" else 4
    damaged: dict[int, str] = {}
    for split in manifest.get("splits", {}).values():
        for entry in split.get("shards", []):
            s = ShardInfo.from_dict(entry)
            uid = unit_number(Path(s.tokens).name)
            if uid is None or uid in damaged:
                continue
            problems = shard_file_problems(out, s, itemsize)
            if not problems and full:
                for rel, digest in ((s.tokens, s.sha256), (s.index, s.index_sha256)):
                    if sha256_file(out / rel) != digest:
                        problems.append(f"{rel}: sha256 mismatch")
            if problems:
                damaged[uid] = problems[0]
    return damaged


def unit_number(name: str) -> int | None:
    """The unit a shard file or record belongs to (``00012.bin`` -> 12); None for other files."""
    stem = name.split(".")[0]
    return int(stem) if len(stem) == 5 and stem.isdigit() else None


def remove_leftovers(out: Path, rank: int = 0, world_size: int = 1) -> None:
    """Delete temporary files of an interrupted run (never complete, never trusted).

    With several ranks sharing the folder, only this rank's units are touched: another rank may be
    writing its own temporary files right now.
    """
    for folder in (out, *(out / s for s in SPLITS), out / PARTS):
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if not is_temp_file(p.name):
                continue
            uid = unit_number(p.name[1 : p.name.index(".tmp-")])
            if (uid % world_size == rank) if uid is not None else world_size == 1:
                p.unlink(missing_ok=True)


def inputs_changed(manifest: dict[str, Any], files: Sequence[InputFile]) -> bool:
    """Whether a finished folder's inputs may have changed since it was made with the same paths and sizes
    (else its identity differs): standard input (only its bytes can tell), or a file modified since. A time not
    recorded (none at all, or null: a URL input before tokembed recorded objects' times) is not compared: that
    folder is not tokenized again for it."""
    if any(f.size is None for f in files):
        return True
    recorded = manifest.get("input_mtimes")
    if recorded is None:
        return False  # made by a tokembed that recorded no times: nothing to compare with
    if len(recorded) != len(files):
        return True
    return any(m is not None and m != f.mtime_ns for m, f in zip(recorded, files))


def _reopen(out: Path, identity: dict[str, Any]) -> None:
    """Turn a finished folder whose inputs changed into an unfinished run of the same plan, done again."""
    atomic_write_json(out / PARTS / "plan.json", identity)
    (out / MANIFEST).unlink()  # last: a crash before here leaves the finished folder, found changed again
    fsync_dir(out)


def prepare_folder(
    out: Path, identity: dict[str, Any], files: Sequence[InputFile], *, overwrite: bool, rank: int, world_size: int
) -> bool:
    """Check ``out`` against this run. Returns True when the work is already complete."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {out} is a file; give a folder path for the shards")
    out.mkdir(parents=True, exist_ok=True)
    entries = sorted(p.name for p in out.iterdir() if p.name != LOCK_NAME)
    ours, foreign = folder_files(out)
    if foreign:
        more = f", ... ({len(foreign)} in all)" if len(foreign) > 5 else ""
        raise FileExistsError(
            f"output folder {out} holds files that are not tokembed shards ({', '.join(foreign[:5])}{more}); "
            "move them away or choose an empty or new folder: tokembed never deletes them, not even with --overwrite"
        )
    sources = [(out / MANIFEST, "finished shards"), (out / PARTS / "plan.json", "an unfinished run")]
    sources += [(out / n, "a rank's shards") for n in entries if n.startswith("manifest.rank-")]
    for path, what in sources:
        if not path.is_file():
            continue
        try:
            existing = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            existing = {}
        diffs = same_identity(existing, identity)
        if diffs:
            if overwrite:
                _clear(out, ours)
                return False
            raise FileExistsError(
                f"{out} holds {what} made with a different {'; a different '.join(diffs)}; "
                "use another --out folder, rerun with the original inputs and options, or pass --overwrite to replace it"
            )
    if (out / MANIFEST).is_file():
        if overwrite:
            _clear(out, ours)
            return False
        if world_size == 1 and inputs_changed(load_record(out / MANIFEST) or {}, files):
            _reopen(out, identity)  # tokenized again; unchanged shards are rewritten with the same bytes
            return False
        return True
    if world_size > 1 and (out / rank_manifest_name(rank, world_size)).is_file() and not overwrite:
        return True
    planless = (
        entries
        and not (out / PARTS / "plan.json").is_file()
        and not any(n.startswith("manifest.rank-") for n in entries)
    )
    has_shards = any((out / s).is_dir() and any((out / s).iterdir()) for s in SPLITS)
    if planless and not overwrite and has_shards:  # shard files without any plan: nothing to resume safely
        raise FileExistsError(f"{out} holds shard files but no manifest or plan; pass --overwrite to replace them")
    if overwrite and not (out / PARTS / "plan.json").is_file():
        _clear(out, ours)
    return False


def record_ok(out: Path, record: dict[str, Any], input_hash: str) -> bool:
    """Whether a unit's record matches its input now and its shard files verify (sha256)."""
    if record.get("input_hash") != input_hash:
        return False
    for info in record["splits"].values():
        s = ShardInfo.from_dict(info)
        for rel, size, digest in (
            (s.tokens, s.bytes, s.sha256),
            (s.index, s.n_documents * INDEX_DTYPE.itemsize, s.index_sha256),
        ):
            p = out / rel
            if not p.is_file() or p.stat().st_size != size or sha256_file(p) != digest:
                return False
    return True


def load_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent or unreadable: the unit is simply done again


def write_unit(out: Path, result: dict[str, Any], dtype: np.dtype) -> dict[str, Any]:
    uid = result["unit"]
    record: dict[str, Any] = {
        "unit": uid,
        "input_hash": result["input_hash"],
        "splits": {},
        "stats": {str(k): v for k, v in sorted(result["stats"].items())},
    }
    for split, r in result["splits"].items():
        tokens_rel, index_rel = f"{split}/{uid:05d}.bin", f"{split}/{uid:05d}.idx"
        atomic_write(out / tokens_rel, r["tokens"], sync_dir=False)
        atomic_write(out / index_rel, r["index"], sync_dir=False)
        fsync_dir(out / split)  # both renames durable, once, before the record that says the unit is done
        record["splits"][split] = ShardInfo(
            tokens=tokens_rel,
            index=index_rel,
            n_tokens=len(r["tokens"]),
            n_documents=len(r["index"]),
            bytes=len(r["tokens"]) * dtype.itemsize,
            sha256=r["sha256"],
            index_sha256=r["index_sha256"],
            block_bytes=BLOCK_BYTES,  # what a remote reader checks each block it fetches against
            block_sha256=tuple(block_digests(r["tokens"])),
            index_block_sha256=tuple(block_digests(r["index"])),
        ).to_dict()
    remove_unit_files(out, uid, keep=record["splits"])  # an earlier run on other input may have filled another split
    atomic_write_json(out / PARTS / f"{uid:05d}.json", record)  # last: the unit counts as done from here on
    return record


def remove_unit_files(out: Path, uid: int, *, keep=(), record: bool = False) -> None:
    """Delete unit ``uid``'s shard files in the splits not in ``keep`` (and its record with ``record``)."""
    for split in SPLITS:
        if split not in keep:
            for suffix in (".bin", ".idx"):
                (out / split / f"{uid:05d}{suffix}").unlink(missing_ok=True)
    if record:
        (out / PARTS / f"{uid:05d}.json").unlink(missing_ok=True)


def remove_units_past(out: Path, n_units: int, rank: int, world_size: int) -> None:
    """Delete this rank's shard files and records numbered ``n_units`` or more: left by an interrupted run
    on input that has changed since and now makes fewer units."""
    stale = set()
    for folder in (*(out / s for s in SPLITS), out / PARTS):
        if folder.is_dir():
            for p in folder.iterdir():
                uid = unit_number(p.name)
                if uid is not None and uid >= n_units and uid % world_size == rank:
                    stale.add(uid)
    for uid in stale:
        remove_unit_files(out, uid, record=True)


def assemble_manifest(
    identity: dict[str, Any], records: list[dict[str, Any]], n_units: int, mtimes: list[int | None] | None = None
) -> dict[str, Any]:
    """The manifest of a finished run, from its unit records, with the inputs' modification times (``mtimes``:
    a rerun after an input was edited in place, keeping its size, sees from them that the folder is stale)."""
    records = sorted(records, key=lambda r: r["unit"])
    if [r["unit"] for r in records] != list(range(n_units)):
        missing = sorted(set(range(n_units)) - {r["unit"] for r in records})
        raise ValueError(
            f"units {missing[:10]} of {n_units} are not finished; run the missing ranks (or rerun prepare) first"
        )
    splits: dict[str, Any] = {}
    for s in SPLITS:
        shards = [r["splits"][s] for r in records if s in r["splits"]]
        splits[s] = {
            "tokens": sum(x["n_tokens"] for x in shards),
            "documents": sum(x["n_documents"] for x in shards),
            "shards": shards,
        }
    inputs = [{**f, **dict.fromkeys(FILE_STATS, 0)} for f in identity["inputs"]]
    for r in records:
        for i, st in r["stats"].items():
            for k, v in st.items():
                inputs[int(i)][k] += v
    if not any(f["documents"] for f in inputs):
        raise ValueError(_no_documents(inputs))
    times = {} if mtimes is None else {"input_mtimes": mtimes}
    return {**identity, "inputs": inputs, "units": n_units, "splits": splits, **times}


def _format_named(name: str) -> InputFormat:
    """The input format ``name`` (its messages), or the defaults for a format this process has not registered."""
    try:
        return get_format(name)
    except ValueError:
        return InputFormat()


def _no_documents(inputs: list[dict[str, Any]]) -> str:
    """The error for a run whose inputs hold no document at all: what each input held instead."""

    def held(f: dict[str, Any]) -> str:
        fmt = _format_named(f["format"])
        if not f["bytes"]:
            return "an empty file"
        if f["empty"]:
            return f"{f['empty']:,} {fmt.empty_what}"
        if f["bad_lines"]:
            return f"{f['bad_lines']:,} {fmt.bad_what}"
        return fmt.nothing_what

    listed = "; ".join(f"{f['path']}: {held(f)}" for f in inputs[:10]) + ("; ..." if len(inputs) > 10 else "")
    return f"the inputs hold no documents to tokenize ({listed}); check the inputs, --field and --format"
