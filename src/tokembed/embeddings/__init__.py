"""Stage 4: token and positional embeddings.

Positional schemes, grouped by where they act (``names.POSITIONAL_NAMES``; ``names`` is torch-free):
added to the input (``LearnedPositionalEmbedding``, ``SinusoidalPositionalEmbedding``), rotating
queries and keys (``RotaryEmbedding``), added to attention scores (``ALiBi``, ``T5RelativeBias``,
``ShawRelativePositions``), or none. The names below load on first use (PEP 562), so importing
``tokembed.embeddings.names`` does not import torch.
"""

from __future__ import annotations

from tokembed._lazy import lazy_attributes

_PUBLIC = {
    "ALiBi": "tokembed.embeddings.bias",
    "AttentionPositional": "tokembed.embeddings.interface",
    "InputEmbedding": "tokembed.embeddings.input",
    "LearnedPositionalEmbedding": "tokembed.embeddings.absolute",
    "POSITIONAL_NAMES": "tokembed.embeddings.names",
    "RotaryEmbedding": "tokembed.embeddings.rotary",
    "ShawRelativePositions": "tokembed.embeddings.bias",
    "SinusoidalPositionalEmbedding": "tokembed.embeddings.sinusoidal",
    "T5RelativeBias": "tokembed.embeddings.bias",
    "TokenEmbedding": "tokembed.embeddings.token",
    "alibi_slopes": "tokembed.embeddings.bias",
    "attention_positional": "tokembed.embeddings.registry",
    "input_positional": "tokembed.embeddings.registry",
    "positional_scheme": "tokembed.embeddings.names",
    "sinusoidal_table": "tokembed.embeddings.sinusoidal",
    "t5_relative_bucket": "tokembed.embeddings.bias",
}
__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_attributes("tokembed.embeddings", globals(), _PUBLIC)
