"""How evenly an embedding table fills its space: mean cosine, top principal components, IsoScore.

An isotropic table uses every direction alike: pairwise cosines average 0, no principal component
carries much more variance than another, and IsoScore is 1. Trained token tables are known to be
anisotropic (Ethayarajh 2019; Gao et al. 2019, "representation degeneration"): their rows share a
common direction, which shows as a mean cosine well above 0 and a large first principal component.

Three numbers per set of rows (torch only, float64):

* ``mean_cosine``: the mean cosine similarity over all pairs of distinct rows. It is computed
  exactly, not from sampled pairs: with unit rows ``u_i``, ``sum_{i != j} u_i.u_j = |sum_i u_i|^2 - n``,
  so the mean costs one pass over the rows (O(n D)) instead of n^2 products.
* ``top_pc_share``: the share of the total variance carried by the first principal component, and
  ``top10_pc_share`` by the first ten (all of them for D <= 10): eigenvalues of the covariance.
* ``isoscore``: IsoScore (Rudman et al. 2022, "IsoScore: Measuring the Uniformity of Embedding
  Space Utilization", algorithm 1) from the same eigenvalues: the variance vector in the principal
  basis, scaled to norm sqrt(D), its distance to (1, ..., 1) normalised to the isotropy defect
  ``delta`` in [0, 1], then ``k = (D - delta^2 (D - sqrt(D)))^2 / D`` dimensions used out of D,
  rescaled as ``(k - 1) / (D - 1)``: 1 for an isotropic cloud, 0 when all variance lies on one line.
  The ``isoscore`` package (dev extra) computes the same number; the tests compare the two.

Training logs these numbers at every checkpoint (``log.json``, ``"isotropy"``), so a run shows how
they change; ``tokembed inspect CKPT isotropy`` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TypeAlias

import numpy as np
import torch

__all__ = ["Isotropy", "isoscore", "isotropy", "isotropy_of_table"]


# (n, D) rows: a tensor, an array, or nested lists (anything torch.as_tensor reads)
Rows: TypeAlias = "torch.Tensor | np.ndarray | Sequence[Sequence[float]]"


@dataclass(frozen=True)
class Isotropy:
    """The isotropy of a set of rows (see the module docstring).

    Attributes:
        rows: how many rows were measured.
        mean_cosine: mean cosine similarity over all pairs of distinct rows.
        top_pc_share: share of the variance on the first principal component.
        top10_pc_share: share of the variance on the first ten principal components.
        isoscore: IsoScore, in [0, 1].
    """

    rows: int
    mean_cosine: float
    top_pc_share: float
    top10_pc_share: float
    isoscore: float

    def to_dict(self) -> dict:
        return asdict(self)


def _variances(x: torch.Tensor) -> torch.Tensor:
    """(n, D) -> (D,) the covariance's eigenvalues, largest first (the variance along each principal axis)."""
    centred = x - x.mean(dim=0)  # (n,D)
    cov = centred.T @ centred / max(x.shape[0] - 1, 1)  # (D,D), as torch.cov
    return torch.linalg.eigvalsh(cov).clamp_min(0.0).flip(0)  # (D,) ascending -> descending


def isoscore_of_variances(variances: torch.Tensor) -> float:
    """IsoScore from the (D,) variances along the principal axes (Rudman et al. 2022, algorithm 1, steps 4-7)."""
    D = variances.shape[0]
    if D == 1:
        return 1.0  # one dimension is trivially used evenly
    total = float(variances.norm())
    if total == 0.0:
        return 0.0  # every row the same point: no direction is used
    scaled = variances * math.sqrt(D) / total  # (D,), norm sqrt(D): (1, ..., 1) for an isotropic cloud
    defect = float((scaled - 1.0).norm()) / math.sqrt(2.0 * (D - math.sqrt(D)))  # in [0, 1]
    k = (D - defect**2 * (D - math.sqrt(D))) ** 2 / D  # dimensions used, in [1, D]
    return (k - 1.0) / (D - 1.0)


def _mean_cosine(x: torch.Tensor) -> float:
    norms = x.norm(dim=1, keepdim=True)
    unit = x[norms[:, 0] > 0] / norms[norms[:, 0] > 0]  # (m,D): zero rows have no direction
    m = unit.shape[0]
    if m < 2:
        raise ValueError(f"the mean pairwise cosine needs at least 2 non-zero rows, got {m}")
    total = unit.sum(dim=0)  # (D,)
    return float((total @ total - m) / (m * (m - 1)))  # sum over i != j of u_i.u_j, over m(m-1) ordered pairs


def isoscore(vectors: Rows) -> float:
    """IsoScore of (n, D) rows: 1 when their variance is spread evenly over every direction, 0 on one line."""
    x = _as_rows(vectors)
    return isoscore_of_variances(_variances(x))


def isotropy(vectors: Rows) -> Isotropy:
    """Mean pairwise cosine, variance share of the top principal components, and IsoScore of (n, D) rows."""
    x = _as_rows(vectors)
    var = _variances(x)
    total = float(var.sum())
    share = (lambda k: float(var[:k].sum()) / total) if total > 0 else (lambda k: 1.0)
    return Isotropy(x.shape[0], _mean_cosine(x), share(1), share(10), isoscore_of_variances(var))


def _as_rows(vectors: Rows) -> torch.Tensor:
    x = torch.as_tensor(vectors)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise ValueError(f"isotropy needs (rows, dim) vectors with at least 2 rows, got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise TypeError(f"isotropy needs floating-point vectors, got dtype {x.dtype}")
    return x.detach().to("cpu", torch.float64)


def isotropy_of_table(tokens: torch.Tensor, counts: torch.Tensor | None = None, *, min_count: int = 1) -> dict:
    """``{"all": Isotropy, "trained": Isotropy | None}`` of a (V, D) token table.

    "trained" measures only the rows read at least ``min_count`` times according to the (V,) ``counts``
    (None without counts, or when fewer than 2 rows qualify).
    """
    out = {"all": isotropy(tokens), "trained": None}
    if counts is not None:
        keep = counts[: tokens.shape[0]] >= min_count  # (V,)
        if int(keep.sum()) >= 2:
            out["trained"] = isotropy(tokens[keep])
    return out
