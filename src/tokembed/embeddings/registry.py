"""The modules behind the positional scheme names (`tokembed.embeddings.names` says what each name is).

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

from torch import nn

from tokembed.embeddings.absolute import LearnedPositionalEmbedding
from tokembed.embeddings.bias import ALiBi, ShawRelativePositions, T5RelativeBias
from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.names import POSITIONAL_NAMES, SCHEMES, PositionalScheme, positional_scheme

__all__ = [  # the names are re-exported: code written against 0.1 reads them from here
    "POSITIONAL_NAMES",
    "SCHEMES",
    "PositionalScheme",
    "attention_positional",
    "input_positional",
    "positional_scheme",
]
from tokembed.embeddings.rotary import RotaryEmbedding
from tokembed.embeddings.sinusoidal import SinusoidalPositionalEmbedding

_INPUT_MODULES = {
    "learned": lambda *, context_length, dim: LearnedPositionalEmbedding(context_length, dim),
    "sinusoidal": lambda *, context_length, dim: SinusoidalPositionalEmbedding(dim),
}


def input_positional(name: str, *, context_length: int, dim: int) -> nn.Module | None:
    """The module that adds positions to the input for ``name``, or None if the scheme acts elsewhere.

    Shapes of the module: position_ids (T,) or (B, T) -> (T, dim) or (B, T, dim).
    """
    build = _INPUT_MODULES.get(positional_scheme(name).name)
    return build(context_length=context_length, dim=dim) if build else None


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
    builders = {
        "rope": lambda: RotaryEmbedding(
            head_dim,
            base=rope_base,
            scaling=rope_scaling,
            factor=rope_factor,
            original_length=rope_original_length,
            fraction=rope_fraction,
        ),
        "alibi": lambda: ALiBi(n_heads),
        "t5": lambda: T5RelativeBias(n_heads, num_buckets=t5_num_buckets, max_distance=t5_max_distance),
        "shaw": lambda: ShawRelativePositions(head_dim, max_distance=shaw_max_distance),
    }
    build = builders.get(scheme.name)
    return build() if build else None
