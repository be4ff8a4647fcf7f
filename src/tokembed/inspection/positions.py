"""What each positional scheme does with positions, computed by the modules the model itself uses.

Schemes added to the input (learned, sinusoidal) have a vector per position: the table's
``position_similarity`` and ``position_step_distance`` describe them. The others have none, so this
module asks the model's own positional modules (from the checkpoint, with their trained weights) what
they do against the distance between a query and a key: each module class answers
``pictures(modules, length=...)`` (``tokembed.embeddings.interface.AttentionPositional``), for example:

* RoPE: its rotation frequencies ``theta_i`` and the cosine similarity between a vector rotated to
  position ``m`` and the same vector at position 0 (the module's own rotation).
* ALiBi and T5: the bias ``score_bias`` adds for a key ``d`` tokens before the query, per head.
* Shaw: the norms of the learned key and value vectors per clipped relative distance, per layer.
* none: nothing: the order of tokens reaches the model only through the causal mask.
"""

from __future__ import annotations

import torch
from torch import nn

from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.pictures import Curve, PositionPicture

__all__ = [
    "Curve",
    "PositionPicture",
    "attention_modules",
    "checkpoint_position_pictures",
    "describe_scheme",
    "has_position_modules",
    "position_pictures",
]


def attention_modules(model: nn.Module) -> list[AttentionPositional]:
    """The distinct positional modules of a ``tokembed.GPT``'s attention layers (one if shared), in layer order."""
    found, seen = [], set()
    for block in getattr(model, "blocks", ()):
        module = getattr(block.attn, "positional", None)
        if isinstance(module, AttentionPositional) and id(module) not in seen:
            seen.add(id(module))
            found.append(module)
    return found


def position_pictures(modules: list[AttentionPositional], *, length: int) -> list[PositionPicture]:
    """Pictures of what ``modules`` do over distances 0..length-1 (nothing for an empty list: NoPE).

    The modules' class says what to draw (``AttentionPositional.pictures``).

    Raises:
        TypeError: a module that is not an ``AttentionPositional``.
    """
    if not modules:
        return []
    first = modules[0]
    if not isinstance(first, AttentionPositional):
        raise TypeError(
            f"no picture for {type(first).__name__}: positional modules that act in attention subclass "
            "tokembed.embeddings.AttentionPositional and say what to draw in its pictures()"
        )
    with torch.no_grad():  # pictures of the weights, never a step of training
        return list(type(first).pictures(modules, length=length))


_ACTS = {
    "input": "are added to the input: a vector per position joins each token's embedding",
    "rotate": "act inside attention: they rotate each query and key by angles proportional to its position, "
    "so a score sees only the distance",
    "score": "act inside attention: a term that depends on the distance between query and key joins each score",
    "none": "are absent: the order of tokens reaches the model only through the causal mask",
}


def has_position_modules(name: str) -> bool:
    """Whether the scheme ``name`` acts inside attention through modules (RoPE, ALiBi, T5, Shaw, ...)."""
    from tokembed.embeddings.names import positional_scheme

    return positional_scheme(name).in_attention


def describe_scheme(name: str) -> str:
    """One sentence: what the positional scheme ``name`` does (from the registry's description of it)."""
    from tokembed.embeddings.names import positional_scheme

    scheme = positional_scheme(name)
    return f"{scheme.name} positions {_ACTS[scheme.acts]}" + (f" ({scheme.reference})." if scheme.reference else ".")


def checkpoint_position_pictures(path, *, max_positions: int | None = None) -> list[PositionPicture]:
    """The pictures of a checkpoint's attention positional modules, with its trained weights.

    Distances run over the checkpoint's context length (at most ``max_positions``).
    """
    from pathlib import Path

    from tokembed.model.checkpoint import load_checkpoint

    if not Path(path).is_dir():
        raise ValueError(
            f"{path} holds no model, only tables: the positional modules of schemes that act in attention live in the "
            "checkpoint; point at the checkpoint directory written by `tokembed train`"
        )
    model, _ = load_checkpoint(path)
    length = model.config.context_length if max_positions is None else min(model.config.context_length, max_positions)
    return position_pictures(attention_modules(model), length=length)
