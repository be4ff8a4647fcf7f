"""Stage 4: token and positional embeddings.

Positional schemes, grouped by where they act: added to the input (``LearnedPositionalEmbedding``,
``SinusoidalPositionalEmbedding``), rotating queries and keys (``RotaryEmbedding``), added to attention
scores (``ALiBi``, ``T5RelativeBias``, ``ShawRelativePositions``), or none. Each is one registered
``PositionalScheme`` (``scheme``: what it is, its options dataclass, its builder) in the table of ``names``
(``register_scheme`` adds yours); both modules are torch-free. The names below load on first use
(PEP 562), so importing ``tokembed.embeddings.names`` does not import torch.
"""

from __future__ import annotations

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


__getattr__, __dir__ = lazy_attributes("tokembed.embeddings", globals(), _PUBLIC)
