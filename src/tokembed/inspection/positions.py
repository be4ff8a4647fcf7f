"""What each positional scheme does with positions, computed by the modules the model itself uses.

Learned and sinusoidal positions are vectors added to the input: the table's ``position_similarity``
and ``position_step_distance`` describe them. The other schemes have no vector per position, so
this module asks the model's own positional modules (from the checkpoint, with their trained
weights) what they do against the distance between a query and a key:

* RoPE (``RotaryEmbedding``): its rotation frequencies ``theta_i`` (the module's ``inv_freq``), and
  the cosine similarity between a vector rotated to position ``m`` and the same vector at position 0,
  computed by the module's own rotation: ``mean_i cos(m theta_i)`` for a vector of equal pairs.
* ALiBi (``ALiBi``): the bias ``score_bias`` adds for a key ``d`` tokens before the query, per head
  (``-slope_h * d``).
* T5 (``T5RelativeBias``): the learned bias ``score_bias`` adds per head at each distance (one value
  per bucket, distances of a bucket share it).
* Shaw (``ShawRelativePositions``): the norms of the learned key and value vectors per clipped
  relative distance, per layer; a causal model reads only distances <= 0 (keys before the query),
  so the vectors for keys after the query get no gradient (weight decay alone shrinks them).
* none: nothing: the order of tokens reaches the model only through the causal mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tokembed.embeddings.bias import ALiBi, ShawRelativePositions, T5RelativeBias
from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.rotary import RotaryEmbedding

__all__ = [
    "Curve",
    "PositionPicture",
    "attention_modules",
    "checkpoint_position_pictures",
    "describe_scheme",
    "has_position_modules",
    "position_pictures",
]


@dataclass(frozen=True)
class Curve:
    """One line of a picture: ``y`` against ``x``."""

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True)
class PositionPicture:
    """What one positional module does, as curves against distance (or frequency index)."""

    title: str
    xlabel: str
    ylabel: str
    curves: tuple[Curve, ...]
    log_y: bool = False


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

    Raises:
        TypeError: a module of a kind this function does not know.
    """
    if not modules:
        return []
    first = modules[0]
    with torch.no_grad():
        if isinstance(first, RotaryEmbedding):
            return _rope(first, length)
        if isinstance(first, ALiBi):
            return [_bias_picture(first, length, "ALiBi: bias added to the attention score, per head")]
        if isinstance(first, T5RelativeBias):
            return [_bias_picture(first, length, "T5: learned bias added to the attention score, per head")]
        if isinstance(first, ShawRelativePositions):
            return [_shaw(modules)]
    raise TypeError(f"no picture for the positional module {type(first).__name__}")


def _rope(rope: RotaryEmbedding, length: int) -> list[PositionPicture]:
    inv_freq = rope.inv_freq.double()  # (d/2,)
    pairs = tuple(float(i) for i in range(inv_freq.shape[0]))
    freq = PositionPicture(
        "RoPE: rotation frequency of each pair of head dimensions",
        "pair i of the head dimensions",
        "theta_i (radians per position)",
        (Curve("theta_i", pairs, tuple(inv_freq.tolist())),),
        log_y=True,
    )
    x = torch.ones(1, 1, length, rope.head_dim)  # (1,1,T,d): the same vector at every position
    rotated = rope(x, torch.arange(length))[0, 0].double()  # (T,d), rotated by the module itself
    sim = rotated @ rotated[0] / (rotated.norm(dim=1) * rotated[0].norm())  # (T,)
    decay = PositionPicture(
        "RoPE: cosine similarity of a vector rotated to position m with itself at position 0",
        "distance m (positions)",
        "cosine similarity",
        (Curve("all pairs equal", tuple(float(m) for m in range(length)), tuple(sim.tolist())),),
    )
    return [freq, decay]


def _bias_picture(module: AttentionPositional, length: int, title: str) -> PositionPicture:
    H = module.n_heads
    q = torch.zeros(1, H, 1, 1)  # the score bias of ALiBi and T5 does not depend on the query's content
    bias = module.score_bias(q, torch.tensor([length - 1]), torch.arange(length))[0, :, 0].double()  # (H,T)
    dist = torch.arange(length - 1, -1, -1)  # key j is length-1-j tokens before the query
    order = torch.argsort(dist)
    x = tuple(float(d) for d in dist[order])
    curves = tuple(Curve(f"head {h}", x, tuple(bias[h, order].tolist())) for h in range(H))
    return PositionPicture(title, "distance d (key d tokens before the query)", "bias added to the score", curves)


def _shaw(modules: list[AttentionPositional]) -> PositionPicture:
    k = modules[0].max_distance
    x = tuple(float(d) for d in range(-k, k + 1))  # row k + d of the tables: the key is d tokens after the query
    curves = []
    for layer, m in enumerate(modules):
        curves.append(Curve(f"layer {layer} key vectors", x, tuple(m.key.double().norm(dim=1).tolist())))
        curves.append(Curve(f"layer {layer} value vectors", x, tuple(m.value.double().norm(dim=1).tolist())))
    return PositionPicture(
        "Shaw: norm of the learned relative vectors (a causal model reads only d <= 0)",
        "relative distance d = key - query (clipped)",
        "vector norm",
        tuple(curves),
    )


_ACTS = {
    "input": "are added to the input: a vector per position joins each token's embedding",
    "rotate": "act inside attention: they rotate each query and key by angles proportional to its position, "
    "so a score sees only the distance",
    "score": "act inside attention: a term that depends on the distance between query and key joins each score",
    "none": "are absent: the order of tokens reaches the model only through the causal mask",
}


def has_position_modules(name: str) -> bool:
    """Whether the scheme ``name`` acts inside attention through modules (RoPE, ALiBi, T5, Shaw)."""
    from tokembed.embeddings.names import positional_scheme

    return positional_scheme(name).acts in ("rotate", "score")


def describe_scheme(name: str) -> str:
    """One sentence: what the positional scheme ``name`` does (from the registry's description of it)."""
    from tokembed.embeddings.names import positional_scheme

    scheme = positional_scheme(name)
    return f"{scheme.name} positions {_ACTS[scheme.acts]} ({scheme.reference})."


def checkpoint_position_pictures(path, *, max_positions: int | None = None) -> list[PositionPicture]:
    """The pictures of a checkpoint's attention positional modules, with its trained weights.

    Distances run over the checkpoint's context length (at most ``max_positions``).
    """
    from pathlib import Path

    from tokembed.model.checkpoint import load_checkpoint

    if not Path(path).is_dir():
        raise ValueError(
            f"{path} holds no model, only tables: the positional modules of RoPE, ALiBi, T5 and Shaw live in the "
            "checkpoint; point at the checkpoint directory written by `tokembed train`"
        )
    model, _ = load_checkpoint(path)
    length = model.config.context_length if max_positions is None else min(model.config.context_length, max_positions)
    return position_pictures(attention_modules(model), length=length)
