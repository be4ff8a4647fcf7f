"""Positions as terms added to the attention scores: ALiBi, T5's bucketed bias, Shaw et al.

These are the chapter's "relative" family: a score between two tokens is told how far apart they
are, never where they are, so nothing limits the length a model reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

from tokembed._checks import check_positive_int
from tokembed.embeddings.interface import AttentionPositional, relative_positions
from tokembed.embeddings.names import NoOptions, ShawOptions, T5Options
from tokembed.embeddings.pictures import Curve, PositionPicture, score_bias_picture
from tokembed.embeddings.scheme import ModelShape


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's head slopes (Press et al. 2022, section 3), float32 (n_heads,).

    For ``n`` a power of two: the geometric sequence starting at ``2^(-8/n)`` with that ratio
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, the paper's recipe: the slopes of the largest
    power of two ``m < n``, then every other slope of ``2m`` heads until there are ``n``.
    """
    check_positive_int("n_heads", n_heads)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    m = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two(m) + power_of_two(2 * m)[0::2][: n_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(AttentionPositional):
    """Attention with linear biases: head ``h`` adds ``-slope_h * |i - j|`` to the score of query i, key j.

    No parameters. Shapes: ``score_bias`` -> (B or 1, n_heads, Tq, Tk).
    """

    slopes: torch.Tensor  # (n_heads,) buffer

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    @classmethod
    def from_options(cls, options: NoOptions, shape: ModelShape) -> ALiBi:
        """The ``alibi`` scheme's builder: a slope per head."""
        return cls(shape.n_heads)

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        dist = relative_positions(q_pos, k_pos).abs().to(q.dtype)  # (B,Tq,Tk); |.| so that restarted ids stay penalised
        return -dist.unsqueeze(1) * self.slopes.to(q.dtype).view(1, -1, 1, 1)  # (B,1,Tq,Tk) * (1,H,1,1) -> (B,H,Tq,Tk)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"

    @classmethod
    def pictures(cls, modules: Sequence[AttentionPositional], *, length: int) -> list[PositionPicture]:
        """The bias added for a key d tokens before the query, per head: ``-slope_h * d``."""
        m = cast(ALiBi, modules[0])
        return [score_bias_picture(m, length, "ALiBi: bias added to the attention score, per head", n_heads=m.n_heads)]


def t5_relative_bucket(
    relative_position: torch.Tensor, *, bidirectional: bool = False, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each relative position ``key - query`` (Raffel et al. 2020, section 2.1).

    Distances below ``num_buckets // 2`` (halved again when bidirectional) get a bucket each;
    larger ones share buckets spaced logarithmically up to ``max_distance``; anything farther
    falls in the last bucket. Causal (``bidirectional=False``): keys after the query all map to
    bucket 0. Bidirectional: half the buckets are for keys after the query.

    Shapes:
        relative_position (*) integer -> (*) int64 in [0, num_buckets)
    """
    check_positive_int("num_buckets", num_buckets)
    check_positive_int("max_distance", max_distance)
    n = -relative_position.long()  # distance looking back: > 0 for keys before the query
    buckets = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (n < 0).long() * num_buckets  # keys after the query: the upper half
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    if max_exact < 1 or max_distance <= max_exact:
        raise ValueError(
            f"num_buckets={num_buckets} and max_distance={max_distance} leave no room for logarithmic buckets; use num_buckets >= 4 and max_distance > num_buckets // 2"
        )
    log_ratio = torch.log(n.clamp(min=1).double() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()  # truncation, as T5 does
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(n < max_exact, n, large)


class T5RelativeBias(AttentionPositional):
    """T5's learned scalar per (bucket, head), added to the scores. Shared by all layers, as in T5.

    Args:
        n_heads: attention heads (one scalar per head and bucket).
        num_buckets, max_distance: 32 and 128 in T5.
        bidirectional: False for a causal (decoder) model.
    """

    def __init__(
        self, n_heads: int, *, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = False
    ) -> None:
        super().__init__()
        self.n_heads = check_positive_int("n_heads", n_heads)
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        t5_relative_bucket(
            torch.zeros(1, dtype=torch.long),
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        )  # validates
        self.bias = nn.Embedding(num_buckets, n_heads)
        nn.init.normal_(self.bias.weight, std=0.02)

    @classmethod
    def from_options(cls, options: T5Options, shape: ModelShape) -> T5RelativeBias:
        """The ``t5`` scheme's builder: causal buckets, a scalar per bucket and head."""
        return cls(shape.n_heads, num_buckets=options.num_buckets, max_distance=options.max_distance)

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        rel = relative_positions(q_pos, k_pos)  # (B,Tq,Tk)
        buckets = t5_relative_bucket(
            rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )
        return self.bias(buckets).permute(0, 3, 1, 2).to(q.dtype)  # (B,Tq,Tk,H) -> (B,H,Tq,Tk)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"

    @classmethod
    def pictures(cls, modules: Sequence[AttentionPositional], *, length: int) -> list[PositionPicture]:
        """The learned bias added at each distance, per head (the distances of a bucket share it)."""
        m = cast(T5RelativeBias, modules[0])
        title = "T5: learned bias added to the attention score, per head"
        return [score_bias_picture(m, length, title, n_heads=m.n_heads)]


class ShawRelativePositions(AttentionPositional):
    """Shaw et al. 2018: learned vectors for clipped distances, in the keys and in the values.

    ``e_ij = q_i . (k_j + a^K_ij) / sqrt(d)`` and ``z_i = sum_j alpha_ij (v_j + a^V_ij)`` with
    ``a_ij = w[clip(j - i, -k, k)]``: 2k+1 vectors per table, shared by the heads (as in the paper).
    The value term needs the attention weights, so a layer given this scheme computes them
    explicitly (no fused attention).

    Args:
        head_dim: the width of one head.
        max_distance: k, the clipping distance (the paper finds k >= 2 enough and uses 16).
    """

    needs_weights = True

    def __init__(self, head_dim: int, *, max_distance: int = 16) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.max_distance = check_positive_int("max_distance", max_distance)
        self.key = nn.Parameter(torch.randn(2 * max_distance + 1, head_dim) * 0.02)  # (2k+1,d)
        self.value = nn.Parameter(torch.randn(2 * max_distance + 1, head_dim) * 0.02)  # (2k+1,d)

    @classmethod
    def from_options(cls, options: ShawOptions, shape: ModelShape) -> ShawRelativePositions:
        """The ``shaw`` scheme's builder (one per layer: the tables are per layer)."""
        return cls(shape.head_dim, max_distance=options.max_distance)

    def index(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """Row of each (query, key) pair in the tables: (B or 1, Tq, Tk) in [0, 2k]."""
        k = self.max_distance
        return relative_positions(q_pos, k_pos).clamp(-k, k) + k

    def score_bias(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        B, H, Tq, _ = q.shape
        idx = self.index(q_pos, k_pos)  # (B|1,Tq,Tk)
        per_row = q @ self.key.to(q.dtype).T  # (B,H,Tq,d) @ (d,2k+1) -> (B,H,Tq,2k+1): q_i . a for every distance
        idx = idx.unsqueeze(1).expand(B, H, Tq, idx.shape[-1])  # (B,H,Tq,Tk)
        return per_row.gather(-1, idx) / math.sqrt(self.head_dim)  # (B,H,Tq,Tk)

    def value_term(self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        B, H, Tq, Tk = weights.shape
        idx = self.index(q_pos, k_pos).unsqueeze(1).expand(B, H, Tq, Tk)  # (B,H,Tq,Tk)
        per_distance = weights.new_zeros(B, H, Tq, 2 * self.max_distance + 1)
        per_distance.scatter_add_(-1, idx, weights)  # sum of the weights of the keys at each clipped distance
        return per_distance @ self.value.to(weights.dtype)  # (B,H,Tq,2k+1) @ (2k+1,d) -> (B,H,Tq,d)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_distance={self.max_distance}"

    @classmethod
    def pictures(cls, modules: Sequence[AttentionPositional], *, length: int) -> list[PositionPicture]:
        """The norms of the key and value vectors per clipped distance, per layer. A causal model reads only
        distances <= 0 (keys before the query): the vectors for later keys get no gradient, weight decay
        alone shrinks them."""
        layers = [cast(ShawRelativePositions, m) for m in modules]
        k = layers[0].max_distance
        x = tuple(float(d) for d in range(-k, k + 1))  # row k + d of the tables: the key is d tokens after the query
        curves = []
        with torch.no_grad():
            for i, m in enumerate(layers):
                curves.append(Curve(f"layer {i} key vectors", x, tuple(m.key.double().norm(dim=1).tolist())))
                curves.append(Curve(f"layer {i} value vectors", x, tuple(m.value.double().norm(dim=1).tolist())))
        title = "Shaw: norm of the learned relative vectors (a causal model reads only d <= 0)"
        return [PositionPicture(title, "relative distance d = key - query (clipped)", "vector norm", tuple(curves))]
