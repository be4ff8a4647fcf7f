"""The names users type for positional schemes, and the modules behind them.

=============  ==========================  =========================================
name           where it acts               module
=============  ==========================  =========================================
learned        added to the input          ``LearnedPositionalEmbedding`` (the chapter)
sinusoidal     added to the input          ``SinusoidalPositionalEmbedding``
rope           rotates queries and keys    ``RotaryEmbedding``
alibi          added to attention scores   ``ALiBi``
t5             added to attention scores   ``T5RelativeBias`` (one for all layers)
shaw           scores and values           ``ShawRelativePositions`` (one per layer)
none           nowhere (NoPE)              order comes from the causal mask alone
=============  ==========================  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from tokembed.embeddings.absolute import LearnedPositionalEmbedding
from tokembed.embeddings.bias import ALiBi, ShawRelativePositions, T5RelativeBias
from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.rotary import RotaryEmbedding
from tokembed.embeddings.sinusoidal import SinusoidalPositionalEmbedding


@dataclass(frozen=True)
class PositionalScheme:
    """What a scheme name means.

    Attributes:
        name: what users type.
        acts: ``"input"``, ``"rotate"``, ``"score"`` or ``"none"``.
        per_layer: True when each attention layer gets its own module (it has per-layer parameters).
        bounded: True when the scheme cannot read past ``context_length`` (a table of positions).
        reference: where it comes from.
    """

    name: str
    acts: str
    per_layer: bool
    bounded: bool
    reference: str


SCHEMES: dict[str, PositionalScheme] = {
    s.name: s
    for s in (
        PositionalScheme("learned", "input", False, True, "GPT-2 (Radford et al. 2019); the chapter"),
        PositionalScheme("sinusoidal", "input", False, False, "Vaswani et al. 2017, section 3.5"),
        PositionalScheme("rope", "rotate", False, False, "Su et al. 2021 (RoFormer)"),
        PositionalScheme("alibi", "score", False, False, "Press et al. 2022 (Train Short, Test Long)"),
        PositionalScheme("t5", "score", False, False, "Raffel et al. 2020 (T5), section 2.1"),
        PositionalScheme(
            "shaw", "score", True, False, "Shaw et al. 2018 (Self-Attention with Relative Position Representations)"
        ),
        PositionalScheme("none", "none", False, False, "Haviv et al. 2022; Kazemnejad et al. 2023 (NoPE)"),
    )
}
POSITIONAL_NAMES: tuple[str, ...] = tuple(SCHEMES)


def positional_scheme(name: str) -> PositionalScheme:
    """The scheme called ``name``; raises ValueError listing the names for anything else."""
    if not isinstance(name, str) or name not in SCHEMES:
        raise ValueError(f"unknown positional scheme {name!r}; choose one of {', '.join(POSITIONAL_NAMES)}")
    return SCHEMES[name]


def input_positional(name: str, *, context_length: int, dim: int) -> nn.Module | None:
    """The module that adds positions to the input for ``name``, or None if the scheme acts elsewhere.

    Shapes of the module: position_ids (T,) or (B, T) -> (T, dim) or (B, T, dim).
    """
    scheme = positional_scheme(name)
    if scheme.name == "learned":
        return LearnedPositionalEmbedding(context_length, dim)
    if scheme.name == "sinusoidal":
        return SinusoidalPositionalEmbedding(dim)
    return None


def attention_positional(
    name: str,
    *,
    n_heads: int,
    head_dim: int,
    rope_base: float = 10000.0,
    rope_scaling: str | None = None,
    rope_factor: float = 1.0,
    rope_fraction: float = 1.0,
    rope_original_length: int | None = None,
    t5_num_buckets: int = 32,
    t5_max_distance: int = 128,
    shaw_max_distance: int = 16,
) -> AttentionPositional | None:
    """The module given to attention layers for ``name``, or None if the scheme acts on the input or nowhere.

    Build one per layer when ``positional_scheme(name).per_layer``, else one shared by all layers.
    """
    scheme = positional_scheme(name)
    if scheme.name == "rope":
        return RotaryEmbedding(
            head_dim,
            base=rope_base,
            scaling=rope_scaling,
            factor=rope_factor,
            original_length=rope_original_length,
            fraction=rope_fraction,
        )
    if scheme.name == "alibi":
        return ALiBi(n_heads)
    if scheme.name == "t5":
        return T5RelativeBias(n_heads, num_buckets=t5_num_buckets, max_distance=t5_max_distance)
    if scheme.name == "shaw":
        return ShawRelativePositions(head_dim, max_distance=shaw_max_distance)
    return None
