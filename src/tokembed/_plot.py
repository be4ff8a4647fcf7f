"""The one entry point to matplotlib: figures without pyplot, saved atomically, and the loss curve of a run
(which a checkpoint draws beside its ``log.json``).

matplotlib is imported inside each function (the optional extra ``plot``), never by ``import tokembed``.
Figures are built with ``matplotlib.figure.Figure`` directly: no GUI backend, no global state.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

from tokembed._atomic import atomic_create

__all__ = ["figure_png", "new_figure", "plot_loss", "save_figure", "write_loss_png"]


def new_figure(width: float = 7.0, height: float = 5.0):
    """An empty figure (no pyplot, no GUI backend); raises naming the extra to install without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ModuleNotFoundError(
            "drawing needs matplotlib, which is not installed; install the extra with `pip install 'tokembed[plot]'`",
            name="matplotlib",
        ) from e
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def figure_png(fig) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def save_figure(fig, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write a figure (format from the suffix: .png, .svg, .pdf), atomically."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    with atomic_create(path, "wb", overwrite=overwrite) as f:
        f.write(buf.getvalue())
    return path


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
