"""The positions experiment's picture: loss against evaluation length (the loss curve is `tokembed._plot.plot_loss`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from pathlib import Path

from tokembed._plot import new_figure, save_figure

__all__ = ["plot_positions"]


def plot_positions(
    doc: dict, path: Path, *, evaluation: str | Collection[str] = "nonoverlapping", dashed: Collection[str] = ()
) -> bool:
    """Perplexity against evaluation length, one line per scheme (log-log), like Press et al.'s figure 1.

    ``evaluation`` picks the results to draw (``nonoverlapping``, ``sliding``, or both: one panel each);
    ``dashed`` names the lines to draw dashed (variants of a scheme, such as RoPE with scaling).
    """
    evaluations = [evaluation] if isinstance(evaluation, str) else list(evaluation)
    try:
        fig = new_figure(7 * len(evaluations), 4.5)
    except ModuleNotFoundError:
        warnings.warn("matplotlib is not installed: no positions.png (pip install 'tokembed[plot]')", stacklevel=2)
        return False
    axes = fig.subplots(1, len(evaluations), squeeze=False)[0]
    for ax, kind in zip(axes, evaluations):
        _draw_panel(ax, doc, kind, dashed)
    save_figure(fig, path, overwrite=True)
    return True


def _draw_panel(ax, doc: dict, evaluation: str, dashed: Collection[str]) -> None:
    from matplotlib import colormaps  # loaded already: new_figure imported matplotlib

    tab20 = colormaps["tab20"]
    ax.set_prop_cycle(color=[tab20(i) for i in (*range(0, 20, 2), *range(1, 20, 2))])  # 20 distinct lines
    for name, by_eval in doc["results"].items():
        rows = by_eval[evaluation]
        pts = [(r["length"], r["perplexity"]) for r in rows if r["loss"] is not None and math.isfinite(r["perplexity"])]
        if pts:
            ax.plot(*zip(*pts), "--" if name in dashed else "-", marker="o", ms=4, label=name)
    ax.axvline(doc["config"]["train_length"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("validation perplexity")
    ax.set_title(f"Train short ({doc['config']['train_length']} tokens), test long: {evaluation}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
