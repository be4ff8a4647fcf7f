"""What an attention layer asks of a positional scheme that acts inside it.

Schemes added to the input (learned, sinusoidal) live in ``InputEmbedding``. The others are given
to every attention layer as one object with three hooks, each a no-op by default:

1. ``rotate(q, k, position_ids)``: rotate queries and keys (RoPE).
2. ``score_bias(q, q_pos, k_pos)``: a term added to the scaled scores ``q.k/sqrt(d)``
   before the softmax (ALiBi, T5, Shaw's key term).
3. ``value_term(weights, q_pos, k_pos)``: a term added to the attention output, given the
   attention weights (Shaw's value term). Schemes that set ``needs_weights = True`` make the
   layer compute its weights explicitly instead of calling ``scaled_dot_product_attention``.

Positions are position ids, not indices: with a cache the queries sit at an offset, and ids may
restart at document boundaries (the model computes them; a scheme only reads them). Relative schemes
use ``k_pos - q_pos``.

A fourth hook serves inspection: ``pictures(modules, length=...)`` (a class method) says what to draw
of the model's modules of this kind; the default draws nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tokembed.embeddings.pictures import PositionPicture


class AttentionPositional(nn.Module):
    """Base class of the schemes that act inside attention (see the module docstring)."""

    needs_weights: bool = False

    def rotate(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, H, T, d) queries and keys at ``position_ids`` (T,) or (B, T) -> rotated (B, H, T, d) each."""
        return q, k

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """q (B, H, Tq, d), q_pos (Tq,) or (B, Tq), k_pos (Tk,) or (B, Tk) -> (B or 1, H or 1, Tq, Tk) or None."""
        return None

    def value_term(self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """weights (B, H, Tq, Tk) after softmax and dropout -> (B, H, Tq, d) added to the output, or None."""
        return None

    @classmethod
    def pictures(cls, modules: Sequence[AttentionPositional], *, length: int) -> list[PositionPicture]:
        """What ``tokembed inspect`` and the report draw of ``modules`` (the model's distinct modules of this
        class, in layer order: one when shared) over distances 0..length-1. Default: nothing."""
        return []


def relative_positions(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """``k_pos - q_pos`` for every (query, key) pair: (Tq,), (Tk,) -> (1, Tq, Tk); (B, Tq), (B, Tk) -> (B, Tq, Tk).

    Negative for keys before the query (the only ones a causal model sees).
    """
    if q_pos.dim() == 1:
        q_pos = q_pos.unsqueeze(0)  # (Tq,) -> (1,Tq)
    if k_pos.dim() == 1:
        k_pos = k_pos.unsqueeze(0)
    return k_pos.unsqueeze(-2) - q_pos.unsqueeze(-1)  # (B,1,Tk) - (B,Tq,1) -> (B,Tq,Tk)
