"""Pictures of an embedding table (matplotlib, the optional extra ``plot``).

matplotlib is imported inside each function, never by ``import tokembed``. Figures are built
with ``matplotlib.figure.Figure`` directly (no pyplot): no GUI backend, no global state, safe to
call from any thread. Each function returns the figure; `save_figure` writes it (atomically), and
``tokembed._plot.figure_png`` gives the PNG bytes (the HTML report embeds them). `plot_loss` (a run's loss curve)
and `save_figure` live in ``tokembed._plot``, which a checkpoint also draws with; this module is their public place.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from tokembed._plot import new_figure, plot_loss, save_figure
from tokembed.inspection.project import project_2d
from tokembed.inspection.table import EmbeddingTable

__all__ = [
    "PICTURES",
    "plot_isotropy",
    "plot_loss",
    "plot_norm_vs_frequency",
    "plot_position_distance",
    "plot_position_picture",
    "plot_position_similarity",
    "plot_projection",
    "plot_table",
    "save_figure",
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
    """A 2-D map of token vectors, the most frequent tokens labelled, under-trained ones marked.

    Args:
        table: the embedding table.
        ids: the tokens to place; default: the ``n_points`` most frequent by the counts (tokens
            read at least once), or, without counts, a random sample of ``n_points`` rows (seeded),
            which the title says.
        counts: (V,) token counts; default: the table's own (``table.counts``). They colour and
            size the points (colour bar), choose the labels, and mark with a red ring the tokens
            read fewer than ``table.min_count`` times (legend).
        method: ``"pca"`` or ``"tsne"`` (needs scikit-learn).
        n_points: how many tokens when ``ids`` is not given.
        label_top: label up to this many tokens, the most frequent first, skipping a token whose
            label would overlap one already placed.
        seed: t-SNE's random state and the sample's seed.
        progress: a bar while t-SNE runs.
    """
    counts = table.counts if counts is None else counts[: table.vocab_size]
    ids, chosen = _projection_ids(table, ids, counts, n_points, seed)
    xy = project_2d(table.subset(ids), method=method, seed=seed, progress=progress)  # (n,2)
    fig = new_figure(8, 6.8)
    ax = fig.add_subplot()
    if counts is not None:
        order = _draw_counted(fig, ax, xy, counts[ids].numpy(), table)
    else:
        ax.scatter(xy[:, 0], xy[:, 1], s=6, alpha=0.5, linewidths=0, label="token (no counts: size and colour uniform)")
        ax.legend(loc="best", fontsize=8)
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
    ax.set_title(f"{name} of {chosen} of {table.source or 'the table'}; {len(labelled)} labelled", fontsize=10)
    ax.set_xlabel(f"{name} 1")
    ax.set_ylabel(f"{name} 2")
    return fig


def _projection_ids(table, ids, counts, n_points: int, seed: int) -> tuple[list[int], str]:
    """The ids to place and a phrase saying how they were chosen (for the title)."""
    if ids is not None:
        ids = [table.check_id(i) for i in ids]
        return ids, f"{len(ids)} chosen tokens"
    n = min(n_points, table.vocab_size)
    if counts is not None and int((counts > 0).sum()) >= 3:
        # only tokens that were read: the never-read rows all drift the same way and would form a blob
        n = min(n, int((counts > 0).sum()))
        return torch.argsort(counts, descending=True, stable=True)[:n].tolist(), f"the {n} most frequent tokens"
    g = torch.Generator().manual_seed(seed)
    sample = torch.randperm(table.vocab_size, generator=g)[:n].sort().values.tolist()
    return sample, f"{n} random tokens (no token counts: pass --corpus)"


def _draw_counted(fig, ax, xy: np.ndarray, c: np.ndarray, table: EmbeddingTable) -> np.ndarray:
    """Points coloured and sized by count (colour bar), under-trained ones ringed (legend); the label order."""
    from matplotlib.colors import LogNorm

    shown = np.maximum(c, 1)  # a log colour scale: tokens read once and never share the lowest colour
    sizes = 4 + 40 * np.log1p(c) / max(np.log1p(c).max(), 1e-9)
    points = ax.scatter(
        xy[:, 0],
        xy[:, 1],
        s=sizes,
        alpha=0.6,
        c=shown,
        cmap="viridis",
        norm=LogNorm(vmin=1, vmax=max(shown.max(), 2)),
        linewidths=0,
    )
    fig.colorbar(points, ax=ax, label=f"times read ({table.counts_source or 'given counts'})")
    rare = c < table.min_count
    if rare.any():
        ax.scatter(
            xy[rare, 0],
            xy[rare, 1],
            s=30,
            facecolors="none",
            edgecolors="red",
            linewidths=0.8,
            label=f"under-trained: read < {table.min_count} times ({int(rare.sum())})",
        )
        ax.legend(loc="best", fontsize=8)
    return np.argsort(-c, kind="stable")


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
    ax.set_title(f"Cosine similarity between {table.positional} positions: {table.source or 'the table'}", fontsize=10)
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
    ax.set_title(
        f"How far each {table.positional} position vector is from its neighbours: {table.source or 'the table'}",
        fontsize=10,
    )
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_norm_vs_frequency(table: EmbeddingTable, counts: torch.Tensor | None = None):
    """Embedding norm against how often each token was read (log scale), one point per token read.

    ``counts`` default to the table's own.
    """
    counts = (table.require_counts() if counts is None else counts)[: table.vocab_size]
    seen = counts > 0
    if not bool(seen.any()):
        raise ValueError("no token of the table occurs in the counts; were they made with another tokenizer?")
    fig = new_figure(7, 4.5)
    ax = fig.add_subplot()
    norms = table.norms[: counts.shape[0]]
    ax.scatter(
        counts[seen].double().numpy(),
        norms[seen].numpy(),
        s=6,
        alpha=0.5,
        linewidths=0,
        label=f"tokens read ({int(seen.sum()):,})",
    )
    if (~seen).any():
        ax.axhline(
            float(norms[~seen].mean()),
            color="grey",
            ls="--",
            lw=1,
            label=f"mean norm of the {int((~seen).sum()):,} tokens never read",
        )
    ax.axvline(table.min_count, color="red", ls=":", lw=1, label=f"min count {table.min_count}: under-trained below")
    ax.set_xscale("log")
    ax.set_xlabel(f"times read ({table.counts_source or 'given counts'})")
    ax.set_ylabel("embedding norm")
    ax.set_title(f"Embedding norm against token frequency: {table.source or 'the table'}", fontsize=10)
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_position_picture(picture):
    """One ``tokembed.inspection.positions.PositionPicture``: its curves, legend and title."""
    fig = new_figure(7, 4.2)
    ax = fig.add_subplot()
    for curve in picture.curves:
        ax.plot(curve.x, curve.y, label=curve.label, lw=1.2, marker="." if len(curve.x) <= 64 else None, ms=3)
    if picture.log_y:
        ax.set_yscale("log")
    ax.set_xlabel(picture.xlabel)
    ax.set_ylabel(picture.ylabel)
    ax.set_title(picture.title, fontsize=10)
    if 1 < len(picture.curves) <= 16:
        ax.legend(loc="best", fontsize=7, ncol=2 if len(picture.curves) > 8 else 1)
    return fig


def plot_isotropy(history: list[dict]):
    """Mean cosine, first-component share and IsoScore against the step, from ``log.json``'s ``"isotropy"``."""
    if not history:
        raise ValueError("the training log holds no isotropy records; train with this tokembed to record them")
    fig = new_figure(7, 4)
    ax = fig.add_subplot()
    steps = [r["step"] for r in history]
    for rows, style in (("all", "-"), ("trained", "--")):
        if all(r.get(rows) for r in history):
            for key, colour in (("mean_cosine", "C0"), ("top_pc_share", "C1"), ("isoscore", "C2")):
                ax.plot(
                    steps,
                    [r[rows][key] for r in history],
                    style,
                    color=colour,
                    marker="o",
                    ms=3,
                    label=f"{key} ({rows} rows)",
                )
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    ax.set_title("Isotropy of the token table at each checkpoint", fontsize=10)
    ax.legend(loc="best", fontsize=7)
    return fig


PICTURES = ("pca", "tsne", "positions", "norms", "loss", "isotropy")  # what `plot_table` draws, by name


def plot_table(
    table: EmbeddingTable,
    kind: str,
    *,
    run: str | Path | None = None,
    n_points: int = 2000,
    label_top: int = 40,
    progress: bool = False,
):
    """One picture of ``table``, named as ``tokembed inspect SOURCE plot KIND`` names it.

    Args:
        table: the table (with its counts, if any: projections colour by them, ``norms`` needs them).
        kind: ``"pca"`` or ``"tsne"`` (`plot_projection`), ``"positions"`` (learned or sinusoidal positions'
            similarity; for a scheme acting in attention, the last picture its trained modules give),
            ``"norms"``, ``"loss"`` or ``"isotropy"`` (from the run's ``log.json``).
        run: the checkpoint directory ``table`` came from: positions of attention schemes, loss and isotropy.
        n_points, label_top, progress: for the projections.
    """
    if kind not in PICTURES:
        raise ValueError(f"unknown picture {kind!r}; choose one of {', '.join(PICTURES)}")
    if kind in ("pca", "tsne"):
        return plot_projection(table, method=kind, n_points=n_points, label_top=label_top, progress=progress)
    if kind == "positions":
        return _positions_picture(table, run)
    if kind == "norms":
        return plot_norm_vs_frequency(table)
    log = _run_log(run, kind)
    return plot_isotropy(log.get("isotropy") or []) if kind == "isotropy" else plot_loss(log)


def _positions_picture(table: EmbeddingTable, run: str | Path | None):
    from tokembed.inspection.positions import checkpoint_position_pictures, describe_scheme, has_position_modules

    if table.positions is not None:
        return plot_position_similarity(table)
    found = has_position_modules(table.positional) and run is not None
    pictures = checkpoint_position_pictures(run) if found else []
    if not pictures:
        raise ValueError(f"nothing to draw: {describe_scheme(table.positional)}")
    return plot_position_picture(pictures[-1])  # RoPE: the similarity against distance


def _run_log(run: str | Path | None, kind: str) -> dict:
    log_file = Path(run or "") / "log.json"
    if run is None or not log_file.is_file():
        raise FileNotFoundError(
            f"{log_file} does not exist: the {kind} plot needs a checkpoint directory written by `tokembed train`"
        )
    return json.loads(log_file.read_text(encoding="utf-8"))
