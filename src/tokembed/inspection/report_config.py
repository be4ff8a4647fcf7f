"""What goes into a `tokembed report` page (torch-free: the CLI reads its defaults when it builds its parser)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokembed._checks import check_int

__all__ = ["ReportConfig"]


@dataclass(frozen=True)
class ReportConfig:
    """What goes into a report.

    Args:
        corpus: count tokens in this text file, folder of ``*.txt`` or shard folder instead of
            using the counts the table records.
        min_count: tokens read fewer times are under-trained (None: the table's, 10 by default).
        words: words whose neighbours are listed (as written: mind GPT-2's leading space);
            default: the most frequent words by the counts, else a fixed list.
        topn: neighbours per word.
        n_points: tokens placed in the projections.
        label_top: tokens labelled in the projections.
        tsne: also draw a t-SNE map: True, False, or None for "when scikit-learn is installed".
        text: the text whose tokens are tabled; default: the start of the run's training data.
        max_positions: positions (or distances) shown in the position pictures (all if None).
    """

    corpus: str | Path | None = None
    min_count: int | None = None
    words: Sequence[str] | None = None
    topn: int = 8
    n_points: int = 1500
    label_top: int = 40
    tsne: bool | None = None
    text: str | None = None
    max_positions: int | None = 256

    def __post_init__(self) -> None:
        for name in ("topn", "n_points", "label_top"):
            check_int(name, getattr(self, name), min=1, noun="an integer")
        if self.n_points < 3:
            raise ValueError(f"n_points must be >= 3 for a projection, got {self.n_points}")
        if self.max_positions is not None and (not isinstance(self.max_positions, int) or self.max_positions < 2):
            raise ValueError(f"max_positions must be an integer >= 2 or None, got {self.max_positions!r}")
        if self.min_count is not None:
            from tokembed.training.counts import check_min_count

            check_min_count(self.min_count)
