"""Fixed sinusoidal positions added to the input (Vaswani et al. 2017, section 3.5).

``PE[p, 2i] = sin(p / base^(2i/D))`` and ``PE[p, 2i+1] = cos(p / base^(2i/D))`` with base 10,000:
sine and cosine of one frequency sit side by side, so position 0 is ``[0, 1, 0, 1, ...]``.
Nothing is learned and nothing is stored in a checkpoint: the table is a formula, computed for
whatever positions are asked, so it has no maximum length.
"""

from __future__ import annotations

import torch
from torch import nn

from tokembed._checks import check_positive_int
from tokembed.embeddings.names import SinusoidalOptions
from tokembed.embeddings.scheme import ModelShape


def sinusoidal_table(n_positions: int, dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The (n_positions, dim) sinusoidal table, rows 0..n_positions-1 (float32).

    Example:
        >>> sinusoidal_table(1, 4)
        tensor([[0., 1., 0., 1.]])
    """
    check_positive_int("n_positions", n_positions)
    return SinusoidalPositionalEmbedding(dim, base=base)(torch.arange(n_positions))


class SinusoidalPositionalEmbedding(nn.Module):
    """Position ids -> fixed sinusoidal vectors; a drop-in for ``LearnedPositionalEmbedding``.

    Args:
        dim: the embedding width (even: sines and cosines come in pairs).
        base: the wavelength scale (10,000 in the paper): wavelengths run from 2*pi to base*2*pi.

    Shapes:
        position_ids (*) integer -> (*, dim) float32
    """

    inv_freq: torch.Tensor  # (dim/2,) float64 buffer

    def __init__(self, dim: int, *, base: float = 10000.0) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        if dim % 2:
            raise ValueError(
                f"dim must be even for sinusoidal positions (a sine and a cosine per frequency), got {dim}; use an even width"
            )
        if not base > 1:
            raise ValueError(f"base must be > 1, got {base!r}")
        self.dim, self.base = dim, float(base)
        # computed in float64 so that 1/base^(2i/D) is exact to float32 precision for every width
        inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))  # (D/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @classmethod
    def from_options(cls, options: SinusoidalOptions, shape: ModelShape) -> SinusoidalPositionalEmbedding:
        """The ``sinusoidal`` scheme's builder."""
        return cls(shape.dim, base=options.base)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        if (
            not isinstance(position_ids, torch.Tensor)
            or position_ids.dtype.is_floating_point
            or position_ids.dtype == torch.bool
        ):
            raise TypeError(
                f"position ids must be an integer tensor, got {getattr(position_ids, 'dtype', type(position_ids).__name__)}; use torch.arange(T)"
            )
        angles = position_ids.to(torch.float64).unsqueeze(-1) * self.inv_freq  # (*,1) * (D/2,) -> (*,D/2)
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (*,D/2,2): sin at 2i, cos at 2i+1
        return pe.flatten(-2).to(torch.float32)  # (*,D)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, base={self.base:g}"
