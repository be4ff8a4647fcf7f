"""The table of input formats and codecs: name -> object, suffix -> object.

Built-in formats and codecs are registered when `tokembed.shards.formats` is imported. A script registers its
own with `register_format` / `register_codec` (also class decorators). For a process you do not write, such as
the ``tokembed`` command, a module that registers formats when imported is a tokembed plugin
(`tokembed._plugins`: ``TOKEMBED_PLUGINS=module`` or an entry point of the group ``tokembed.plugins``, the same
mechanism as positional schemes); plugins are loaded the first time a name or suffix is looked up that the
table lacks, or the whole list is asked for (``--format`` and its help, ``prepare`` finding inputs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TypeVar

from tokembed._plugins import ENTRY_POINT_GROUP, PLUGINS_ENV, load_plugins
from tokembed.shards.formats.base import STDIN, Codec, InputFile, InputFormat

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGINS_ENV",
    "check_inputs",
    "codec_for",
    "codecs",
    "format_for",
    "format_names",
    "formats",
    "formats_table",
    "get_format",
    "register_codec",
    "register_format",
    "unregister_format",
]

_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_FORMATS: dict[str, InputFormat] = {}
_CODECS: dict[str, Codec] = {}

F = TypeVar("F", bound="type[InputFormat] | InputFormat")
C = TypeVar("C", bound="type[Codec] | Codec")


def _class_name(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _suffix_owner(suffix: str) -> str | None:
    for f in _FORMATS.values():
        if suffix in f.suffixes:
            return f"format {f.name!r}"
    return next((f"codec {c.name!r}" for c in _CODECS.values() if c.suffix == suffix), None)


def _check_suffixes(kind: str, name: str, suffixes: tuple[str, ...], replacing: object) -> None:
    for s in suffixes:
        if not (s.startswith(".") and len(s) > 1 and s == s.lower()):
            raise ValueError(f"{kind} {name!r}: suffix {s!r} must be lower case and start with a dot, e.g. '.csv'")
        owner = _suffix_owner(s)
        if owner is not None and owner != replacing:
            raise ValueError(f"{kind} {name!r}: suffix {s!r} already belongs to {owner}; choose another suffix")


def register_format(fmt: F) -> F:
    """Register an input format (a subclass of `InputFormat`, or an instance of one); returns it, so it works as a
    class decorator. Registering the same class again (a reloaded module) replaces it.

    Raises:
        ValueError: a bad or taken name (``auto`` is reserved), or a suffix another format or codec has.
        TypeError: not an `InputFormat`.
    """
    obj = fmt() if isinstance(fmt, type) else fmt
    if not isinstance(obj, InputFormat):
        raise TypeError(f"register_format takes an InputFormat subclass or instance, got {fmt!r}")
    name = obj.name
    if not (isinstance(name, str) and _NAME.fullmatch(name)) or name == "auto":
        raise ValueError(
            f"input format name {name!r} must be lower-case letters, digits, '-' or '_', starting with a letter, and "
            "not 'auto'; set the class attribute name"
        )
    old = _FORMATS.get(name)
    if old is not None and _class_name(old) != _class_name(obj):
        raise ValueError(f"input format {name!r} is already registered ({old!r}); choose another name")
    _check_suffixes("input format", name, tuple(obj.suffixes), f"format {name!r}")
    _FORMATS[name] = obj
    return fmt


def unregister_format(name: str) -> None:
    """Remove a registered format (a no-op for an unknown name)."""
    _FORMATS.pop(name, None)


def register_codec(codec: C) -> C:
    """Register a codec (a subclass of `Codec` or an instance); returns it, so it works as a class decorator."""
    obj = codec() if isinstance(codec, type) else codec
    if not isinstance(obj, Codec):
        raise TypeError(f"register_codec takes a Codec subclass or instance, got {codec!r}")
    if not (isinstance(obj.name, str) and _NAME.fullmatch(obj.name)):
        raise ValueError(f"codec name {obj.name!r} must be lower-case letters, digits, '-' or '_'")
    _check_suffixes("codec", obj.name, (obj.suffix,), f"codec {obj.name!r}")
    _CODECS[obj.name] = obj
    return codec


def formats(*, plugins: bool = True) -> list[InputFormat]:
    """The registered formats in registration order (built-ins first); with ``plugins`` after loading them."""
    if plugins:
        load_plugins()
    return list(_FORMATS.values())


def format_names(*, plugins: bool = True) -> list[str]:
    """The names ``--format`` takes (besides ``auto``)."""
    return [f.name for f in formats(plugins=plugins)]


def get_format(name: str) -> InputFormat:
    """The format called ``name``.

    Raises:
        ValueError: no such format (the message lists them).
    """
    fmt = _FORMATS.get(name)
    if fmt is None:
        load_plugins()
        fmt = _FORMATS.get(name)
    if fmt is None:
        raise ValueError(
            f"unknown input format {name!r}; the formats are {', '.join(format_names())} (a plugin adds one: "
            f"{PLUGINS_ENV}=module, or an entry point of the group {ENTRY_POINT_GROUP})"
        )
    return fmt


def codecs(*, plugins: bool = True) -> list[Codec]:
    """The registered codecs; with ``plugins`` after loading them."""
    if plugins:
        load_plugins()
    return list(_CODECS.values())


def codec_for(path: str) -> Codec | None:
    """The codec that the last suffix of ``path`` selects (``x.jsonl.gz`` -> gzip), or None."""
    last = os.path.splitext(path.lower())[1]
    if not last:
        return None
    codec = next((c for c in _CODECS.values() if c.suffix == last), None)
    if codec is None:
        load_plugins()  # (once per process)
        codec = next((c for c in _CODECS.values() if c.suffix == last), None)
    return codec


def format_for(path: str) -> InputFormat | None:
    """The format whose suffix ends ``path`` (lower-cased; the longest suffix wins), or None."""
    name = path.lower()
    best = None
    for f in formats():
        for s in f.suffixes:
            if name.endswith(s) and (best is None or len(s) > best[0]):
                best = (len(s), f)
    return best[1] if best else None


def check_inputs(files: Sequence[InputFile], field: str) -> None:
    """Check, before anything is written, that every input can be read as its format: a format that needs ranged
    reads is not standard input, and each format's own `InputFormat.check` (a Parquet footer and its column).

    Raises:
        ValueError: naming the input and what to do.
    """
    for f in files:
        fmt = get_format(f.format)
        if f.path == STDIN and not fmt.streamable:
            why = fmt.needs_ranged_reads or "it is read with ranged reads"
            raise ValueError(f"{fmt.title or fmt.name} cannot be read from standard input ({why}); save it to a file")
        fmt.check(f, field)


def formats_table() -> str:
    """The registered formats and codecs as a Markdown table (docs/corpora.md holds it; a test keeps it current)."""
    rows = ["| `--format` | suffixes | what a document is | standard input, gzip, zstd |", "|---|---|---|---|"]
    for f in formats(plugins=False):
        suffixes = " ".join(f"`{s}`" for s in f.suffixes)
        streams = "yes" if f.streamable else f"no ({f.needs_ranged_reads})"
        rows.append(f"| `{f.name}` | {suffixes} | {f.summary} | {streams} |")
    codecs_listed = ", ".join(f"{c.name} (`{c.suffix}`)" for c in codecs(plugins=False))
    return "\n".join(rows) + f"\n\nCodecs, chosen by the last suffix around any format that says yes: {codecs_listed}."
