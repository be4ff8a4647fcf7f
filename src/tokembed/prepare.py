"""Text corpora on disk -> token shards on disk: parallel, streaming, crash-safe, resumable.

The plan is fixed before any tokenizing, so the output never depends on the engine or worker count:

1. The inputs are listed in sorted order (`tokembed.sources.resolve_inputs`): one stream of documents
   (a whole text file, or one JSON line).
2. The stream is cut into **work units** of at least ``shard_mb`` MB of input, each ending at the end of a
   JSON line or a text document (`tokembed.sources.plan_units`). A text document larger than a unit is cut
   into pieces at pre-tokenizer-safe points, so it spans several units and shards and is never held
   whole. Unit ``k`` becomes shard ``k`` of each split (``train/0000k.bin`` and ``.idx``; a split that
   gets nothing from a unit gets no file). The planner reads plain files only around the cut points.
3. Each unit is tokenized in parts of about 1 MiB (`tokembed.units`, cut the same safe way) by a pool of
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

import dataclasses
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tokembed.shards import (
    FORMAT,
    INDEX_DTYPE,
    MANIFEST,
    VERSION,
    ShardInfo,
    atomic_write,
    atomic_write_json,
    dtype_for_vocab,
    is_temp_file,
    sha256_file,
)
from tokembed.sources import FORMATS, InputFile, resolve_inputs
from tokembed.units import FILE_STATS, SPLITS, iter_units, join_parts, tokenize_unit, trim_heap, unit_input_hash, unit_parts

__all__ = ["PrepareConfig", "PrepareResult", "merge_manifests", "prepare_corpus"]

PARTS = ".parts"
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class PrepareConfig:
    """Everything that decides the bytes of a shard folder (recorded in its manifest).

    Attributes:
        tokenizer: tokenizer name for `tokembed.get_tokenizer` (offline: ``"gpt2"``).
        field: the JSON Lines field holding the text.
        format: ``"auto"`` (by suffix), ``"text"`` or ``"jsonl"`` for files with another suffix and stdin.
        val_fraction: fraction of documents in the ``val`` split, chosen by a hash of each document's text
            (deterministic; identical documents always land in the same split).
        shard_mb: raw input per work unit (= per shard), in MB. Memory is bounded by about
            ``shard_mb`` times the units in flight; smaller units balance the workers better, larger
            ones make fewer files (raise it to 100-1000 for terabyte corpora).
        strict: fail on invalid UTF-8 (naming file and byte offset) instead of replacing it with U+FFFD.
        skip_bad_lines: skip and count JSON lines that are not valid JSON or lack ``field``, instead of failing.
    """

    tokenizer: str = "gpt2"
    field: str = "text"
    format: str = "auto"
    val_fraction: float = 0.0
    shard_mb: float = 8.0
    strict: bool = False
    skip_bad_lines: bool = False

    def __post_init__(self):
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if isinstance(self.val_fraction, bool) or not (isinstance(self.val_fraction, (int, float)) and 0.0 <= self.val_fraction < 1.0):
            raise ValueError(f"val_fraction must be in [0, 1), got {self.val_fraction!r}; e.g. 0.01 keeps 1% of the documents for validation")
        if isinstance(self.shard_mb, bool) or not isinstance(self.shard_mb, (int, float)) or not (math.isfinite(self.shard_mb) and self.shard_mb > 0):
            raise ValueError(f"shard_mb must be > 0, got {self.shard_mb!r}; 8 to 256 MB of input per shard is typical")
        # Recorded in the manifest: 8 and 8.0 must compare equal there, so store floats.
        object.__setattr__(self, "shard_mb", float(self.shard_mb))
        object.__setattr__(self, "val_fraction", float(self.val_fraction))

    @property
    def unit_bytes(self) -> int:
        return max(1, int(self.shard_mb * 1e6))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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

    def summary(self) -> str:
        if self.already_done:
            return f"{self.out} is already prepared with these inputs and settings: nothing to do"
        lines = []
        if self.manifest is not None:
            for split, s in self.manifest["splits"].items():
                lines.append(f"{split}: {s['documents']:,} documents, {s['tokens']:,} tokens in {len(s['shards'])} shards")
            labels = {"empty": "empty documents skipped", "bad_lines": "bad JSON lines skipped", "replaced": "invalid UTF-8 sequences replaced"}
            for key, label in labels.items():
                per_file = [(f["path"], f[key]) for f in self.manifest["inputs"] if f[key]]
                if per_file:
                    worst = ", ".join(f"{p}: {n:,}" for p, n in sorted(per_file, key=lambda x: -x[1])[:3])
                    lines.append(f"{sum(n for _, n in per_file):,} {label} ({worst}{', ...' if len(per_file) > 3 else ''})")
        rate = self.tokens_done / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"{self.units_done} of {self.units} units tokenized this run ({self.units_skipped} skipped), "
            f"{self.tokens_done:,} tokens in {self.seconds:.1f} s ({rate:,.0f} tokens/s) -> {self.out}"
        )
        return "\n".join(lines)


def _watch_parent(parent: int) -> None:
    # A worker whose parent was killed (kill -9) exits instead of lingering.
    def loop():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=loop, daemon=True).start()


def _worker_init(parent: int, tokenizer: str) -> None:
    _watch_parent(parent)
    from tokembed.tokenizer import get_tokenizer

    get_tokenizer(tokenizer)  # build once per process, before the first unit


# ----------------------------------------------------------------------------------------------- engines


def _start_method() -> str:
    """How worker processes start: ``TOKEMBED_START_METHOD`` or, on Linux, "fork".

    fork starts a worker in milliseconds with the tokenizer already built (copy-on-write); spawn must
    import tokembed (and torch) again in every worker, seconds each, which on a small machine costs more
    than the tokenizing of a 100 MB corpus gains from a second core. The workers only run numpy, hashlib,
    json and tiktoken, never torch, and the progress bar's monitor thread is off, so forking is safe here.
    Elsewhere (macOS, Windows) spawn is the only safe choice.
    """
    method = os.environ.get("TOKEMBED_START_METHOD")
    if method:
        if method not in ("fork", "spawn", "forkserver"):
            raise ValueError(f"TOKEMBED_START_METHOD must be fork, spawn or forkserver, got {method!r}")
        return method
    return "fork" if sys.platform.startswith("linux") else "spawn"


class _LocalEngine:
    def __init__(self, workers: int, config: PrepareConfig):
        self.workers = workers
        self.pool = None
        if workers > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            self.pool = ProcessPoolExecutor(workers, mp_context=mp.get_context(_start_method()), initializer=_worker_init, initargs=(os.getpid(), config.tokenizer))

    @property
    def capacity(self) -> int:
        return 2 * self.workers if self.pool else 1

    def submit(self, unit, config, names):
        if self.pool is None:
            return _Done(tokenize_unit(unit, config, names))
        return self.pool.submit(tokenize_unit, unit, config, names)

    def wait_one(self, pending: list):
        from concurrent.futures import FIRST_COMPLETED, wait

        if self.pool is None:
            return pending[0]
        done, _ = wait([f for f in pending], return_when=FIRST_COMPLETED)
        return next(f for f in pending if f in done)

    def close(self, cancel: bool = False):
        if self.pool is not None:
            self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class _Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _RayEngine:
    def __init__(self, workers: int, address: str | None):
        try:
            import ray
        except ImportError:
            raise ImportError("--engine ray needs Ray: pip install 'tokembed[ray]'") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif workers > 0:
                kwargs["num_cpus"] = workers
            ray.init(**kwargs)
        self.task = ray.remote(num_cpus=1)(tokenize_unit)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))

    @property
    def capacity(self) -> int:
        # The driver reads and ships every unit: more than 64 in flight only costs memory.
        return min(2 * self.workers, 64)

    def submit(self, unit, config, names):
        return _RayFuture(self.ray, self.task.remote(unit, config, names))

    def wait_one(self, pending: list):
        ready, _ = self.ray.wait([f.ref for f in pending], num_returns=1)
        return next(f for f in pending if f.ref == ready[0])

    def close(self, cancel: bool = False):
        if self.started:  # a Ray session we started ends with us; one the caller started is theirs
            self.ray.shutdown()


class _RayFuture:
    def __init__(self, ray, ref):
        self.ray, self.ref = ray, ref

    def result(self):
        try:
            return self.ray.get(self.ref)
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(getattr(e, "cause", None), (ValueError, TypeError, OSError)):
                raise e.cause from None  # bad input: the same message as the local engine
            raise


# ----------------------------------------------------------------------------------------------- folder state


def _tokenizer_entry(name: str) -> tuple[dict[str, Any], np.dtype]:
    from tokembed.tokenizer import get_tokenizer, tokenizer_hash

    enc = get_tokenizer(name)
    dtype = dtype_for_vocab(enc.n_vocab)
    return {"name": enc.name, "n_vocab": enc.n_vocab, "eot_token": enc.eot_token, "hash": tokenizer_hash(enc)}, dtype


def _identity(config: PrepareConfig, files: Sequence[InputFile], tok: dict[str, Any], dtype: np.dtype) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "tokenizer": tok,
        "dtype": dtype.name,
        "config": config.to_dict(),
        "inputs": [f.identity() for f in files],
    }


def _same_identity(existing: dict[str, Any], identity: dict[str, Any]) -> list[str]:
    diffs = []
    for key in ("format", "version", "tokenizer", "dtype", "config"):
        if existing.get(key) != identity[key]:
            diffs.append(key)
    old = [{k: f.get(k) for k in ("path", "format", "compressed", "bytes")} for f in existing.get("inputs", [])]
    if old != identity["inputs"]:
        diffs.append("inputs")
    return diffs


def _rank_manifest_name(rank: int, world_size: int) -> str:
    return f"manifest.rank-{rank:05d}-of-{world_size:05d}.json"


def _ours(name: str) -> bool:
    return name in (MANIFEST, PARTS, *SPLITS) or (name.startswith("manifest.rank-") and name.endswith(".json")) or is_temp_file(name)


def _clear(out: Path) -> None:
    for p in out.iterdir():
        if _ours(p.name):
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def _unit_number(name: str) -> int | None:
    """The unit a shard file or record belongs to (``00012.bin`` -> 12); None for other files."""
    stem = name.split(".")[0]
    return int(stem) if len(stem) == 5 and stem.isdigit() else None


def _remove_leftovers(out: Path, rank: int = 0, world_size: int = 1) -> None:
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
            uid = _unit_number(p.name[1 : p.name.index(".tmp-")])
            if (uid % world_size == rank) if uid is not None else world_size == 1:
                p.unlink(missing_ok=True)


def _prepare_folder(out: Path, identity: dict[str, Any], *, overwrite: bool, rank: int, world_size: int) -> bool:
    """Check ``out`` against this run. Returns True when the work is already complete."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {out} is a file; give a folder path for the shards")
    out.mkdir(parents=True, exist_ok=True)
    entries = sorted(p.name for p in out.iterdir())
    foreign = [n for n in entries if not _ours(n)]
    if foreign:
        raise FileExistsError(
            f"output folder {out} holds files that are not tokembed shards ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); "
            "choose an empty or new folder (--overwrite only replaces shard folders)"
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
        diffs = _same_identity(existing, identity)
        if diffs:
            if overwrite:
                _clear(out)
                return False
            raise FileExistsError(
                f"{out} holds {what} made with different {' and '.join(diffs)}; "
                "use another --out folder, rerun with the original inputs and options, or pass --overwrite to replace it"
            )
    if (out / MANIFEST).is_file():
        if overwrite:
            _clear(out)
            return False
        return True
    if world_size > 1 and (out / _rank_manifest_name(rank, world_size)).is_file() and not overwrite:
        return True
    if entries and not (out / PARTS / "plan.json").is_file() and not any(n.startswith("manifest.rank-") for n in entries):
        # Shard files without any plan: not something we can resume safely.
        if not overwrite and any((out / s).is_dir() and any((out / s).iterdir()) for s in SPLITS):
            raise FileExistsError(f"{out} holds shard files but no manifest or plan; pass --overwrite to replace them")
    if overwrite and not (out / PARTS / "plan.json").is_file():
        _clear(out)
    return False


def _record_ok(out: Path, record: dict[str, Any], input_hash: str, itemsize: int) -> bool:
    if record.get("input_hash") != input_hash:
        return False
    for info in record["splits"].values():
        s = ShardInfo.from_dict(info)
        for rel, size, digest in ((s.tokens, s.bytes, s.sha256), (s.index, s.n_documents * INDEX_DTYPE.itemsize, s.index_sha256)):
            p = out / rel
            if not p.is_file() or p.stat().st_size != size or sha256_file(p) != digest:
                return False
    return True


def _load_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # absent or unreadable: the unit is simply done again


def _write_unit(out: Path, result: dict[str, Any], dtype: np.dtype) -> dict[str, Any]:
    uid = result["unit"]
    record: dict[str, Any] = {"unit": uid, "input_hash": result["input_hash"], "splits": {}, "stats": {str(k): v for k, v in sorted(result["stats"].items())}}
    for split, r in result["splits"].items():
        tokens_rel, index_rel = f"{split}/{uid:05d}.bin", f"{split}/{uid:05d}.idx"
        atomic_write(out / tokens_rel, r["tokens"])
        atomic_write(out / index_rel, r["index"])
        record["splits"][split] = ShardInfo(
            tokens=tokens_rel, index=index_rel, n_tokens=len(r["tokens"]), n_documents=len(r["index"]),
            bytes=len(r["tokens"]) * dtype.itemsize, sha256=r["sha256"], index_sha256=r["index_sha256"],
        ).to_dict()
    _remove_unit_files(out, uid, keep=record["splits"])  # an earlier run on other input may have filled another split
    atomic_write_json(out / PARTS / f"{uid:05d}.json", record)  # last: the unit counts as done from here on
    return record


def _remove_unit_files(out: Path, uid: int, *, keep=(), record: bool = False) -> None:
    """Delete unit ``uid``'s shard files in the splits not in ``keep`` (and its record with ``record``)."""
    for split in SPLITS:
        if split not in keep:
            for suffix in (".bin", ".idx"):
                (out / split / f"{uid:05d}{suffix}").unlink(missing_ok=True)
    if record:
        (out / PARTS / f"{uid:05d}.json").unlink(missing_ok=True)


def _remove_units_past(out: Path, n_units: int, rank: int, world_size: int) -> None:
    """Delete this rank's shard files and records numbered ``n_units`` or more: left by an interrupted run
    on input that has changed since and now makes fewer units."""
    stale = set()
    for folder in (*(out / s for s in SPLITS), out / PARTS):
        if folder.is_dir():
            for p in folder.iterdir():
                uid = _unit_number(p.name)
                if uid is not None and uid >= n_units and uid % world_size == rank:
                    stale.add(uid)
    for uid in stale:
        _remove_unit_files(out, uid, record=True)


def _assemble(identity: dict[str, Any], records: list[dict[str, Any]], n_units: int) -> dict[str, Any]:
    records = sorted(records, key=lambda r: r["unit"])
    if [r["unit"] for r in records] != list(range(n_units)):
        missing = sorted(set(range(n_units)) - {r["unit"] for r in records})
        raise ValueError(f"units {missing[:10]} of {n_units} are not finished; run the missing ranks (or rerun prepare) first")
    splits: dict[str, Any] = {}
    for s in SPLITS:
        shards = [r["splits"][s] for r in records if s in r["splits"]]
        splits[s] = {"tokens": sum(x["n_tokens"] for x in shards), "documents": sum(x["n_documents"] for x in shards), "shards": shards}
    inputs = [{**f, **dict.fromkeys(FILE_STATS, 0)} for f in identity["inputs"]]
    for r in records:
        for i, st in r["stats"].items():
            for k, v in st.items():
                inputs[int(i)][k] += v
    return {**identity, "inputs": inputs, "units": n_units, "splits": splits}


# ----------------------------------------------------------------------------------------------- entry points


def prepare_corpus(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike,
    out: str | os.PathLike,
    *,
    config: PrepareConfig | None = None,
    workers: int = 0,
    engine: str = "local",
    ray_address: str | None = None,
    rank: int = 0,
    world_size: int = 1,
    overwrite: bool = False,
    progress: bool | None = None,
    **options: Any,
) -> PrepareResult:
    """Tokenize a corpus into a verified shard folder (see the module docstring for the plan).

    Args:
        inputs: files, folders, globs, or ``"-"`` (standard input).
        out: the shard folder to create or resume.
        config: the output-deciding options (`PrepareConfig`); or pass them as keywords
            (``val_fraction=0.01, field="content", ...``).
        workers: tokenizing processes; 0 = all cores (``os.cpu_count()``); 1 = in this process.
        engine: ``"local"`` (a process pool) or ``"ray"`` (Ray tasks; same bytes).
        ray_address: Ray cluster address for ``engine="ray"`` (default: the running or a new local Ray).
        rank: this machine's rank in ``[0, world_size)``.
        world_size: number of machines sharing the units; with more than one, each writes
            ``manifest.rank-R-of-N.json`` and `merge_manifests` finishes the folder.
        overwrite: replace a shard folder made from other inputs or options.
        progress: show a progress bar (default: when stderr is a terminal).

    Returns:
        A `PrepareResult` (its ``manifest`` is the finished folder's manifest).

    Raises:
        ValueError: bad options, bad input (invalid JSON, missing field, invalid UTF-8 with ``strict``).
        FileNotFoundError / PermissionError: missing or unreadable inputs.
        FileExistsError: ``out`` is a file, or holds other shards or foreign files.
    """
    t0 = time.perf_counter()
    if config is None:
        config = PrepareConfig(**options)
    elif options:
        raise TypeError(f"pass either config or options, not both (got {', '.join(options)})")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be an integer >= 0 (0 = all cores), got {workers!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}) for world_size {world_size}, got {rank!r}")
    out = Path(out)
    files = resolve_inputs(inputs, format=config.format)
    tok, dtype = _tokenizer_entry(config.tokenizer)
    identity = _identity(config, files, tok, dtype)
    if overwrite and world_size > 1:
        raise ValueError("--overwrite cannot be combined with --world-size > 1 (one rank would delete the others' work); empty the folder once before starting the ranks")
    if _prepare_folder(out, identity, overwrite=overwrite, rank=rank, world_size=world_size):
        _remove_leftovers(out, rank, world_size)
        manifest = None
        if (out / MANIFEST).is_file():
            shutil.rmtree(out / PARTS, ignore_errors=True)  # left by a run killed after its manifest
            manifest = json.loads((out / MANIFEST).read_text())
        n = manifest["units"] if manifest else 0
        return PrepareResult(out, manifest, n, units_skipped=n, already_done=True, seconds=time.perf_counter() - t0)
    _remove_leftovers(out, rank, world_size)
    atomic_write_json(out / PARTS / "plan.json", identity)

    names = [f.path for f in files]
    workers = workers or os.cpu_count() or 1
    eng = _RayEngine(workers if workers else 0, ray_address) if engine == "ray" else _LocalEngine(workers, config)
    bar = _progress_bar(files, progress)
    t_start = time.perf_counter()
    result = PrepareResult(out, None, 0)
    records: list[dict[str, Any]] = []
    pending: list = []  # futures of the parts in flight, each with .unit_id
    waiting: dict[int, list] = {}  # unit id -> its parts' results in order (None until done)
    disk_bytes: dict[int, int] = {}  # unit id -> input bytes read from disk for it
    cancel = True

    def finish_one():
        fut = eng.wait_one(pending)
        pending.remove(fut)
        res = fut.result()
        parts = waiting[fut.unit_id]
        parts[res["part"]] = res
        if any(r is None for r in parts):
            return
        del waiting[fut.unit_id]
        joined = join_parts(parts)
        parts.clear()
        records.append(_write_unit(out, joined, dtype))
        n_tok = sum(len(r["tokens"]) for r in joined["splits"].values())
        n_docs = sum(st["documents"] for st in joined["stats"].values())
        joined.clear()
        trim_heap()
        result.units_done += 1
        result.tokens_done += n_tok
        if bar is not None:
            bar.update(disk_bytes.pop(fut.unit_id))
            bar.docs += n_docs
            bar.tokens += n_tok
            rate = bar.tokens / max(1e-9, time.perf_counter() - t_start)
            bar.set_postfix_str(f"{bar.docs:,} docs, {rate:,.0f} tok/s", refresh=False)

    try:
        n_units = 0
        # Ray workers may not see the input files: the driver reads the spans and ships their bytes.
        for unit in iter_units(files, config, carry=engine == "ray"):
            n_units += 1
            result.input_bytes += sum(len(sp) for sp in unit.spans)
            unit_names = {sp.file: names[sp.file] for sp in unit.spans}  # only this unit's file names
            if unit.id % world_size != rank:
                result.units_skipped += 1
                if bar is not None:
                    bar.update(unit.disk_bytes)
                continue
            parts = unit_parts(unit, config, unit_names)
            record = _load_record(out / PARTS / f"{unit.id:05d}.json")
            if record is not None and _record_ok(out, record, unit_input_hash(parts, unit_names), dtype.itemsize):
                records.append(record)
                result.units_skipped += 1
                if bar is not None:
                    bar.update(unit.disk_bytes)
                continue
            waiting[unit.id], disk_bytes[unit.id] = [None] * len(parts), unit.disk_bytes
            for part in parts:
                while len(pending) >= eng.capacity:
                    finish_one()
                fut = eng.submit(part, config, unit_names)
                fut.unit_id = unit.id
                pending.append(fut)
            del unit, parts
        while pending:
            finish_one()
        cancel = False
    finally:
        eng.close(cancel=cancel)
        if bar is not None:
            bar.close()
    result.units = n_units
    result.inputs = identity["inputs"]
    _remove_units_past(out, n_units, rank, world_size)
    if world_size == 1:
        manifest = _assemble(identity, records, n_units)
        atomic_write_json(out / MANIFEST, manifest)
        shutil.rmtree(out / PARTS, ignore_errors=True)
        for p in out.glob("manifest.rank-*.json"):
            p.unlink(missing_ok=True)
        result.manifest = manifest
    else:
        partial = {**identity, "rank": rank, "world_size": world_size, "units": n_units, "records": sorted(records, key=lambda r: r["unit"])}
        atomic_write_json(out / _rank_manifest_name(rank, world_size), partial)
    result.seconds = time.perf_counter() - t0
    return result


def merge_manifests(root: str | os.PathLike) -> dict[str, Any]:
    """Finish a folder written by several ranks: check every rank's manifest and write ``manifest.json``.

    The ranks' shard files must all be in ``root`` (a shared folder, or copied together with e.g. rsync).
    The result is byte-identical to a single-machine run.

    Raises:
        FileNotFoundError: no rank manifests in ``root``.
        ValueError: ranks of different runs, a missing rank, or missing/damaged shard files.
    """
    root = Path(root)
    if (root / MANIFEST).is_file() and not any(root.glob("manifest.rank-*.json")):
        return json.loads((root / MANIFEST).read_text())
    paths = sorted(root.glob("manifest.rank-*-of-*.json"))
    if not paths:
        raise FileNotFoundError(f"{root} holds no rank manifests (manifest.rank-R-of-N.json); run `tokembed prepare ... --rank R --world-size N --out {root}` on each machine first")
    partials = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    first = partials[0]
    keys = ("format", "version", "tokenizer", "dtype", "config", "inputs", "world_size", "units")
    for p, part in zip(paths, partials):
        diffs = [k for k in keys if part.get(k) != first.get(k)]
        if diffs:
            raise ValueError(f"{p.name} comes from a different run than {paths[0].name} (differs in {', '.join(diffs)}); remove the stale rank manifest and rerun that rank")
    n = first["world_size"]
    missing = sorted(set(range(n)) - {part["rank"] for part in partials})
    if missing:
        raise ValueError(f"ranks {missing} of {n} have not finished (no manifest.rank-R-of-{n:05d}.json); run them, then merge again")
    records = [r for part in partials for r in part["records"]]
    itemsize = np.dtype(first["dtype"]).itemsize
    for r in records:
        for info in r["splits"].values():
            s = ShardInfo.from_dict(info)
            p = root / s.tokens
            if not p.is_file() or p.stat().st_size != s.bytes or not (root / s.index).is_file():
                raise ValueError(f"shard {s.tokens} of unit {r['unit']} is missing or incomplete in {root}; copy every rank's folder into it, then merge again")
    del itemsize
    identity = {k: first[k] for k in ("format", "version", "tokenizer", "dtype", "config", "inputs")}
    manifest = _assemble(identity, records, first["units"])
    atomic_write_json(root / MANIFEST, manifest)
    for p in paths:
        p.unlink(missing_ok=True)
    shutil.rmtree(root / PARTS, ignore_errors=True)
    return manifest


# ----------------------------------------------------------------------------------------------- progress


def _progress_bar(files: Sequence[InputFile], progress: bool | None):
    if progress is None:
        progress = sys.stderr.isatty()
    if not progress:
        return None
    from tqdm import tqdm

    total = None if any(f.size is None for f in files) else sum(f.size for f in files)
    old, tqdm.monitor_interval = tqdm.monitor_interval, 0  # no monitor thread: workers may be forked after the bar starts
    try:
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="prepare", dynamic_ncols=True, file=sys.stderr)
    finally:
        tqdm.monitor_interval = old
    bar.docs, bar.tokens = 0, 0
    return bar
