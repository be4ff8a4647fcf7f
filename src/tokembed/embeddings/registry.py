"""Build a scheme's module by name, outside a model (``tokembed.embeddings.names`` holds the schemes).

``GPT`` asks the scheme itself (``positional_scheme(name).module(options, shape)``); these two functions are
the same for code that wants one piece: the module added to the input, or the one given to attention layers.
"""

from __future__ import annotations

import warnings
from typing import Any

from torch import nn

from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.names import (
    POSITIONAL_NAMES,
    SCHEMES,
    PositionalScheme,
    options_from_flat,
    positional_scheme,
    register_scheme,
    scheme_names,
)
from tokembed.embeddings.scheme import ModelShape

__all__ = [  # the names are re-exported: code written against 0.1 reads them from here
    "POSITIONAL_NAMES",
    "SCHEMES",
    "PositionalScheme",
    "attention_positional",
    "input_positional",
    "positional_scheme",
    "register_scheme",
    "scheme_names",
]


def input_positional(name: str, *, context_length: int, dim: int, options: Any = None) -> nn.Module | None:
    """The module that adds positions to the input for ``name``, or None if the scheme acts elsewhere.

    Shapes of the module: position_ids (T,) or (B, T) -> (T, dim) or (B, T, dim).
    """
    scheme = positional_scheme(name)
    if scheme.acts != "input":
        return None
    return scheme.module(options, ModelShape(dim=dim, context_length=context_length))


def attention_positional(
    name: str,
    *,
    n_heads: int,
    head_dim: int,
    context_length: int | None = None,
    options: Any = None,
    **flat: Any,
) -> AttentionPositional | None:
    """The module given to attention layers for ``name``, or None if the scheme acts on the input or nowhere.

    Build one per layer when ``positional_scheme(name).per_layer``, else one shared by all layers.

    Args:
        name: the scheme.
        n_heads, head_dim: the attention layer's heads and their width.
        context_length: the trained length (RoPE's YaRN and Llama 3 scalings start from it).
        options: the scheme's options: its dataclass, a dict of them, or None for the defaults.
        flat: deprecated: tokembed 0.1's spellings (``rope_base=``, ``t5_num_buckets=``, ...).
    """
    scheme = positional_scheme(name)
    if flat:
        warnings.warn(
            f"attention_positional({', '.join(f'{k}=' for k in flat)}) is deprecated; pass options={{...}} "
            f"with the {scheme.name} scheme's option names",
            DeprecationWarning,
            stacklevel=2,
        )
        options, unknown = options_from_flat(scheme.name, flat)
        if unknown:
            raise TypeError(f"attention_positional got unexpected keyword arguments {sorted(unknown)}")
    if not scheme.in_attention:
        return None
    return scheme.module(options, ModelShape(dim=n_heads * head_dim, n_heads=n_heads, context_length=context_length))
