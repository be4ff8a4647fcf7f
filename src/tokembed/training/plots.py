"""Pictures of training runs: the loss curve of a run, and the positions experiment's loss against length."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Collection
from pathlib import Path

from tokembed._plot import new_figure, save_figure

__all__ = ["plot_loss", "plot_positions", "write_loss_png"]


def plot_loss(log: dict):
    """The training (and validation) loss against the step, from a checkpoint's ``log.json``."""
    train = log.get("train") or []
    val = log.get("val") or []
    if not train and not val:
        raise ValueError("the training log holds no loss values; train for at least one logged step")
    fig = new_figure(7, 4)
    ax = fig.add_subplot()
    if train:
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train", lw=1)
    if val:
        ax.plot([r["step"] for r in val], [r["loss"] for r in val], "o-", label="validation", ms=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title("Training loss")
    ax.legend(loc="best")
    return fig


def write_loss_png(log: dict, path: str | os.PathLike) -> bool:
    """Draw training (and validation) loss against step into a PNG; False (with a warning) without matplotlib."""
    try:
        fig = plot_loss(log)
    except ModuleNotFoundError:
        warnings.warn("matplotlib is not installed: no loss.png (pip install 'tokembed[plot]')", stacklevel=2)
        return False
    except ValueError:  # nothing logged yet
        return False
    save_figure(fig, path, overwrite=True)
    return True


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
