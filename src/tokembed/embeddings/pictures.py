"""What a positional module shows of itself: curves against distance, drawn by ``tokembed inspect`` and the report.

A module that acts inside attention answers ``AttentionPositional.pictures(modules, length=...)`` with a list of
``PositionPicture``; inspection plots them without knowing which scheme made them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

__all__ = ["Curve", "PositionPicture", "score_bias_picture"]


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


class _ScoreBias(Protocol):
    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor: ...


def score_bias_picture(module: _ScoreBias, length: int, title: str, *, n_heads: int) -> PositionPicture:
    """The term ``module.score_bias`` adds for a key ``d`` tokens before the query, per head, d = 0..length-1.

    For biases that do not depend on the query's content (ALiBi, T5): the query is a zero vector.
    """
    q = torch.zeros(1, n_heads, 1, 1)
    with torch.no_grad():
        bias = module.score_bias(q, torch.tensor([length - 1]), torch.arange(length))  # (1|B,H|1,1,T)
    bias = bias.expand(1, n_heads, 1, length)[0, :, 0].double()  # (H,T)
    dist = torch.arange(length - 1, -1, -1)  # key j is length-1-j tokens before the query
    order = torch.argsort(dist)
    x = tuple(float(d) for d in dist[order])
    curves = tuple(Curve(f"head {h}", x, tuple(bias[h, order].tolist())) for h in range(n_heads))
    return PositionPicture(title, "distance d (key d tokens before the query)", "bias added to the score", curves)
