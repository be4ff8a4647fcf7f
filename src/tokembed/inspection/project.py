"""Two-dimensional projections of embedding rows for pictures: PCA, and t-SNE from scikit-learn."""

from __future__ import annotations

import numpy as np
import torch

from tokembed.inspection.table import as_table_tensor

__all__ = ["PROJECTIONS", "project_2d"]


PROJECTIONS = ("pca", "tsne")


def project_2d(vectors, *, method: str = "pca", seed: int = 0, progress: bool = False) -> np.ndarray:
    """(n, D) vectors -> (n, 2) coordinates for a picture.

    Args:
        vectors: (n, D) rows to place.
        method: ``"pca"``: the projection on the two directions of largest variance (SVD of the
            centred rows; sign fixed so that each axis' largest loading is positive).
            ``"tsne"``: scikit-learn's t-SNE (extra ``tsne``), which keeps near neighbours near.
        seed: t-SNE's random state.
        progress: show that t-SNE is running (scikit-learn reports no steps: one bar, done when it is).
    """
    x = as_table_tensor("the vectors to project", vectors).double()
    if method not in PROJECTIONS:
        raise ValueError(f"unknown projection {method!r}; choose one of {', '.join(PROJECTIONS)}")
    if x.shape[0] < 3:
        raise ValueError(f"a 2-D projection needs at least 3 vectors, got {x.shape[0]}")
    if method == "pca":
        centred = x - x.mean(dim=0)  # (n,D)
        _, _, vh = torch.linalg.svd(centred, full_matrices=False)  # vh (min(n,D), D): principal directions
        axes = vh[:2]  # (2,D) (a 1-wide table has only one)
        signs = torch.sign(axes.gather(1, axes.abs().argmax(dim=1, keepdim=True)))  # (2,1)
        coords = centred @ (axes * signs).T  # (n,D) @ (D,2) -> (n,2)
        if coords.shape[1] == 1:
            coords = torch.cat([coords, torch.zeros_like(coords)], dim=1)
        return coords.numpy()
    try:
        from sklearn.manifold import TSNE
    except ImportError as e:
        raise ModuleNotFoundError(
            "t-SNE needs scikit-learn, which is not installed; install the extra with `pip install 'tokembed[tsne]'` or use method='pca'",
            name="sklearn",
        ) from e
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    perplexity = float(min(30.0, (x.shape[0] - 1) / 3))
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed)
    # One OpenMP thread: beside torch's own OpenMP runtime, sklearn's threads spin against it
    # (40 points took 33 s with the default threads on a busy 2-core machine, 0.27 s with one).
    from tqdm.auto import tqdm

    with (
        threadpool_limits(limits=1, user_api="openmp"),
        tqdm(total=1, desc=f"t-SNE of {x.shape[0]} points", disable=not progress, leave=False) as bar,
    ):
        xy = tsne.fit_transform(x.numpy()).astype(np.float64)
        bar.update(1)
    return xy
