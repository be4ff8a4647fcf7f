"""Token and positional embeddings.

Positional schemes, grouped by where they act (names in ``registry.POSITIONAL_NAMES``):
added to the input (``LearnedPositionalEmbedding``, ``SinusoidalPositionalEmbedding``), rotating
queries and keys (``RotaryEmbedding``), added to attention scores (``ALiBi``, ``T5RelativeBias``,
``ShawRelativePositions``), or none.
"""

from tokembed.embeddings.absolute import LearnedPositionalEmbedding
from tokembed.embeddings.bias import ALiBi, ShawRelativePositions, T5RelativeBias, alibi_slopes, t5_relative_bucket
from tokembed.embeddings.input import InputEmbedding
from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.registry import POSITIONAL_NAMES, attention_positional, input_positional, positional_scheme
from tokembed.embeddings.rotary import RotaryEmbedding
from tokembed.embeddings.sinusoidal import SinusoidalPositionalEmbedding, sinusoidal_table
from tokembed.embeddings.token import TokenEmbedding

__all__ = [
    "ALiBi",
    "AttentionPositional",
    "InputEmbedding",
    "LearnedPositionalEmbedding",
    "POSITIONAL_NAMES",
    "RotaryEmbedding",
    "ShawRelativePositions",
    "SinusoidalPositionalEmbedding",
    "T5RelativeBias",
    "TokenEmbedding",
    "alibi_slopes",
    "attention_positional",
    "input_positional",
    "positional_scheme",
    "sinusoidal_table",
    "t5_relative_bucket",
]
