"""The one entry point to matplotlib: figures without pyplot, saved atomically.

matplotlib is imported inside each function (the optional extra ``plot``), never by ``import tokembed``.
Figures are built with ``matplotlib.figure.Figure`` directly: no GUI backend, no global state.
"""

from __future__ import annotations

import io
from pathlib import Path

from tokembed._atomic import atomic_create

__all__ = ["figure_png", "new_figure", "save_figure"]


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


def save_figure(fig, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write a figure (format from the suffix: .png, .svg, .pdf), atomically."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    with atomic_create(path, "wb", overwrite=overwrite) as f:
        f.write(buf.getvalue())
    return path
