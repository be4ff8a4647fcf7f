"""Rotary position embedding, RoPE (Su et al. 2021): positions rotate queries and keys.

Layout: **interleaved pairs**, as in the paper (eq. 34), GPT-J and ``rotary-embedding-torch``:
the pair ``(x[2i], x[2i+1])`` of each head vector is rotated by the angle ``p * theta_i`` with
``theta_i = base^(-2i/d)``. (Llama in Hugging Face and GPT-NeoX rotate ``(x[i], x[i+d/2])``
instead, "split halves"; the two are a fixed permutation of the head dimensions apart, so a
checkpoint cannot be moved between them without permuting the q/k projection rows.)

A rotation keeps vector norms, and ``<R(p)q, R(s)k>`` depends only on ``p - s``: the score
between two tokens sees their distance, not where they are.

Partial RoPE (GPT-NeoX, Phi, ...): with ``fraction`` < 1 only the first ``fraction * head_dim``
dimensions of each head are rotated (frequencies ``base^(-2i/r)`` over the ``r`` rotated ones);
the others carry no position.

Longer contexts than trained (each leaves the trained range of angles untouched in some way); the
definitions are Hugging Face transformers' (``modeling_rope_utils``), which the tests compare with:
- ``scaling="linear"``, position interpolation (Chen et al. 2023): positions are divided by
  ``factor``, so ``factor`` times more positions fit in the trained range of angles.
- ``scaling="ntk"``, NTK-aware scaling (bloc97, 2023): the base becomes
  ``base * factor^(d/(d-2))``: high frequencies (local order) stay almost as trained while the
  lowest frequency is interpolated by ``factor``.
- ``scaling="yarn"`` (Peng et al. 2023): frequencies that turn more than ``beta_fast`` (32) times
  over the original length are kept, those turning fewer than ``beta_slow`` (1) times are divided
  by ``factor``, with a linear ramp between; and an attention temperature: cos and sin are
  multiplied by ``0.1 ln(factor) + 1`` (so the logits by its square).
- ``scaling="llama3"`` (Llama 3.1): wavelengths shorter than ``original_length / 4`` are kept,
  longer than ``original_length`` divided by ``factor``, smoothly interpolated between.
``original_length`` is the length the model was trained on (YaRN and Llama 3 need it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch

from tokembed._checks import check_number, check_positive_int
from tokembed.embeddings.interface import AttentionPositional
from tokembed.embeddings.names import ROPE_SCALINGS, RopeOptions, rotary_dim
from tokembed.embeddings.pictures import Curve, PositionPicture
from tokembed.embeddings.scheme import ModelShape

YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0  # the paper's (and transformers') defaults
LLAMA3_LOW_FREQ_FACTOR, LLAMA3_HIGH_FREQ_FACTOR = 1.0, 4.0  # Llama 3.1's


def rope_inv_freq(
    head_dim: int,
    *,
    base: float = 10000.0,
    scaling: str | None = None,
    factor: float = 1.0,
    original_length: int | None = None,
) -> torch.Tensor:
    """The (head_dim/2,) angular frequencies ``theta_i``, after the chosen scaling (float64).

    ``head_dim`` is the number of rotated dimensions (for partial RoPE, the rotated part only).
    """
    _check_scaling(scaling, factor, original_length)
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))  # (d/2,)
    if scaling == "linear":
        inv_freq = inv_freq / factor  # p/factor * theta == p * (theta/factor)
    elif scaling == "yarn" and original_length is not None:  # (_check_scaling: yarn and llama3 have it)
        inv_freq = _yarn(inv_freq, head_dim, base, factor, original_length)
    elif scaling == "llama3" and original_length is not None:
        inv_freq = _llama3(inv_freq, factor, original_length)
    return inv_freq


def rope_attention_factor(scaling: str | None, factor: float) -> float:
    """What cos and sin are multiplied by: YaRN's temperature ``0.1 ln(factor) + 1``, else 1."""
    return 0.1 * math.log(factor) + 1.0 if scaling == "yarn" and factor > 1 else 1.0


def _check_scaling(scaling: str | None, factor: float, original_length: int | None) -> None:
    if scaling is not None and scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope scaling must be one of {', '.join(ROPE_SCALINGS)} or None, got {scaling!r}")
    check_number("rope scaling factor", factor, min=1.0, noun="a number", hint="the new length over the trained one")
    if scaling in ("yarn", "llama3") and original_length is None:
        raise ValueError(f"rope scaling {scaling!r} needs original_length, the length the model was trained on")
    if original_length is not None:
        check_positive_int("original_length", original_length)


def _yarn(inv_freq: torch.Tensor, dim: int, base: float, factor: float, original_length: int) -> torch.Tensor:
    """YaRN's "NTK-by-parts": keep fast frequencies, interpolate slow ones, ramp linearly between."""

    def dim_for(rotations: float) -> float:  # the dimension whose frequency turns `rotations` times
        return dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(dim_for(YARN_BETA_FAST)), 0), float(min(math.ceil(dim_for(YARN_BETA_SLOW)), dim - 1))
    if low == high:
        high += 0.001  # no division by zero (as transformers)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 0: keep, 1: interpolate
    return inv_freq * (1 - ramp) + inv_freq / factor * ramp


def _llama3(inv_freq: torch.Tensor, factor: float, original_length: int) -> torch.Tensor:
    """Llama 3.1: keep short wavelengths, divide long ones by ``factor``, interpolate smoothly between."""
    wavelen = 2 * math.pi / inv_freq
    low_wavelen = original_length / LLAMA3_LOW_FREQ_FACTOR  # longer than this: divided by factor
    high_wavelen = original_length / LLAMA3_HIGH_FREQ_FACTOR  # shorter than this: kept
    smooth = (original_length / wavelen - LLAMA3_LOW_FREQ_FACTOR) / (LLAMA3_HIGH_FREQ_FACTOR - LLAMA3_LOW_FREQ_FACTOR)
    between = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    return torch.where((wavelen >= high_wavelen) & (wavelen <= low_wavelen), between, out)


class RotaryEmbedding(AttentionPositional):
    """Rotates queries and keys by their positions (interleaved pairs), all or the first part of each head.

    Args:
        head_dim: the width of one attention head (even).
        base: the frequency base (10,000 in the paper).
        scaling: None, ``"linear"``, ``"ntk"``, ``"yarn"`` or ``"llama3"`` (see the module docstring).
        factor: how many times the trained length to cover (>= 1; 1 means no scaling).
        original_length: the trained length (needed by ``yarn`` and ``llama3``).
        fraction: the share of each head's dimensions that is rotated (partial RoPE; 1 = all).

    Shapes:
        x (B, H, T, head_dim), position_ids (T,) or (B, T) integer -> (B, H, T, head_dim)
    """

    inv_freq: torch.Tensor  # (rotary_dim/2,) float64 buffer

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        scaling: str | None = None,
        factor: float = 1.0,
        original_length: int | None = None,
        fraction: float = 1.0,
    ) -> None:
        super().__init__()
        check_positive_int("head_dim", head_dim)
        self.rotary_dim = rotary_dim(head_dim, fraction)
        if not base > 1:
            raise ValueError(f"rope base must be > 1, got {base!r}")
        self.head_dim, self.base, self.fraction = head_dim, float(base), float(fraction)
        self.register_buffer("inv_freq", torch.empty(self.rotary_dim // 2, dtype=torch.float64), persistent=False)
        self.set_scaling(scaling, factor, original_length=original_length)

    @classmethod
    def from_options(cls, options: RopeOptions, shape: ModelShape) -> RotaryEmbedding:
        """The ``rope`` scheme's builder: scalings start from the model's ``context_length``."""
        return cls(
            shape.head_dim,
            base=options.base,
            scaling=options.scaling,
            factor=options.factor,
            original_length=shape.context_length,
            fraction=options.fraction,
        )

    def set_scaling(self, scaling: str | None, factor: float = 1.0, *, original_length: int | None = None) -> None:
        """Switch the long-context scaling in place (e.g. to evaluate past the trained length)."""
        inv_freq = rope_inv_freq(
            self.rotary_dim, base=self.base, scaling=scaling, factor=factor, original_length=original_length
        )
        self.inv_freq.copy_(inv_freq.to(self.inv_freq.device))
        self.scaling, self.factor, self.original_length = scaling, float(factor), original_length
        self.attention_factor = rope_attention_factor(scaling, factor)

    def cos_sin(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of every angle (times YaRN's temperature): (T, r/2) or (B, 1, T, r/2), ready to broadcast over heads."""
        angles = position_ids.to(torch.float64).unsqueeze(-1) * self.inv_freq  # (*,T,1) * (r/2,) -> (*,T,r/2)
        if angles.dim() == 3:
            angles = angles.unsqueeze(1)  # (B,T,r/2) -> (B,1,T,r/2): the same positions for every head
        m = self.attention_factor
        return (angles.cos() * m).to(dtype), (angles.sin() * m).to(dtype)

    def _rotate_part(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = self.rotary_dim
        if r == self.head_dim:
            return apply_rotary(x, cos, sin)
        return torch.cat((apply_rotary(x[..., :r], cos, sin), x[..., r:]), dim=-1)  # (...,T,r) + (...,T,d-r)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(position_ids, x.dtype)
        return self._rotate_part(x, cos, sin)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin(position_ids, q.dtype)  # computed once for both
        return self._rotate_part(q, cos, sin), self._rotate_part(k, cos, sin)

    def extra_repr(self) -> str:
        s = f"head_dim={self.head_dim}, base={self.base:g}, layout=interleaved"
        s += f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return s + (f", scaling={self.scaling}, factor={self.factor:g}" if self.scaling else "")

    @classmethod
    def pictures(cls, modules: Sequence[AttentionPositional], *, length: int) -> list[PositionPicture]:
        """Its rotation frequencies ``theta_i``, and the cosine similarity between a vector rotated to position
        ``m`` and the same vector at position 0, by the module's own rotation (``mean_i cos(m theta_i)``)."""
        rope = cast(RotaryEmbedding, modules[0])  # the model's modules of this class
        inv_freq = rope.inv_freq.double()  # (r/2,)
        pairs = tuple(float(i) for i in range(inv_freq.shape[0]))
        freq = PositionPicture(
            "RoPE: rotation frequency of each pair of head dimensions",
            "pair i of the head dimensions",
            "theta_i (radians per position)",
            (Curve("theta_i", pairs, tuple(inv_freq.tolist())),),
            log_y=True,
        )
        x = torch.ones(1, 1, length, rope.head_dim)  # (1,1,T,d): the same vector at every position
        with torch.no_grad():
            rotated = rope(x, torch.arange(length))[0, 0].double()  # (T,d), rotated by the module itself
        sim = rotated @ rotated[0] / (rotated.norm(dim=1) * rotated[0].norm())  # (T,)
        decay = PositionPicture(
            "RoPE: cosine similarity of a vector rotated to position m with itself at position 0",
            "distance m (positions)",
            "cosine similarity",
            (Curve("all pairs equal", tuple(float(m) for m in range(length)), tuple(sim.tolist())),),
        )
        return [freq, decay]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair ``(x[2i], x[2i+1])`` by the angle whose cos and sin are given.

    Shapes:
        x (..., T, d), cos and sin broadcastable to (..., T, d/2) -> (..., T, d)
    """
    pairs = x.unflatten(-1, (-1, 2))  # (...,T,d) -> (...,T,d/2,2)
    x0, x1 = pairs[..., 0], pairs[..., 1]  # (...,T,d/2) each
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # (...,T,d/2,2)
    return out.flatten(-2)  # (...,T,d)
