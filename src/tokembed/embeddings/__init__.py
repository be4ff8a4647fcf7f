"""Stage 4: token and positional embeddings.

Positional schemes, grouped by where they act (``names.POSITIONAL_NAMES``; ``names`` is torch-free):
added to the input (``LearnedPositionalEmbedding``, ``SinusoidalPositionalEmbedding``), rotating
queries and keys (``RotaryEmbedding``), added to attention scores (``ALiBi``, ``T5RelativeBias``,
``ShawRelativePositions``), or none. The names below load on first use (PEP 562), so importing
``tokembed.embeddings.names`` does not import torch.
"""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tokembed.embeddings' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
