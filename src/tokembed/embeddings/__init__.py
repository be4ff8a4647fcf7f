"""Stage 4: token and positional embeddings.

Positional schemes, grouped by where they act: added to the input (``LearnedPositionalEmbedding``,
``SinusoidalPositionalEmbedding``), rotating queries and keys (``RotaryEmbedding``), added to attention
scores (``ALiBi``, ``T5RelativeBias``, ``ShawRelativePositions``), or none. Each is one registered
``PositionalScheme`` (``scheme``: what it is, its options dataclass, its builder) in the table of ``names``
(``register_scheme`` adds yours); both modules are torch-free. The names below load on first use
(PEP 562), so importing ``tokembed.embeddings.names`` does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokembed._lazy import lazy_attributes

_PUBLIC = {
    "ALiBi": "tokembed.embeddings.bias",
    "AttentionPositional": "tokembed.embeddings.interface",
    "Curve": "tokembed.embeddings.pictures",
    "InputEmbedding": "tokembed.embeddings.input",
    "LearnedPositionalEmbedding": "tokembed.embeddings.absolute",
    "ModelShape": "tokembed.embeddings.scheme",
    "NoOptions": "tokembed.embeddings.scheme",
    "POSITIONAL_NAMES": "tokembed.embeddings.names",
    "PositionPicture": "tokembed.embeddings.pictures",
    "PositionalScheme": "tokembed.embeddings.scheme",
    "RopeOptions": "tokembed.embeddings.names",
    "RotaryEmbedding": "tokembed.embeddings.rotary",
    "ShawOptions": "tokembed.embeddings.names",
    "ShawRelativePositions": "tokembed.embeddings.bias",
    "SinusoidalOptions": "tokembed.embeddings.names",
    "SinusoidalPositionalEmbedding": "tokembed.embeddings.sinusoidal",
    "T5Options": "tokembed.embeddings.names",
    "T5RelativeBias": "tokembed.embeddings.bias",
    "TokenEmbedding": "tokembed.embeddings.token",
    "alibi_slopes": "tokembed.embeddings.bias",
    "attention_positional": "tokembed.embeddings.registry",
    "input_positional": "tokembed.embeddings.registry",
    "option": "tokembed.embeddings.scheme",
    "positional_scheme": "tokembed.embeddings.names",
    "register_scheme": "tokembed.embeddings.names",
    "relative_positions": "tokembed.embeddings.interface",
    "scheme_names": "tokembed.embeddings.names",
    "score_bias_picture": "tokembed.embeddings.pictures",
    "sinusoidal_table": "tokembed.embeddings.sinusoidal",
    "t5_relative_bucket": "tokembed.embeddings.bias",
    "unregister_scheme": "tokembed.embeddings.names",
}
__all__ = sorted(_PUBLIC)

# What type checkers and editors see (the same names, from their modules); at run time each loads on first use.
if TYPE_CHECKING:
    from tokembed.embeddings.absolute import LearnedPositionalEmbedding as LearnedPositionalEmbedding
    from tokembed.embeddings.bias import ALiBi as ALiBi
    from tokembed.embeddings.bias import ShawRelativePositions as ShawRelativePositions
    from tokembed.embeddings.bias import T5RelativeBias as T5RelativeBias
    from tokembed.embeddings.bias import alibi_slopes as alibi_slopes
    from tokembed.embeddings.bias import t5_relative_bucket as t5_relative_bucket
    from tokembed.embeddings.input import InputEmbedding as InputEmbedding
    from tokembed.embeddings.interface import AttentionPositional as AttentionPositional
    from tokembed.embeddings.interface import relative_positions as relative_positions
    from tokembed.embeddings.names import POSITIONAL_NAMES as POSITIONAL_NAMES
    from tokembed.embeddings.names import RopeOptions as RopeOptions
    from tokembed.embeddings.names import ShawOptions as ShawOptions
    from tokembed.embeddings.names import SinusoidalOptions as SinusoidalOptions
    from tokembed.embeddings.names import T5Options as T5Options
    from tokembed.embeddings.names import positional_scheme as positional_scheme
    from tokembed.embeddings.names import register_scheme as register_scheme
    from tokembed.embeddings.names import scheme_names as scheme_names
    from tokembed.embeddings.names import unregister_scheme as unregister_scheme
    from tokembed.embeddings.pictures import Curve as Curve
    from tokembed.embeddings.pictures import PositionPicture as PositionPicture
    from tokembed.embeddings.pictures import score_bias_picture as score_bias_picture
    from tokembed.embeddings.registry import attention_positional as attention_positional
    from tokembed.embeddings.registry import input_positional as input_positional
    from tokembed.embeddings.rotary import RotaryEmbedding as RotaryEmbedding
    from tokembed.embeddings.scheme import ModelShape as ModelShape
    from tokembed.embeddings.scheme import NoOptions as NoOptions
    from tokembed.embeddings.scheme import PositionalScheme as PositionalScheme
    from tokembed.embeddings.scheme import option as option
    from tokembed.embeddings.sinusoidal import SinusoidalPositionalEmbedding as SinusoidalPositionalEmbedding
    from tokembed.embeddings.sinusoidal import sinusoidal_table as sinusoidal_table
    from tokembed.embeddings.token import TokenEmbedding as TokenEmbedding


__getattr__, __dir__ = lazy_attributes("tokembed.embeddings", globals(), _PUBLIC)
