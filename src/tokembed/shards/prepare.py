"""Text corpora on disk -> token shards on disk: parallel, streaming, crash-safe, resumable.

The plan is fixed before any tokenizing, so the output never depends on the engine or worker count:

1. The inputs are listed in sorted order (`tokembed.shards.sources.resolve_inputs`): one stream of documents
   (a whole text file, or one JSON line).
2. The stream is cut into **work units** of at least ``shard_mb`` MB of input, each ending at the end of a
   JSON line or a text document (`tokembed.shards.sources.plan_units`). A text document larger than a unit is cut
   into pieces at pre-tokenizer-safe points, so it spans several units and shards and is never held
   whole. Unit ``k`` becomes shard ``k`` of each split (``train/0000k.bin`` and ``.idx``; a split that
   gets nothing from a unit gets no file). The planner reads plain files only around the cut points.
3. Each unit is tokenized in parts of about 1 MiB (`tokembed.shards.units`, cut the same safe way) by a pool of
   worker processes (or Ray tasks), which read their byte spans, hash them, decode, parse, tokenize with
   ``encode_ordinary`` (a literal ``<|endoftext|>`` inside a document stays text) and return numpy
   arrays. The main process joins a unit's parts in order, writes its shards atomically (temporary name,
   fsync, rename) with their sha256, then a small record of the finished unit in ``DIR/.parts/``.
4. When every unit is done, ``manifest.json`` is written (atomically, last) and ``.parts`` removed.

Resuming a killed run plans again, skips every unit whose record exists, whose input bytes hash to the
recorded value and whose files verify, and tokenizes the rest: the finished folder is byte-identical to an
uninterrupted run. Memory stays bounded by about ``shard_mb`` times the units in flight (``2 * workers``),
whatever the corpus size and however large its documents.

With ``rank``/``world_size`` each machine tokenizes the units ``k`` with ``k % world_size == rank`` into
the same (shared) folder and writes ``manifest.rank-R-of-N.json``; `merge_manifests` then writes the final
manifest (``tokembed merge DIR``).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tokembed._atomic import atomic_write, atomic_write_json
from tokembed._checks import check_int, check_number
from tokembed._cpus import available_cpus, check_workers
from tokembed._lock import folder_lock
from tokembed._paths import local_path, refuse_inside_checkpoint
from tokembed.shards.config import PrepareConfig
from tokembed.shards.counts import SplitCounts, split_token_counts
from tokembed.shards.engines import ENGINES, RAY_START_SECONDS, make_engine
from tokembed.shards.folder import (
    PARTS,
    assemble_manifest,
    damaged_units,
    load_record,
    prepare_folder,
    rank_manifest_name,
    record_ok,
    refuse_inputs_inside,
    remove_leftovers,
    remove_units_past,
    run_identity,
    tokenizer_entry,
    unit_number,
    write_unit,
)
from tokembed.shards.format import MANIFEST, ShardInfo
from tokembed.shards.formats import check_inputs
from tokembed.shards.progress import Progress
from tokembed.shards.publish import staging_folder, upload_folder
from tokembed.shards.schema import sealed_text
from tokembed.shards.sources import InputFile, find_inputs
from tokembed.shards.units import Unit, iter_units, join_parts, trim_heap, unit_input_hash, unit_parts
from tokembed.storage.urls import is_url, local_path_of, public_url

__all__ = ["PrepareConfig", "PrepareResult", "merge_manifests", "prepare_corpus"]


@dataclass
class PrepareResult:
    """What `prepare_corpus` did.

    Attributes:
        out: the shard folder.
        manifest: the final manifest (``None`` for a rank of a multi-machine run, which writes a partial one).
        units: work units in the plan.
        units_done: units tokenized by this call.
        units_skipped: units found finished (resume) or owned by other ranks.
        already_done: the folder was already complete; nothing was done.
        seconds: wall time of this call.
        tokens_done: tokens produced by this call.
        input_bytes: input bytes read.
        inputs: the manifest's entries of the input files.
        skipped_inputs: paths left out as repeats of an input (a symlink loop, a file named twice), with why.
        repaired: units of a finished folder made again because their files were damaged (`repair`).
    """

    out: Path
    manifest: dict[str, Any] | None
    units: int
    units_done: int = 0
    units_skipped: int = 0
    already_done: bool = False
    seconds: float = 0.0
    tokens_done: int = 0
    input_bytes: int = 0
    inputs: list[dict[str, Any]] = field(default_factory=list)
    skipped_inputs: list[str] = field(default_factory=list)
    repaired: list[int] = field(default_factory=list)

    def __repr__(self) -> str:  # the manifest lists every shard: hundreds of KB for a large corpus
        return (
            f"PrepareResult(out={str(self.out)!r}, units={self.units}, units_done={self.units_done}, "
            f"units_skipped={self.units_skipped}, already_done={self.already_done}, tokens_done={self.tokens_done}, "
            f"seconds={self.seconds:.1f}{f', repaired={self.repaired}' if self.repaired else ''})"
        )

    def summary(self) -> str:
        lines = []
        if self.skipped_inputs:
            more = f", ... ({len(self.skipped_inputs)} in all)" if len(self.skipped_inputs) > 3 else ""
            lines.append(f"skipped as repeats: {'; '.join(self.skipped_inputs[:3])}{more}")
        if self.already_done:
            done = (
                f"{self.out} is already prepared with these inputs and settings: nothing to do (its files have their "
                f"recorded sizes; `tokembed check {self.out}` verifies every byte, and --repair re-makes a damaged unit)"
            )
            return "\n".join([*lines, done])
        if self.repaired:
            shown = ", ".join(map(str, self.repaired[:10])) + (", ..." if len(self.repaired) > 10 else "")
            lines.append(
                f"repaired {len(self.repaired)} damaged units ({shown}): byte-identical to what the manifest records"
            )
        if self.manifest is not None:
            for split, s in self.manifest["splits"].items():
                lines.append(
                    f"{split}: {s['documents']:,} documents, {s['tokens']:,} tokens in {len(s['shards'])} shards"
                )
            lines += _input_notes(self.manifest["inputs"])
        rate = self.tokens_done / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"{self.units_done} of {self.units} units tokenized this run ({self.units_skipped} skipped), "
            f"{self.tokens_done:,} tokens in {self.seconds:.1f} s ({rate:,.0f} tokens/s) -> {self.out}"
        )
        return "\n".join(lines)


def _input_notes(inputs: list[dict[str, Any]]) -> list[str]:
    """Summary lines for what was skipped or repaired, per input file (the three worst named)."""
    labels = {
        "empty": "empty documents skipped",
        "bad_lines": "bad JSON lines skipped",
        "replaced": "warning: {n} invalid UTF-8 sequences or lone surrogates replaced by U+FFFD",
    }
    lines = []
    for key, label in labels.items():
        per_file = [(f["path"], f[key]) for f in inputs if f[key]]
        if per_file:
            worst = ", ".join(f"{p}: {n:,}" for p, n in sorted(per_file, key=lambda x: -x[1])[:3])
            total = f"{sum(n for _, n in per_file):,}"
            text = label.format(n=total) if "{n}" in label else f"{total} {label}"
            lines.append(f"{text} ({worst}{', ...' if len(per_file) > 3 else ''})")
    none = [f["path"] for f in inputs if not f["documents"]]
    if none:
        lines.append("no documents from: " + ", ".join(none[:5]) + (", ..." if len(none) > 5 else ""))
    return lines


def prepare_corpus(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike,
    out: str | os.PathLike,
    *,
    config: PrepareConfig | None = None,
    workers: int = 0,
    engine: str = "local",
    ray_address: str | None = None,
    ray_start_timeout: float = RAY_START_SECONDS,
    rank: int = 0,
    world_size: int = 1,
    overwrite: bool = False,
    repair: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> PrepareResult:
    """Tokenize a corpus into a verified shard folder (see the module docstring for the plan).

    Args:
        inputs: files, folders, globs, or ``"-"`` (standard input); each may be a URL (an object, a prefix or a
            glob: ``s3://bucket/corpus/``), read by ranges through `tokembed.storage`.
        out: the shard folder to create or resume; a URL (``s3://bucket/shards``) prepares into a staging folder
            under the cache folder, then uploads it: verified, the manifest last, so that a folder without a
            manifest is unfinished; a rerun after a crash keeps the uploaded objects whose sha256 match.
        config: the output-deciding options (`PrepareConfig`); or pass them as keywords
            (``val_fraction=0.01, field="content", ...``).
        workers: tokenizing processes; 0 = one per CPU available to this process (its affinity mask and cgroup
            quota: `tokembed._cpus.available_cpus`); 1 = in this process; at most 4 per available CPU.
        engine: ``"local"`` (a process pool) or ``"ray"`` (Ray tasks; same bytes).
        ray_address: Ray cluster address for ``engine="ray"`` (default: the running or a new local Ray).
        ray_start_timeout: seconds ``engine="ray"`` waits for a new Ray session to start (or to join
            ``ray_address``) before it gives up with `TimeoutError`, the folder unlocked and Ray's processes stopped.
        rank: this machine's rank in ``[0, world_size)``.
        world_size: number of machines sharing the units; with more than one, each writes
            ``manifest.rank-R-of-N.json`` and `merge_manifests` finishes the folder.
        overwrite: replace a shard folder made from other inputs or options.
        repair: on a finished folder, check every shard's sha256 (reads the whole folder) and make the units
            whose files fail again, from the same inputs: the folder ends byte-identical. Without it a rerun
            checks the files' presence and sizes only, and makes again the units whose files fail that.
        progress: show a progress bar (default: when stderr is a terminal).

    Returns:
        A `PrepareResult` (its ``manifest`` is the finished folder's manifest).

    Raises:
        ValueError: bad options, bad input (invalid JSON, missing field, invalid UTF-8 with ``strict``).
        FileNotFoundError / PermissionError: missing or unreadable inputs.
        FileExistsError: ``out`` is a file, or holds other shards or foreign files.
    """
    t0 = time.perf_counter()
    if is_url(out) and local_path_of(out) is None:  # a bucket: prepared locally, verified, uploaded
        if repair:
            raise ValueError(
                f"--repair checks a local folder's files; for {public_url(str(out))} run `tokembed check` on it, "
                "then prepare again with --overwrite to upload every object anew"
            )
        kw = dict(config=config, workers=workers, engine=engine, ray_address=ray_address, progress=progress)
        return _prepare_to_url(inputs, str(out), rank=rank, world_size=world_size, overwrite=overwrite, **kw, **options)
    config = _resolve_config(config, options)
    _check_run_options(engine=engine, workers=workers, rank=rank, world_size=world_size)
    check_number("ray_start_timeout", ray_start_timeout, min=0, min_open=True, noun="a number of seconds")
    out = local_path(local_path_of(out) or out, what="--out")
    refuse_inside_checkpoint(out)
    files, skipped = find_inputs(inputs, format=config.format)
    check_inputs(files, config.field)  # e.g. a Parquet file without the text column fails before the folder is touched
    tok, dtype = tokenizer_entry(config)
    if repair and world_size > 1:
        raise ValueError("--repair checks a finished folder: run it once, without --rank/--world-size")
    if overwrite and world_size > 1:
        raise ValueError(
            "--overwrite cannot be combined with --world-size > 1 (one rank would delete the others' work); "
            "empty the folder once before starting the ranks"
        )
    identity = run_identity(config, files, tok, dtype)
    refuse_inputs_inside(out, files)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {out} is a file; give a folder path for the shards")
    out.mkdir(parents=True, exist_ok=True)
    run_options: dict[str, Any] = {"overwrite": overwrite, "rank": rank, "world_size": world_size, "workers": workers}
    run_options |= {"repair": repair, "ray_address": ray_address, "ray_start_timeout": ray_start_timeout}
    with folder_lock(out, what="tokembed prepare", shared=world_size > 1):  # the ranks of a run share a folder
        result = _prepare_locked(out, files, identity, config, dtype, engine, progress, **run_options)
    result.skipped_inputs = skipped
    result.seconds = time.perf_counter() - t0
    return result


def _prepare_to_url(inputs, url: str, *, rank: int, world_size: int, overwrite: bool, **kw: Any) -> PrepareResult:
    """`prepare_corpus` with ``out`` a URL: prepare into a staging folder under the cache (a rerun resumes it),
    upload it (`tokembed.shards.publish.upload_folder`: verified, manifest last, verified objects kept), then
    remove the staging folder."""
    if world_size > 1:
        raise ValueError(
            f"--out {public_url(url)} with --world-size {world_size}: prepare the ranks into a shared local folder, "
            "merge it, then upload it with one `tokembed prepare` (or give each rank its own URL)"
        )
    staging = staging_folder(url)
    result = prepare_corpus(inputs, staging, rank=rank, world_size=world_size, overwrite=overwrite, **kw)
    upload_folder(staging, url, overwrite=overwrite)
    shutil.rmtree(staging, ignore_errors=True)
    result.out = url  # type: ignore[assignment]  # the folder is the remote one now
    return result


def _prepare_locked(out, files, identity, config, dtype, engine, progress, **opts) -> PrepareResult:
    """The run, with the folder locked: check the folder, tokenize what is not done, write the manifest."""
    rank, world_size = opts["rank"], opts["world_size"]
    if prepare_folder(out, identity, files, overwrite=opts["overwrite"], rank=rank, world_size=world_size):
        manifest = load_record(out / MANIFEST) if world_size == 1 else None
        damaged = damaged_units(out, manifest, full=opts["repair"]) if manifest else {}
        if not damaged:
            return _already_done(out, rank, world_size)
        return _repair(
            out, files, manifest, config, dtype, make_engine(engine, **_engine_options(config, opts)), damaged
        )
    remove_leftovers(out, rank, world_size)
    atomic_write_json(out / PARTS / "plan.json", identity)
    eng = make_engine(engine, **_engine_options(config, opts))
    run = _Run(out, config, dtype, eng, Progress.start(files, progress), rank=rank, world_size=world_size)
    run.tokenize(files, carry=engine == "ray")  # Ray workers may not see the files: the driver ships the bytes
    result = run.result
    result.inputs = identity["inputs"]
    remove_units_past(out, result.units, rank, world_size)
    if world_size == 1:
        mtimes = [f.mtime_ns for f in files]
        result.manifest = _write_manifest(out, identity, run.records, result.units, mtimes, run.counts)
        _warn_empty_splits(out, result.manifest, config)
    else:
        partial = {**identity, "rank": rank, "world_size": world_size, "units": result.units}
        partial["input_mtimes"] = [f.mtime_ns for f in files]
        partial["records"] = sorted(run.records, key=lambda r: r["unit"])
        atomic_write_json(out / rank_manifest_name(rank, world_size), partial)
    return result


def _engine_options(config: PrepareConfig, opts: dict[str, Any]) -> dict[str, Any]:
    ray = {"ray_address": opts["ray_address"], "ray_start_timeout": opts["ray_start_timeout"]}
    return {"workers": opts["workers"] or available_cpus(), "config": config, **ray}


def _repair(out, files, manifest, config, dtype, engine, damaged: dict[int, str]) -> PrepareResult:
    """Make the ``damaged`` units of a finished folder again, and check that they come out as the manifest records
    (the inputs are the same, by path, size and time): the folder ends byte-identical, manifest untouched."""
    remove_leftovers(out)
    run = _Run(out, config, dtype, engine, Progress.start(files, False), rank=0, world_size=1, only=set(damaged))
    run.tokenize(files, carry=False)
    expected = {e["tokens"]: e for s in manifest["splits"].values() for e in s["shards"]}
    for record in run.records:
        made = {e["tokens"]: e for e in record["splits"].values()}
        was = {t: e for t, e in expected.items() if unit_number(Path(t).name) == record["unit"]}
        if made != was:
            raise ValueError(
                f"unit {record['unit']} of {out} came out other than its manifest records: an input changed without "
                "changing its size or time; prepare the folder again with --overwrite"
            )
    shutil.rmtree(out / PARTS, ignore_errors=True)
    result = run.result
    result.manifest, result.inputs, result.repaired = manifest, manifest["inputs"], sorted(damaged)
    return result


def _same_tokenizer(path: Path, part: dict[str, Any], first_path: Path, first: dict[str, Any]) -> None:
    from tokembed.tokenizer import identity_from_manifest

    a, b = identity_from_manifest(part.get("tokenizer")), identity_from_manifest(first.get("tokenizer"))
    if not a.same_ids(b):
        raise ValueError(
            f"{path.name} was tokenized with {a.describe()}, but {first_path.name} with {b.describe()}; "
            "prepare every rank with the same --tokenizer, then merge again"
        )


def empty_split_warning(out: Path, manifest: dict[str, Any], val_fraction: float) -> str | None:
    """What to say when a split that was asked for got no document (None when every one got some)."""
    docs = {name: s["documents"] for name, s in manifest["splits"].items()}
    total = sum(docs.values())
    empty = [name for name in ("train", "val") if docs.get(name, 0) == 0 and (name == "train" or val_fraction > 0)]
    if not empty:
        return None
    why = (
        f"the split is chosen per document (by a hash of its text), and the inputs hold {total:,} document(s): a text "
        "file is one document, a JSON Lines file one per line, a Parquet file one per row"
    )
    return (
        f"split {empty[0]!r} of {out} is empty (0 of {total:,} documents with --val-fraction {val_fraction:g}): {why}; "
        "give the text as more documents (a folder of files, or JSON Lines) or change --val-fraction, then prepare "
        "again with --overwrite. Training has no validation loss without a val split, and nanoGPT cannot read an "
        "empty one"
    )


def _warn_empty_splits(out: Path, manifest: dict[str, Any], config: PrepareConfig) -> None:
    message = empty_split_warning(out, manifest, config.val_fraction)
    if message is not None:
        import warnings

        warnings.warn(message, stacklevel=4)


def _resolve_config(config: PrepareConfig | None, options: dict[str, Any]) -> PrepareConfig:
    if config is None:
        return PrepareConfig(**options)
    if options:
        raise TypeError(f"pass either config or options, not both (got {', '.join(options)})")
    return config


def _check_run_options(*, engine: str, workers: int, rank: int, world_size: int) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "local":
        check_workers(workers)  # no more than this machine can run (Ray's workers are the cluster's)
    check_int("workers", workers, min=0, noun="an integer", hint="0 = one per available CPU")
    check_int("world_size", world_size, min=1, noun="an integer")
    if not 0 <= check_int("rank", rank) < world_size:
        raise ValueError(f"rank must be in [0, {world_size}) for world_size {world_size}, got {rank!r}")


def _already_done(out: Path, rank: int, world_size: int) -> PrepareResult:
    remove_leftovers(out, rank, world_size)
    manifest = None
    if (out / MANIFEST).is_file():
        shutil.rmtree(out / PARTS, ignore_errors=True)  # left by a run killed after its manifest
        manifest = json.loads((out / MANIFEST).read_text())
    n = manifest["units"] if manifest else 0
    return PrepareResult(out, manifest, n, units_skipped=n, already_done=True)


def _write_manifest(
    out: Path, identity: dict[str, Any], records: list[dict[str, Any]], n_units: int, mtimes, counts: SplitCounts
) -> dict[str, Any]:
    manifest = assemble_manifest(identity, records, n_units, mtimes)
    manifest["token_counts"] = split_token_counts(out, manifest, counts)
    manifest, text = sealed_text(manifest)
    atomic_write(out / MANIFEST, text.encode())
    shutil.rmtree(out / PARTS, ignore_errors=True)
    for p in out.glob("manifest.rank-*.json"):
        p.unlink(missing_ok=True)
    return manifest


class _Run:
    """One call's tokenizing: units in plan order, their parts in flight on an engine, finished units on disk.

    Attributes:
        records: the finished units' records (done now or found done), in completion order.
        result: the counts so far.
    """

    def __init__(
        self,
        out: Path,
        config: PrepareConfig,
        dtype: np.dtype,
        engine,
        progress: Progress,
        *,
        rank: int,
        world_size: int,
        only: set[int] | None = None,
    ):
        self.out, self.config, self.dtype, self.engine, self.progress = out, config, dtype, engine, progress
        self.rank, self.world_size, self.only = rank, world_size, only
        self.records: list[dict[str, Any]] = []
        self.counts = SplitCounts()  # the token ids of the units tokenized by this run
        self.result = PrepareResult(out, None, 0)
        self.pending: list[tuple[Any, int]] = []  # (future, unit id) of the parts in flight
        self.waiting: dict[int, list] = {}  # unit id -> its parts' results in order (None until done)
        self.disk_bytes: dict[int, int] = {}  # unit id -> input bytes read from disk for it

    def tokenize(self, files: Sequence[InputFile], *, carry: bool) -> None:
        """Tokenize every unit of the plan this rank owns and has not finished; write each when complete."""
        names = [f.path for f in files]
        cancel = True
        try:
            # In this process, the planner's spans keep what it read anyway (Parquet row groups it decoded to size
            # them); each unit is written, and its spans' bytes let go, before the next unit is planned.
            keep = self.engine.in_process
            for unit in iter_units(files, self.config, carry=carry, keep=keep):
                self.result.units += 1
                self.result.input_bytes += sum(len(sp) for sp in unit.spans)
                self._submit_unit(unit, {sp.file: names[sp.file] for sp in unit.spans})
                while keep and self.pending:
                    self._finish_one()
                if keep:
                    for sp in unit.spans:
                        sp.data = None  # (the planner's generators still hold the last span; parts may be copies)
            while self.pending:
                self._finish_one()
            cancel = False
        finally:
            self.engine.close(cancel=cancel)
            self.progress.close()

    def _submit_unit(self, unit: Unit, names: dict[int, str]) -> None:
        if unit.id % self.world_size != self.rank or (self.only is not None and unit.id not in self.only):
            self._skip(unit)  # another rank's, or (repairing) a healthy unit
            return
        parts = unit_parts(unit, self.config, names)
        record = load_record(self.out / PARTS / f"{unit.id:05d}.json")
        if record is not None and record_ok(self.out, record, unit_input_hash(parts, names)):
            self.records.append(record)  # finished by an earlier run
            self._skip(unit)
            return
        self.waiting[unit.id], self.disk_bytes[unit.id] = [None] * len(parts), unit.disk_bytes
        for part in parts:
            while len(self.pending) >= self.engine.capacity:
                self._finish_one()
            self.pending.append((self.engine.submit(part, self.config, names), unit.id))
            if self.engine.in_process:  # tokenized already: its bytes are not needed again
                for sp in part.spans:
                    sp.data = None

    def _skip(self, unit: Unit) -> None:
        self.result.units_skipped += 1
        self.progress.skipped(unit.disk_bytes)

    def _finish_one(self) -> None:
        fut, uid = self.engine.wait_one(self.pending)
        self.pending.remove((fut, uid))
        res = fut.result()
        parts = self.waiting[uid]
        parts[res["part"]] = res
        if any(r is None for r in parts):
            return
        del self.waiting[uid]
        joined = join_parts(parts)
        parts.clear()
        record = write_unit(self.out, joined, self.dtype)
        self.records.append(record)
        for split, made in joined["splits"].items():
            for ids, n in made["counts"]:
                self.counts.add(split, ids, n)
            self.counts.files.add(record["splits"][split]["tokens"])
        n_tok = sum(len(r["tokens"]) for r in joined["splits"].values())
        n_docs = sum(st["documents"] for st in joined["stats"].values())
        joined.clear()
        trim_heap(self.disk_bytes[uid])
        self.result.units_done += 1
        self.result.tokens_done += n_tok
        self.progress.finished(self.disk_bytes.pop(uid), documents=n_docs, tokens=n_tok)


def merge_manifests(root: str | os.PathLike) -> dict[str, Any]:
    """Finish a folder written by several ranks: check every rank's manifest and write ``manifest.json``.

    The ranks' shard files must all be in ``root`` (a shared folder, or copied together with e.g. rsync).
    The result is byte-identical to a single-machine run.

    Raises:
        FileNotFoundError: no rank manifests in ``root``.
        ValueError: ranks of different runs, a missing rank, or missing/damaged shard files.
    """
    root = local_path(root, what="the shard folder")
    if (root / MANIFEST).is_file() and not any(root.glob("manifest.rank-*.json")):
        return json.loads((root / MANIFEST).read_text())
    paths = sorted(root.glob("manifest.rank-*-of-*.json"))
    if not paths:
        raise FileNotFoundError(
            f"{root} holds no rank manifests (manifest.rank-R-of-N.json); run `tokembed prepare ... --rank R --world-size N --out {root}` on each machine first"
        )
    partials = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    first = partials[0]
    keys = ("format", "version", "tokenizer", "dtype", "config", "inputs", "world_size", "units")
    for p, part in zip(paths, partials):
        _same_tokenizer(p, part, paths[0], first)
        diffs = [k for k in keys if part.get(k) != first.get(k)]
        if diffs:
            raise ValueError(
                f"{p.name} comes from a different run than {paths[0].name} (differs in {', '.join(diffs)}); remove the stale rank manifest and rerun that rank"
            )
    n = first["world_size"]
    missing = sorted(set(range(n)) - {part["rank"] for part in partials})
    if missing:
        raise ValueError(
            f"ranks {missing} of {n} have not finished (no manifest.rank-R-of-{n:05d}.json); run them, then merge again"
        )
    records = [r for part in partials for r in part["records"]]
    for r in records:
        for info in r["splits"].values():
            s = ShardInfo.from_dict(info)
            p = root / s.tokens
            if not p.is_file() or p.stat().st_size != s.bytes or not (root / s.index).is_file():
                raise ValueError(
                    f"shard {s.tokens} of unit {r['unit']} is missing or incomplete in {root}; copy every rank's folder into it, then merge again"
                )
    identity = {k: first[k] for k in ("format", "version", "tokenizer", "dtype", "config", "inputs")}
    manifest = assemble_manifest(identity, records, first["units"], first.get("input_mtimes"))
    manifest["token_counts"] = split_token_counts(root, manifest)
    manifest, text = sealed_text(manifest)
    with folder_lock(root, what="tokembed merge"):  # no rank still writing, no other merge
        atomic_write(root / MANIFEST, text.encode())
        for p in paths:
            p.unlink(missing_ok=True)
        shutil.rmtree(root / PARTS, ignore_errors=True)
    return manifest
