"""A positional scheme as one object: what it is, its options, and how its module is built (torch-free).

A ``PositionalScheme`` says where the scheme acts (``acts``), whether it can read past the trained
length (``bounded``), whether each attention layer gets its own module (``per_layer``); its options are a
small frozen dataclass (``options``, validated in its ``__post_init__``, every field with a default), and
``build(options, shape) -> module`` makes the module the model is given. ``tokembed.embeddings.names``
holds the table of registered schemes (``register_scheme``); the model, training, inspection and the CLI
ask a scheme what it is and never compare its name:

* ``acts == "input"``: the module maps position ids to vectors added to the token embeddings
  (``position_ids (*) -> (*, dim)``), kept by ``InputEmbedding`` as ``embed.position``.
* ``acts`` in ``("rotate", "score")``: the module is a ``tokembed.embeddings.interface.AttentionPositional``
  given to every attention layer (stored once as ``positional.*``, or per layer as
  ``blocks.{i}.attn.positional.*`` when ``per_layer``). It draws itself for inspection
  (``AttentionPositional.pictures``).
* ``acts == "none"``: nothing is built; order reaches the model through the causal mask alone.

Every module is handed position *ids*, (T,) or (B, T): the model computes them once (restarting at 0 in each
document when documents are kept apart) and no scheme needs to know about documents.

This module imports no torch: ``build`` may be given as ``"package.module:attribute"`` (the syntax of entry
points), imported only when a model is built, so that the CLI can list schemes and their options cheaply.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ACTS", "ModelShape", "NoOptions", "OptionSpec", "PositionalScheme", "option"]

# Where a scheme acts: added to the input, rotating queries and keys, added to attention scores, nowhere.
ACTS = ("input", "rotate", "score", "none")
_NAME = re.compile(r"[a-z][a-z0-9]*\Z")  # becomes part of CLI flags (--<name>-<option>) and 0.1's <name>_<option>


@dataclass(frozen=True)
class ModelShape:
    """The widths a positional module is built for.

    Attributes:
        dim: the model width D (input schemes make (*, D) vectors).
        n_heads: attention heads H (1 where only the input is built).
        context_length: the trained context (a learned table's rows; the length RoPE scalings start from),
            or None where unknown (building a module on its own).
    """

    dim: int
    n_heads: int = 1
    context_length: int | None = None

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass(frozen=True)
class NoOptions:
    """The options of a scheme that takes none."""


def option(default: Any, help: str, *, choices: tuple | None = None, aliases: tuple[str, ...] = ()) -> Any:
    """A field of a scheme's options dataclass, with what ``--help`` says about it.

    Args:
        default: the value when none is given (every option has one).
        help: one line for ``tokembed train --help``.
        choices: the values allowed on the command line (also read from a ``Literal[...]`` annotation).
        aliases: more spellings of its command-line flag (``--t5-buckets`` for T5's ``num_buckets``).
    """
    return field(default=default, metadata={"help": help, "choices": choices, "aliases": tuple(aliases)})


@dataclass(frozen=True)
class OptionSpec:
    """One option of a scheme as the command line offers it: ``--<scheme>-<option>`` (and its aliases)."""

    scheme: str
    name: str
    flags: tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple | None = None


@dataclass(frozen=True)
class PositionalScheme:
    """A positional scheme: what it is, its options and its module builder.

    Attributes:
        name: what users type (``--positional NAME``); lower-case letters and digits.
        acts: ``"input"``, ``"rotate"``, ``"score"`` or ``"none"`` (see the module docstring).
        build: ``build(options, shape) -> module``, or ``"package.module:attribute"`` naming it (imported when
            first used); None only for ``acts == "none"``.
        options: the frozen dataclass of its options (every field with a default, validated in its
            ``__post_init__``; a method ``check_shape(shape)`` may refuse a model shape); ``NoOptions`` for none.
        bounded: it cannot read past ``context_length`` (a table with one row per position).
        per_layer: each attention layer gets its own module (it has per-layer parameters).
        values: it also adds a term to the attention output, given the weights (Shaw's value vectors).
        vectors: how its per-position vectors are had, for inspection: ``"table"`` (stored weights),
            ``"formula"`` (computed by its module), or None (it has none).
        even: the width that must be even: ``"dim"`` (sin/cos pairs), ``"head_dim"`` (rotated pairs), or None.
        scalings: the long-context scalings its modules take at evaluation (``set_scaling``; RoPE's), if any.
        reference: where it comes from (shown by ``tokembed inspect`` and the report).
        summary: one line for ``--help`` and the docs.
    """

    name: str
    acts: str
    build: Callable[[Any, ModelShape], Any] | str | None = None
    options: type = NoOptions
    bounded: bool = False
    per_layer: bool = False
    values: bool = False
    vectors: str | None = None
    even: str | None = None
    scalings: tuple[str, ...] = ()
    reference: str = ""
    summary: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"scheme name {self.name!r} must be lower-case letters and digits, starting with a letter "
                "(it becomes --positional NAME and --NAME-OPTION)"
            )
        _check_choice(f"scheme {self.name!r}: acts", self.acts, ACTS)
        _check_choice(f"scheme {self.name!r}: vectors", self.vectors, ("table", "formula", None))
        _check_choice(f"scheme {self.name!r}: even", self.even, ("dim", "head_dim", None))
        if (self.build is None) != (self.acts == "none"):
            raise ValueError(
                f"scheme {self.name!r} acts {self.acts!r}: give build(options, shape) unless it acts 'none'"
            )
        _check_options_class(self.name, self.options)

    @property
    def in_attention(self) -> bool:
        """Whether its module is given to the attention layers (rotating, or adding to the scores)."""
        return self.acts in ("rotate", "score")

    def make_options(self, value: Any = None) -> Any:
        """Its options from None (the defaults), a mapping of option values, or an instance (validated)."""
        cls = self.options
        if value is None or (type(value) is NoOptions):
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = [f.name for f in dataclasses.fields(cls)]
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise ValueError(
                    f"unknown options {unknown} for the {self.name} scheme; its options are {known or 'none'}"
                )
            return cls(**value)
        raise TypeError(
            f"positional_options of the {self.name} scheme must be None, a dict or {cls.__name__}, "
            f"got {type(value).__name__}; pass positional_options=None for its defaults"
        )

    def check(self, options: Any, shape: ModelShape) -> None:
        """Raise if the scheme cannot be built for ``shape`` (an odd width where pairs are needed, ...)."""
        if self.even == "head_dim" and shape.head_dim % 2:
            raise ValueError(
                f"{self.name} needs an even head width, got dim/n_heads = {shape.dim}/{shape.n_heads} = {shape.head_dim}; change dim or n_heads"
            )
        if self.even == "dim" and shape.dim % 2:
            raise ValueError(f"{self.name} positions need an even dim, got {shape.dim}")
        check_shape = getattr(options, "check_shape", None)
        if callable(check_shape):
            check_shape(shape)

    def module(self, options: Any, shape: ModelShape) -> Any:
        """The module the model is given for ``shape`` (None when the scheme acts nowhere)."""
        if self.build is None:
            return None
        build = resolve(self.build) if isinstance(self.build, str) else self.build
        return build(self.make_options(options), shape)

    def option_specs(self) -> tuple[OptionSpec, ...]:
        """Its options as the command line offers them, in the order of the dataclass's fields."""
        hints = typing.get_type_hints(self.options)
        return tuple(_spec(self.name, f, hints[f.name]) for f in dataclasses.fields(self.options))


def resolve(target: str) -> Any:
    """The object ``"package.module:attribute.attribute"`` names (entry-point syntax), imported now."""
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ImportError(
            f"cannot load {target!r} ({e}); give 'package.module:attribute' of an importable module"
        ) from e
    return obj


def _check_choice(what: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _check_options_class(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"scheme {name!r}: options must be a frozen dataclass class, got {cls!r}")
    missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    if missing:
        raise TypeError(f"scheme {name!r}: every option needs a default, {missing} have none")


def _spec(scheme: str, f: dataclasses.Field, hint: Any) -> OptionSpec:
    """The command-line form of option ``f``: its flag, parser, choices and help."""
    base, choices = _base_type(hint)
    choices = f.metadata.get("choices") or choices
    if base not in (int, float, str, bool):
        raise TypeError(
            f"option {f.name!r} of the {scheme} scheme has type {hint!r}; the command line takes int, float, str, "
            "bool or a Literal of them (with None allowed)"
        )
    flag = f"--{scheme}-{f.name.replace('_', '-')}"
    default = f.default
    help_text = f.metadata.get("help", "")
    help_text = f"{help_text} (default {default})" if help_text else f"default {default}"
    return OptionSpec(
        scheme, f.name, (flag, *f.metadata.get("aliases", ())), _parser(base), default, help_text, choices
    )


def _base_type(hint: Any) -> tuple[Any, tuple | None]:
    """``int | None`` -> (int, None); ``Literal["a", "b"] | None`` -> (str, ("a", "b"))."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _base_type(rest[0]) if len(rest) == 1 else (hint, None)
    if typing.get_origin(hint) is Literal:
        return type(args[0]), tuple(args)
    return hint, None


def _parser(base: type) -> Callable[[str], Any]:
    if base is bool:
        return boolean
    return base


def boolean(text: str) -> bool:
    """A command-line truth value: true/false, yes/no, 1/0."""
    words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
    if text.lower() not in words:
        raise ValueError(f"expected true or false, got {text!r}")
    return words[text.lower()]
