"""The positions experiment's picture: loss against evaluation length (the loss curve is `tokembed._plot.plot_loss`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection
from pathlib import Path

from tokembed._plot import new_figure, save_figure

__all__ = ["plot_positions"]


def plot_positions(doc: dict, path: Path, *, dashed: Collection[str] = ()) -> bool:
    """Perplexity against evaluation length, one line per scheme (log-log), like Press et al.'s figure 1.

    ``dashed`` names the lines to draw dashed (variants of a scheme, such as RoPE with scaling).
    """

    try:
        fig = new_figure(7, 4.5)
    except ModuleNotFoundError:
        warnings.warn("matplotlib is not installed: no positions.png (pip install 'tokembed[plot]')", stacklevel=2)
        return False
    ax = fig.add_subplot()
    for name, rows in doc["results"].items():
        pts = [(r["length"], r["perplexity"]) for r in rows if r["loss"] is not None and math.isfinite(r["perplexity"])]
        if pts:
            style = "--" if name in dashed else "-"
            ax.plot(*zip(*pts), style, marker="o", ms=4, label=name)
    ax.axvline(doc["config"]["train_length"], color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("validation perplexity")
    ax.set_title(f"Train short ({doc['config']['train_length']} tokens), test long")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save_figure(fig, path, overwrite=True)
    return True
