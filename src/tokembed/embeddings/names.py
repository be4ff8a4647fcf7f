"""The table of positional schemes (torch-free): the seven built in, and any registered with ``register_scheme``.

Model, training, inspection and the CLI ask a scheme what it is (``tokembed.embeddings.scheme``), never
compare its name; ``tokembed train --help``, ``--positional``'s choices and the scheme options on the command
line (``--<scheme>-<option>``) are read from this table.

=============  ==========================  =========  ==========================================
name           where it acts               bounded    options (``GPTConfig.positional_options``)
=============  ==========================  =========  ==========================================
learned        added to the input          yes        none (the chapter's table)
sinusoidal     added to the input          no         ``base``
rope           rotates queries and keys    no         ``base``, ``scaling``, ``factor``, ``fraction``
alibi          added to attention scores   no         none (a bias per distance and head)
t5             added to attention scores   no         ``num_buckets``, ``max_distance``
shaw           scores and values           no         ``max_distance`` (per layer)
none           nowhere (NoPE)              no         none: order comes from the causal mask alone
=============  ==========================  =========  ==========================================

Schemes of your own: ``register_scheme(PositionalScheme(...))`` from your code; for the ``tokembed`` command,
name your module in ``TOKEMBED_PLUGINS`` or in an entry point of the group ``tokembed.plugins``
(``tokembed._plugins``); see docs/positions.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from tokembed._checks import check_number, check_positive_int
from tokembed._plugins import load_plugins
from tokembed.embeddings.scheme import ModelShape, NoOptions, PositionalScheme, option

__all__ = [
    "POSITIONAL_NAMES",
    "ROPE_SCALINGS",
    "SCHEMES",
    "NoOptions",
    "PositionalScheme",
    "RopeOptions",
    "ShawOptions",
    "SinusoidalOptions",
    "T5Options",
    "find_scheme",
    "options_from_flat",
    "positional_scheme",
    "register_scheme",
    "rotary_dim",
    "scheme_names",
    "unregister_scheme",
]

# RoPE's long-context scalings (tokembed.embeddings.rotary defines them): position interpolation,
# NTK-aware base, YaRN, Llama 3.
ROPE_SCALINGS = ("linear", "ntk", "yarn", "llama3")

# The registered schemes, in registration order (the built-in seven first). Read it through the functions
# below: they also load the plugins (TOKEMBED_PLUGINS, entry points) that register more.
SCHEMES: dict[str, PositionalScheme] = {}


def register_scheme(scheme: PositionalScheme, *, replace: bool = False) -> PositionalScheme:
    """Add ``scheme`` to the table, so that ``GPTConfig(positional=scheme.name)`` and the CLI know it.

    Raises:
        ValueError: a scheme of that name is registered already (pass ``replace=True`` to replace it).
    """
    if not isinstance(scheme, PositionalScheme):
        raise TypeError(f"register_scheme takes a PositionalScheme, got {type(scheme).__name__}")
    if scheme.name in SCHEMES and not replace and SCHEMES[scheme.name] != scheme:
        raise ValueError(
            f"a positional scheme named {scheme.name!r} is registered already; choose another name or pass replace=True"
        )
    SCHEMES[scheme.name] = scheme
    return scheme


def unregister_scheme(name: str) -> PositionalScheme:
    """Remove the scheme ``name`` from the table (a test's cleanup); returns it."""
    return SCHEMES.pop(positional_scheme(name).name)


def scheme_names() -> tuple[str, ...]:
    """Every registered scheme's name, plugins' included, in registration order."""
    load_plugins()
    return tuple(SCHEMES)


def find_scheme(name: object) -> PositionalScheme | None:
    """The scheme called ``name``, or None."""
    if not isinstance(name, str):
        return None
    if name not in SCHEMES:
        load_plugins()
    return SCHEMES.get(name)


def positional_scheme(name: str) -> PositionalScheme:
    """The scheme called ``name``; raises ValueError listing the names for anything else."""
    scheme = find_scheme(name)
    if scheme is None:
        raise ValueError(
            f"unknown positional scheme {name!r}; choose one of {', '.join(scheme_names())} "
            "(or register your own: docs/positions.md)"
        )
    return scheme


def options_from_flat(positional: str, flat: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Read tokembed 0.1's flat config fields (``rope_base``, ``t5_num_buckets``, ...) as schemes' options.

    A key ``<scheme>_<option>`` belongs to that scheme. The options of ``positional`` are returned; those of
    other schemes are validated (0.1 did) and dropped, as 0.1 ignored them.

    Returns:
        (the options of ``positional``, the keys that are no scheme's option).
    """
    scheme = positional_scheme(positional)
    per_scheme: dict[str, dict[str, Any]] = {}
    rest = {}
    for key, value in flat.items():
        owner = next((s for s in SCHEMES.values() if _is_option(s, key)), None)
        if owner is None:
            rest[key] = value
        else:
            per_scheme.setdefault(owner.name, {})[key[len(owner.name) + 1 :]] = value
    built = {name: SCHEMES[name].make_options(values) for name, values in per_scheme.items()}
    return built.get(scheme.name, scheme.make_options()), rest


def _is_option(scheme: PositionalScheme, key: str) -> bool:
    prefix = scheme.name + "_"
    return key.startswith(prefix) and key[len(prefix) :] in {f.name for f in fields(scheme.options)}


# ----------------------------------------------------------------------------- the built-in schemes' options


@dataclass(frozen=True)
class SinusoidalOptions:
    """Options of sinusoidal positions (Vaswani et al. 2017)."""

    base: float = option(10000.0, "sinusoidal: the wavelength scale (wavelengths run from 2 pi to base * 2 pi)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", check_number("sinusoidal_base", self.base, min=1.0, min_open=True, noun=""))


@dataclass(frozen=True)
class RopeOptions:
    """Options of rotary positions (``tokembed.embeddings.rotary`` defines each)."""

    base: float = option(10000.0, "RoPE frequency base")
    scaling: Literal["linear", "ntk", "yarn", "llama3"] | None = option(
        None, "RoPE long-context scaling from context_length: linear, ntk, yarn or llama3", choices=ROPE_SCALINGS
    )
    factor: float = option(1.0, "RoPE scaling factor: the new length over the trained one (>= 1)")
    fraction: float = option(1.0, "partial RoPE: share of each head's dimensions rotated (1: all)")

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", check_number("rope_base", self.base, min=1.0, min_open=True, noun=""))
        if self.scaling is not None and self.scaling not in ROPE_SCALINGS:
            raise ValueError(f"rope_scaling must be None or one of {', '.join(ROPE_SCALINGS)}, got {self.scaling!r}")
        object.__setattr__(self, "factor", check_number("rope_factor", self.factor, min=1.0, noun=""))
        _check_fraction(self.fraction)
        object.__setattr__(self, "fraction", float(self.fraction))

    def check_shape(self, shape: ModelShape) -> None:
        rotary_dim(shape.head_dim, self.fraction)  # raises, naming the fraction, when it rotates no whole pair


@dataclass(frozen=True)
class T5Options:
    """Options of T5's bucketed relative bias (Raffel et al. 2020; 32 and 128 in T5)."""

    num_buckets: int = option(32, "T5 relative-position buckets", aliases=("--t5-buckets",))
    max_distance: int = option(128, "T5: distances beyond this share the last bucket")

    def __post_init__(self) -> None:
        check_positive_int("t5_num_buckets", self.num_buckets)
        check_positive_int("t5_max_distance", self.max_distance)
        if self.num_buckets // 2 < 1 or self.max_distance <= self.num_buckets // 2:
            raise ValueError(
                f"num_buckets={self.num_buckets} and max_distance={self.max_distance} leave no room for logarithmic buckets; use num_buckets >= 4 and max_distance > num_buckets // 2"
            )


@dataclass(frozen=True)
class ShawOptions:
    """Options of Shaw et al.'s relative position representations (2018)."""

    max_distance: int = option(16, "Shaw: relative distances are clipped to this")

    def __post_init__(self) -> None:
        check_positive_int("shaw_max_distance", self.max_distance)


def _check_fraction(fraction: object) -> None:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"rope fraction must be in (0, 1] (the share of each head that is rotated), got {fraction!r}")


def rotary_dim(head_dim: int, fraction: float) -> int:
    """How many dimensions of a head partial RoPE rotates: ``int(fraction * head_dim)``, even and >= 2."""
    _check_fraction(fraction)
    r = int(head_dim * fraction)
    if r < 2 or r % 2:
        what = (
            f"head_dim must be even, got {head_dim}"
            if r == head_dim
            else f"fraction {fraction:g} of head_dim {head_dim} gives {r} rotated dimensions, which must be even and >= 2"
        )
        raise ValueError(
            f"RoPE rotates pairs of dimensions: {what}; pick dim and n_heads so that dim // n_heads is even"
        )
    return r


# ----------------------------------------------------------------------------- the built-in seven

_E = "tokembed.embeddings"
for _scheme in (
    PositionalScheme(
        "learned",
        "input",
        f"{_E}.absolute:LearnedPositionalEmbedding.from_options",
        bounded=True,
        vectors="table",
        reference="GPT-2 (Radford et al. 2019); the chapter",
        summary="a trained vector per position, added to the input (the chapter's)",
    ),
    PositionalScheme(
        "sinusoidal",
        "input",
        f"{_E}.sinusoidal:SinusoidalPositionalEmbedding.from_options",
        options=SinusoidalOptions,
        vectors="formula",
        even="dim",
        reference="Vaswani et al. 2017, section 3.5",
        summary="fixed sines and cosines of the position, added to the input",
    ),
    PositionalScheme(
        "rope",
        "rotate",
        f"{_E}.rotary:RotaryEmbedding.from_options",
        options=RopeOptions,
        even="head_dim",
        scalings=ROPE_SCALINGS,
        reference="Su et al. 2021 (RoFormer)",
        summary="rotates queries and keys by angles proportional to the position",
    ),
    PositionalScheme(
        "alibi",
        "score",
        f"{_E}.bias:ALiBi.from_options",
        reference="Press et al. 2022 (Train Short, Test Long)",
        summary="a fixed linear penalty per distance and head, added to attention scores",
    ),
    PositionalScheme(
        "t5",
        "score",
        f"{_E}.bias:T5RelativeBias.from_options",
        options=T5Options,
        reference="Raffel et al. 2020 (T5), section 2.1",
        summary="a learned bias per distance bucket and head, added to attention scores (one table for all layers)",
    ),
    PositionalScheme(
        "shaw",
        "score",
        f"{_E}.bias:ShawRelativePositions.from_options",
        options=ShawOptions,
        per_layer=True,
        values=True,
        reference="Shaw et al. 2018 (relative position representations)",
        summary="learned vectors per clipped distance in the keys and values (tables per layer)",
    ),
    PositionalScheme(
        "none",
        "none",
        reference="Haviv et al. 2022; Kazemnejad et al. 2023 (NoPE)",
        summary="no positions: order comes from the causal mask alone",
    ),
):
    register_scheme(_scheme)
POSITIONAL_NAMES: tuple[str, ...] = tuple(SCHEMES)  # the built-in seven; scheme_names() adds registered ones
