"""Pictures of an embedding table (matplotlib, the optional extra ``plot``).

matplotlib is imported inside each function, never by ``import tokembed``. Figures are built
with ``matplotlib.figure.Figure`` directly (no pyplot): no GUI backend, no global state, safe to
call from any thread. Each function returns the figure; ``tokembed._plot.save_figure`` writes it,
``figure_png`` gives the PNG bytes (the HTML report embeds them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tokembed._plot import new_figure
from tokembed.inspection.project import project_2d
from tokembed.inspection.table import EmbeddingTable

__all__ = [
    "plot_norm_vs_frequency",
    "plot_position_distance",
    "plot_position_similarity",
    "plot_projection",
]


def _display(label: str) -> str:
    # Visible spaces, and no accidental mathtext: matplotlib reads text between two "$" as TeX.
    shown = label.strip() or repr(label)
    return shown.replace("$", r"\$")


def plot_projection(
    table: EmbeddingTable,
    *,
    ids: Sequence[int] | None = None,
    counts: torch.Tensor | None = None,
    method: str = "pca",
    n_points: int = 2000,
    label_top: int = 40,
    seed: int = 0,
    progress: bool = False,
):
    """A 2-D map of token vectors, the most frequent tokens labelled (``progress``: a bar while t-SNE runs).

    Args:
        table: the embedding table.
        ids: the tokens to place; default: the ``n_points`` most frequent in ``counts`` (tokens
            that occur in the corpus only), or the first ``n_points`` ids without counts (GPT-2's
            low ids are bytes and early, frequent merges).
        counts: (V,) token frequencies in the corpus (``tokembed.token_counts``); they size the
            points and choose the labels.
        method: ``"pca"`` or ``"tsne"`` (needs scikit-learn).
        n_points: how many tokens when ``ids`` is not given.
        label_top: label up to this many tokens, the most frequent first, skipping a token whose
            label would overlap one already placed.
        seed: t-SNE's random state.
    """
    if ids is None:
        n = min(n_points, table.vocab_size)
        if counts is not None:
            c = counts[: table.vocab_size]
            seen = int((c > 0).sum())
            # only tokens of the corpus: the never-seen rows keep their random start and would form a blob
            ids = torch.argsort(c, descending=True, stable=True)[: min(n, seen) if seen >= 3 else n].tolist()
        else:
            ids = list(range(n))
    ids = [table.check_id(i) for i in ids]
    xy = project_2d(table.subset(ids), method=method, seed=seed, progress=progress)  # (n,2)
    fig = new_figure(8, 6.5)
    ax = fig.add_subplot()
    if counts is not None:
        c = counts[ids].double().numpy()
        sizes = 4 + 40 * np.log1p(c) / max(np.log1p(c).max(), 1e-9)
        ax.scatter(xy[:, 0], xy[:, 1], s=sizes, alpha=0.5, c=np.log1p(c), cmap="viridis", linewidths=0)
        order = np.argsort(-c, kind="stable")
    else:
        ax.scatter(xy[:, 0], xy[:, 1], s=6, alpha=0.5, linewidths=0)
        order = np.arange(len(ids))
    labelled = _spread_labels(xy, order, label_top)
    for k in labelled:
        ax.annotate(
            _display(table.label(ids[k])),
            (xy[k, 0], xy[k, 1]),
            fontsize=8,
            alpha=0.9,
            xytext=(2, 2),
            textcoords="offset points",
        )
    name = "PCA" if method == "pca" else "t-SNE"
    what = "most frequent" if counts is not None else "first"
    ax.set_title(f"{name} of {len(ids)} token embeddings ({what} tokens; {len(labelled)} labelled)")
    ax.set_xlabel(f"{name} 1")
    ax.set_ylabel(f"{name} 2")
    return fig


def _spread_labels(xy: np.ndarray, order: np.ndarray, n: int, *, dx: float = 0.06, dy: float = 0.025) -> list[int]:
    """Up to ``n`` points to label, in ``order`` (most frequent first), skipping any point whose label
    would sit on one already placed (closer than ``dx``, ``dy`` of the axes' spans)."""
    span = np.maximum(xy.max(axis=0) - xy.min(axis=0), 1e-12)  # (2,)
    unit = (xy - xy.min(axis=0)) / span  # (n,2) in [0,1]
    placed: list[int] = []
    for k in order:
        if len(placed) >= n:
            break
        if all(abs(unit[k, 0] - unit[j, 0]) >= dx or abs(unit[k, 1] - unit[j, 1]) >= dy for j in placed):
            placed.append(int(k))
    return placed


def plot_position_similarity(table: EmbeddingTable, *, max_positions: int | None = None):
    """Heatmap of the cosine similarity between position vectors (P, P)."""
    sim = table.position_similarity()
    if max_positions is not None:
        sim = sim[:max_positions, :max_positions]
    fig = new_figure(6.5, 5.5)
    ax = fig.add_subplot()
    im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest", origin="upper")
    fig.colorbar(im, ax=ax, label="cosine similarity")
    ax.set_title(f"Cosine similarity between {table.positional} positions")
    ax.set_xlabel("position")
    ax.set_ylabel("position")
    return fig


def plot_position_distance(table: EmbeddingTable):
    """Each position's mean Euclidean distance to its neighbouring positions, and its norm."""
    dist = table.position_step_distance().numpy()
    norms = table.positions.norm(dim=1).numpy() if table.positions is not None else None
    fig = new_figure(7, 3.8)
    ax = fig.add_subplot()
    ax.plot(dist, label="mean distance to positions p-1, p+1")
    if norms is not None:
        ax.plot(norms, label="norm of the position vector", alpha=0.7)
    ax.set_xlabel("position")
    ax.set_title(f"How far each {table.positional} position vector is from its neighbours")
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_norm_vs_frequency(table: EmbeddingTable, counts: torch.Tensor):
    """Embedding norm against corpus frequency (log scale), one point per token seen."""
    counts = counts[: table.vocab_size]
    seen = counts > 0
    if not bool(seen.any()):
        raise ValueError("no token of the table occurs in the corpus; was it tokenized with another tokenizer?")
    fig = new_figure(7, 4.5)
    ax = fig.add_subplot()
    ax.scatter(
        counts[seen].double().numpy(),
        table.norms[: counts.shape[0]][seen].numpy(),
        s=6,
        alpha=0.5,
        linewidths=0,
        label="tokens in the corpus",
    )
    unseen_norms = table.norms[: counts.shape[0]][~seen]
    if unseen_norms.numel():
        ax.axhline(
            float(unseen_norms.mean()),
            color="grey",
            ls="--",
            lw=1,
            label=f"mean norm of the {unseen_norms.numel()} unseen tokens",
        )
    ax.set_xscale("log")
    ax.set_xlabel("occurrences in the corpus")
    ax.set_ylabel("embedding norm")
    ax.set_title("Embedding norm against token frequency")
    ax.legend(loc="best", fontsize=8)
    return fig
