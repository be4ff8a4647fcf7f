"""Rotary position embedding, RoPE (Su et al. 2021): positions rotate queries and keys.

Layout: **interleaved pairs**, as in the paper (eq. 34), GPT-J and ``rotary-embedding-torch``:
the pair ``(x[2i], x[2i+1])`` of each head vector is rotated by the angle ``p * theta_i`` with
``theta_i = base^(-2i/d)``. (Llama in Hugging Face and GPT-NeoX rotate ``(x[i], x[i+d/2])``
instead, "split halves"; the two are a fixed permutation of the head dimensions apart, so a
checkpoint cannot be moved between them without permuting the q/k projection rows.)

A rotation keeps vector norms, and ``<R(p)q, R(s)k>`` depends only on ``p - s``: the score
between two tokens sees their distance, not where they are.

Longer contexts than trained (both leave the trained range of angles untouched in some way):
- ``scaling="linear"``, position interpolation (Chen et al. 2023): positions are divided by
  ``factor``, so ``factor`` times more positions fit in the trained range of angles.
- ``scaling="ntk"``, NTK-aware scaling (bloc97, 2023): the base becomes
  ``base * factor^(d/(d-2))``: high frequencies (local order) stay almost as trained while the
  lowest frequency is interpolated by ``factor``.
"""

from __future__ import annotations

import torch

from tokembed._checks import check_number, check_positive_int
from tokembed.embeddings.interface import AttentionPositional

ROPE_SCALINGS = ("linear", "ntk")


def rope_inv_freq(
    head_dim: int, *, base: float = 10000.0, scaling: str | None = None, factor: float = 1.0
) -> torch.Tensor:
    """The (head_dim/2,) angular frequencies ``theta_i``, after the chosen scaling (float64)."""
    if scaling is not None and scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope scaling must be one of {', '.join(ROPE_SCALINGS)} or None, got {scaling!r}")
    check_number("rope scaling factor", factor, min=1.0, noun="a number", hint="the new length over the trained one")
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))  # (d/2,)
    if scaling == "linear":
        inv_freq = inv_freq / factor  # p/factor * theta == p * (theta/factor)
    return inv_freq


class RotaryEmbedding(AttentionPositional):
    """Rotates queries and keys by their positions (interleaved pairs).

    Args:
        head_dim: the width of one attention head (even).
        base: the frequency base (10,000 in the paper).
        scaling: None, ``"linear"`` (position interpolation) or ``"ntk"`` (NTK-aware base).
        factor: how many times the trained length to cover (>= 1; 1 means no scaling).

    Shapes:
        x (B, H, T, head_dim), position_ids (T,) or (B, T) integer -> (B, H, T, head_dim)
    """

    def __init__(
        self, head_dim: int, *, base: float = 10000.0, scaling: str | None = None, factor: float = 1.0
    ) -> None:
        super().__init__()
        check_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions: head_dim must be even, got {head_dim}; pick dim and n_heads so that dim // n_heads is even"
            )
        if not base > 1:
            raise ValueError(f"rope base must be > 1, got {base!r}")
        self.head_dim, self.base = head_dim, float(base)
        self.register_buffer("inv_freq", torch.empty(head_dim // 2, dtype=torch.float64), persistent=False)
        self.set_scaling(scaling, factor)

    def set_scaling(self, scaling: str | None, factor: float = 1.0) -> None:
        """Switch the long-context scaling in place (e.g. to evaluate past the trained length)."""
        inv_freq = rope_inv_freq(self.head_dim, base=self.base, scaling=scaling, factor=factor)
        self.inv_freq.copy_(inv_freq.to(self.inv_freq.device))
        self.scaling, self.factor = scaling, float(factor)

    def cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of every angle: (T, d/2) or (B, 1, T, d/2), ready to broadcast over heads."""
        angles = position_ids.to(torch.float64).unsqueeze(-1) * self.inv_freq  # (*,T,1) * (d/2,) -> (*,T,d/2)
        if angles.dim() == 3:
            angles = angles.unsqueeze(1)  # (B,T,d/2) -> (B,1,T,d/2): the same positions for every head
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(position_ids, x.dtype)
        return apply_rotary(x, cos, sin)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin(position_ids, q.dtype)  # computed once for both
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)

    def extra_repr(self) -> str:
        s = f"head_dim={self.head_dim}, base={self.base:g}, layout=interleaved"
        return s + (f", scaling={self.scaling}, factor={self.factor:g}" if self.scaling else "")


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[2i], x[2i+1])`` by the angle whose cos and sin are given.

    Shapes:
        x (..., T, d), cos and sin broadcastable to (..., T, d/2) -> (..., T, d)
    """
    pairs = x.unflatten(-1, (-1, 2))  # (...,T,d) -> (...,T,d/2,2)
    x0, x1 = pairs[..., 0], pairs[..., 1]  # (...,T,d/2) each
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # (...,T,d/2,2)
    return out.flatten(-2)  # (...,T,d)
