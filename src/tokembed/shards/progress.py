"""The progress bar of `tokembed prepare`: input bytes done, documents, tokens per second."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from tokembed.shards.sources import InputFile

__all__ = ["Progress"]


class Progress:
    """Counts what a run has done and shows it on a tqdm bar (or nowhere, when ``bar`` is None).

    Attributes:
        documents: documents tokenized so far by this run.
        tokens: tokens tokenized so far by this run.
    """

    def __init__(self, bar=None) -> None:
        self.bar = bar
        self.documents = 0
        self.tokens = 0
        self.started = time.perf_counter()

    @classmethod
    def start(cls, files: Sequence[InputFile], show: bool | None) -> Progress:
        """A bar over the inputs' bytes when ``show`` (default: stderr is a terminal), else a silent counter."""
        if show is None:
            show = sys.stderr.isatty()
        if not show:
            return cls()
        from tqdm import tqdm

        sizes = [f.size for f in files if f.size is not None]
        total = sum(sizes) if len(sizes) == len(files) else None
        old, tqdm.monitor_interval = tqdm.monitor_interval, 0  # no monitor thread: workers may be forked later
        try:
            bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc="prepare",
                dynamic_ncols=True,
                file=sys.stderr,
            )
        finally:
            tqdm.monitor_interval = old
        return cls(bar)

    def skipped(self, n_bytes: int) -> None:
        """Count ``n_bytes`` of input as done without tokenizing (finished earlier, or another rank's)."""
        if self.bar is not None:
            self.bar.update(n_bytes)

    def finished(self, n_bytes: int, *, documents: int, tokens: int) -> None:
        """Count a unit tokenized by this run: ``n_bytes`` of input that gave ``documents`` and ``tokens``."""
        self.documents += documents
        self.tokens += tokens
        if self.bar is not None:
            self.bar.update(n_bytes)
            rate = self.tokens / max(1e-9, time.perf_counter() - self.started)
            self.bar.set_postfix_str(f"{self.documents:,} docs, {rate:,.0f} tok/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
