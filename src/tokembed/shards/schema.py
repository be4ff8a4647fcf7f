"""The manifest's schema and seal: every key, type and range a shard folder's ``manifest.json`` may hold.

`manifest_problems` lists what is wrong with a parsed manifest (one line each, naming the key); the
checks of the files against it are `tokembed.shards.check.check_shards`'s. `seal` adds ``manifest_sha256``,
the sha256 of the manifest's canonical JSON (keys sorted, no whitespace, the seal itself left out):
any change to the content breaks it, while a change of layout alone (indentation, key order) is
harmless and leaves it valid. Manifests written before the seal existed have none; their content is
validated all the same, and ``tokembed check`` says that edits to them cannot be detected.

Each entry is checked by a small function; the tokenizer entry's fields are listed in `TOKENIZER_FIELDS`
(add a field there when the tokenizer entry grows).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any, TypeGuard

__all__ = ["MANIFEST_HASH", "TOKENIZER_FIELDS", "manifest_digest", "manifest_problems", "seal", "sealed_text"]

MANIFEST_HASH = "manifest_sha256"
DTYPE_BYTES = {"uint16": 2, "uint32": 4}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHARD = re.compile(r"(?P<split>[^/]+)/(?P<n>\d{5})\.(?P<ext>bin|idx)")


def _is_int(v: Any, lo: int = 0) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= lo


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and bool(v)


def _is_format_name(v: Any) -> bool:
    return isinstance(v, str) and _FORMAT_NAME.fullmatch(v) is not None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# The tokenizer entry: field -> (check, what it must be, required). Add fields here when the entry grows;
# a field newer manifests write and older ones lack is not required.
TOKENIZER_FIELDS: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    "name": (_is_str, "a non-empty string", True),
    "n_vocab": (lambda v: _is_int(v, 1), "an integer >= 1", True),
    "eot_token": (_is_int, "an integer >= 0", True),
    "hash": (lambda v: isinstance(v, str), "a string", True),
    "source": (_is_str, "a non-empty string", False),
    "files": (lambda v: _is_str_map(v), "an object of strings", False),
    "options": (lambda v: _is_str_map(v), "an object of strings", False),
}

# PrepareConfig's fields, as recorded by prepare (an empty config: a folder written by other tools).
CONFIG_FIELDS: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    "tokenizer": (_is_str, "a non-empty string", True),
    "field": (_is_str, "a non-empty string", True),
    "format": (lambda v: _is_format_name(v), "'auto' or an input format's name", True),
    "val_fraction": (lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)", True),
    "shard_mb": (lambda v: _is_number(v) and v > 0, "a number > 0", True),
    "strict": (lambda v: isinstance(v, bool), "true or false", True),
    "skip_bad_lines": (lambda v: isinstance(v, bool), "true or false", True),
    "pattern": (lambda v: v is None or isinstance(v, str), "a string or null", False),
    "eot": (lambda v: v is None or isinstance(v, str), "a string or null", False),
    "backend": (_is_str, "a non-empty string", False),
}

# An input format's name (tokembed.shards.formats.registry's rule): any, not only those registered here, so a
# folder made with a plugin's format checks without the plugin.
_FORMAT_NAME = re.compile(r"[a-z][a-z0-9_-]*")
SHARD_FIELDS = ("tokens", "index", "n_tokens", "n_documents", "bytes", "sha256", "index_sha256")
INPUT_COUNTS = ("documents", "tokens", "chars", "text_bytes", "empty", "replaced", "bad_lines")


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON, without its seal."""
    return hashlib.sha256(_canonical(manifest).encode()).hexdigest()


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its ``manifest_sha256``."""
    return {**manifest, MANIFEST_HASH: manifest_digest(manifest)}


def sealed_text(manifest: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """`seal` (manifest) and the text of its file (`tokembed._atomic.dumps_indented` and a newline), byte for byte,
    with the token counts (an entry per id that occurs: 27k for gpt2, 60k+ for o200k_base on 20 MB) written once
    instead of twice and by orjson where installed: 11 -> 4 ms (gpt2) and 26 -> 7.5 ms (o200k_base) of a run's serial
    tail. Each split's counts become compact JSON once (keys sorted as json sorts them); the canonical JSON of the
    seal splices that in, and the indented file its indented form, made by inserting the indentation after each
    comma and a space after each colon: exact because the keys are decimal ids and the values integers (checked;
    any other manifest is written the plain way)."""
    from tokembed._atomic import dumps_indented

    counts = manifest.get("token_counts")
    flat = _flat_counts(counts) if isinstance(counts, dict) and MANIFEST_HASH not in manifest else None
    if flat is None:
        sealed = seal(manifest)
        return sealed, dumps_indented(sealed) + "\n"
    mark = f"tokembed-token-counts-{hashlib.sha256(''.join(flat.values()).encode()).hexdigest()}-"  # nowhere else
    holders = {split: mark + split for split in flat}
    canonical = _canonical({**manifest, "token_counts": holders})
    for split, text in flat.items():
        canonical = canonical.replace(json.dumps(holders[split], ensure_ascii=False), text, 1)
    sealed = {**manifest, MANIFEST_HASH: hashlib.sha256(canonical.encode()).hexdigest()}
    indented = dumps_indented({**sealed, "token_counts": holders})
    pad, end = "\n   ", "\n  "  # the counts of a split are at depth 2 (manifest -> token_counts -> split)
    for split, text in flat.items():
        body = text if text == "{}" else "{" + pad + text[1:-1].replace(",", "," + pad).replace(":", ": ") + end + "}"
        indented = indented.replace(json.dumps(holders[split], ensure_ascii=False), body, 1)
    return sealed, indented + "\n"


def _flat_counts(counts: dict[Any, Any]) -> dict[str, str] | None:
    """Each split's token counts as compact JSON, keys sorted (what ``json.dumps(..., sort_keys=True,
    separators=(",", ":"))`` writes), or None unless every split maps decimal-id strings to integers."""
    out = {}
    for split, ids in counts.items():
        if not isinstance(split, str) or not isinstance(ids, dict):
            return None
        if ids and not ("".join(ids).isdecimal() and set(map(type, ids.values())) == {int}):
            return None
        out[split] = _sorted_compact(ids)
    return out


def _sorted_compact(ids: dict[str, int]) -> str:
    """``json.dumps(ids, sort_keys=True, separators=(",", ":"))``: by orjson where installed (its output is the same
    for string keys and integers of up to 64 bits), 10-20x faster."""
    try:
        from orjson import OPT_SORT_KEYS, dumps
    except ImportError:
        pass
    else:
        try:
            return dumps(ids, option=OPT_SORT_KEYS).decode()
        except TypeError:  # an integer beyond 64 bits: json writes it
            pass
    return json.dumps(ids, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(manifest: dict[str, Any]) -> str:
    """The manifest's canonical JSON (keys sorted, no whitespace), without its seal."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_HASH}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _is_str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def _fields(where: str, entry: Any, fields: dict[str, tuple[Callable[[Any], bool], str, bool]]) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where} is not an object"]
    problems = [f"{where} lacks {k!r}" for k, (_, _, required) in fields.items() if required and k not in entry]
    problems += [
        f"{where}: {k!r} must be {what}, got {entry[k]!r}"
        for k, (ok, what, _) in fields.items()
        if k in entry and not ok(entry[k])
    ]
    problems += [f"{where}: unknown key {k!r}" for k in entry if k not in fields]
    return problems


def _tokenizer_problems(tok: Any, dtype: Any) -> list[str]:
    problems = _fields("manifest 'tokenizer'", tok, TOKENIZER_FIELDS)
    if problems:
        return problems
    if tok["eot_token"] >= tok["n_vocab"]:
        problems.append(
            f"manifest 'tokenizer': eot_token {tok['eot_token']} is outside the vocabulary (n_vocab {tok['n_vocab']})"
        )
    return problems


def _shard_problems(split: str, shards: Any) -> list[str]:
    """Shard entries: complete, typed, named ``SPLIT/NNNNN.bin|idx`` in increasing order of NNNNN."""
    if not isinstance(shards, list):
        return [f"split {split!r}: 'shards' is not a list"]
    problems, last = [], -1
    for i, d in enumerate(shards):
        where = f"split {split!r}, shard entry {i}"
        if not isinstance(d, dict) or any(k not in d for k in SHARD_FIELDS):
            problems.append(
                f"{where} lacks {', '.join(k for k in SHARD_FIELDS if not isinstance(d, dict) or k not in d)}"
            )
            continue
        t, x = _SHARD.fullmatch(str(d["tokens"])), _SHARD.fullmatch(str(d["index"]))
        if not (
            t
            and x
            and t["split"] == split == x["split"]
            and t["ext"] == "bin"
            and x["ext"] == "idx"
            and t["n"] == x["n"]
        ):
            problems.append(
                f"{where}: files {d['tokens']!r} and {d['index']!r} are not {split}/NNNNN.bin and {split}/NNNNN.idx"
            )
        elif int(t["n"]) <= last:
            problems.append(
                f"{where}: {d['tokens']} comes after shard {last:05d}; shards must be listed in increasing order"
            )
        else:
            last = int(t["n"])
        for k in ("n_tokens", "n_documents", "bytes"):
            if not _is_int(d[k]):
                problems.append(f"{where}: {k!r} must be an integer >= 0, got {d[k]!r}")
        for k in ("sha256", "index_sha256"):
            if not (isinstance(d[k], str) and _SHA256.fullmatch(d[k])):
                problems.append(f"{where}: {k!r} must be 64 lowercase hex digits, got {d[k]!r}")
        if "blocks" in d:
            problems += _blocks_problems(where, d)
    return problems


def _blocks_problems(where: str, d: dict[str, Any]) -> list[str]:
    """A shard entry's ``blocks``: the block size and one sha256 per block of each file (at least one)."""
    blocks = d["blocks"]
    if not isinstance(blocks, dict) or set(blocks) != {"bytes", "tokens", "index"} or not _is_int(blocks["bytes"], 1):
        return [f"{where}: 'blocks' must be {{'bytes': an integer >= 1, 'tokens': [...], 'index': [...]}}"]
    problems = []
    index_bytes = d["n_documents"] * 8 if _is_int(d["n_documents"]) else None
    for k, size in (("tokens", d["bytes"]), ("index", index_bytes)):
        hashes = blocks[k]
        if not isinstance(hashes, list) or not all(isinstance(h, str) and _SHA256.fullmatch(h) for h in hashes):
            problems.append(f"{where}: blocks[{k!r}] must be a list of sha256 digests (64 lowercase hex digits)")
        elif _is_int(size) and len(hashes) != max(1, -(-size // blocks["bytes"])):
            problems.append(
                f"{where}: blocks[{k!r}] lists {len(hashes)} blocks, but {size} bytes make "
                f"{max(1, -(-size // blocks['bytes']))} blocks of {blocks['bytes']}"
            )
    return problems


def _splits_problems(splits: Any) -> list[str]:
    if not isinstance(splits, dict) or not splits:
        return ["manifest 'splits' must be an object with at least one split"]
    problems = []
    for split, entry in splits.items():
        if not isinstance(entry, dict) or any(k not in entry for k in ("tokens", "documents", "shards")):
            problems.append(f"split {split!r} must have 'tokens', 'documents' and 'shards'")
            continue
        problems += [
            f"split {split!r}: {k!r} must be an integer >= 0, got {entry[k]!r}"
            for k in ("tokens", "documents")
            if not _is_int(entry[k])
        ]
        problems += _shard_problems(split, entry["shards"])
    return problems


def _units_problems(manifest: dict[str, Any]) -> list[str]:
    units = manifest["units"]
    if not _is_int(units):
        return [f"manifest: 'units' must be an integer >= 0, got {units!r}"]
    names = [
        d.get("tokens")
        for e in manifest["splits"].values()
        if isinstance(e, dict)
        for d in e.get("shards", [])
        if isinstance(d, dict)
    ]
    beyond = [n for n in names if (m := _SHARD.fullmatch(str(n))) and int(m["n"]) >= units]
    return [f"manifest: shard {beyond[0]} is numbered beyond the {units} units of the run"] if beyond else []


def _inputs_problems(inputs: Any) -> list[str]:
    if not isinstance(inputs, list):
        return ["manifest 'inputs' is not a list"]
    problems = []
    for i, f in enumerate(inputs):
        where = f"manifest input {i}"
        if not isinstance(f, dict) or not _is_str(f.get("path")):
            problems.append(f"{where} has no 'path'")
            continue
        if not _is_format_name(f.get("format")) or not isinstance(f.get("compressed"), (bool, str)):
            problems.append(
                f"{where} ({f['path']}): 'format' must be an input format's name (text, jsonl, parquet, ...) and "
                "'compressed' a bool or a codec name"
            )
        if "bytes" in f and f["bytes"] is not None and not _is_int(f["bytes"]):
            problems.append(f"{where} ({f['path']}): 'bytes' must be an integer >= 0 or null, got {f['bytes']!r}")
        problems += [
            f"{where} ({f['path']}): {k!r} must be an integer >= 0, got {f[k]!r}"
            for k in INPUT_COUNTS
            if k in f and not _is_int(f[k])
        ]
    return problems


def manifest_problems(manifest: Any) -> list[str]:
    """What is wrong with a parsed manifest's structure: missing keys, wrong types, values out of range,
    shard entries misnamed or out of order. Empty when it is well formed (its seal is checked apart)."""
    if not isinstance(manifest, dict):
        return ["manifest is not a JSON object"]
    required = ("format", "version", "tokenizer", "dtype", "splits")
    problems = [f"manifest lacks {k!r}" for k in required if k not in manifest]
    if problems:
        return problems
    dtype = manifest["dtype"]
    if dtype not in DTYPE_BYTES:
        problems.append(f"manifest: dtype must be 'uint16' or 'uint32', got {dtype!r}")
    problems += _tokenizer_problems(manifest["tokenizer"], dtype)
    problems += _splits_problems(manifest["splits"])
    if "inputs" in manifest:
        problems += _inputs_problems(manifest["inputs"])
    if manifest.get("config"):
        problems += _fields("manifest 'config'", manifest["config"], CONFIG_FIELDS)
    if "units" in manifest:
        problems += _units_problems(manifest)
    mtimes = manifest.get("input_mtimes")
    if mtimes is not None and not (
        isinstance(mtimes, list)
        and len(mtimes) == len(manifest.get("inputs", []))
        and all(m is None or _is_int(m) for m in mtimes)
    ):
        problems.append("manifest: 'input_mtimes' must list one time (an integer, or null) per input")
    if "token_counts" in manifest:
        problems += _token_counts_problems(manifest)
    known = {*required, "inputs", "config", "units", "input_mtimes", "token_counts", MANIFEST_HASH}
    problems += [f"manifest: unknown key {k!r}" for k in manifest if k not in known]  # (a renamed seal too)
    if MANIFEST_HASH in manifest and not (
        isinstance(manifest[MANIFEST_HASH], str) and _SHA256.fullmatch(manifest[MANIFEST_HASH])
    ):
        problems.append(f"manifest: {MANIFEST_HASH!r} must be 64 lowercase hex digits")
    return problems


def _token_counts_problems(manifest: dict[str, Any]) -> list[str]:
    """``token_counts``: per split, token id (a decimal string) -> how many times it occurs (an int >= 0)."""
    counts = manifest["token_counts"]
    if not isinstance(counts, dict):
        return ["manifest: 'token_counts' must be an object of splits"]
    n_vocab = manifest["tokenizer"].get("n_vocab") if isinstance(manifest.get("tokenizer"), dict) else None
    problems = []
    for split, per_id in counts.items():
        if split not in manifest.get("splits", {}) or not isinstance(per_id, dict):
            problems.append(f"manifest: 'token_counts' has {split!r}, which is not a split with counts")
            continue
        for key, n in per_id.items():
            ok_id = isinstance(key, str) and key.isdigit() and (not _is_int(n_vocab) or int(key) < n_vocab)
            if not ok_id or not _is_int(n) or n < 0:
                problems.append(
                    f"manifest: token_counts[{split!r}] has {key!r}: {n!r}; expected an id below n_vocab and a count >= 0"
                )
                break
    return problems
