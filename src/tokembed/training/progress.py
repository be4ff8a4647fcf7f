"""How training and evaluation report progress: a bar on a terminal, plain lines in a log file, or nothing.

A progress bar redraws itself with carriage returns: right on a terminal, a flood in a log file (nohup,
Slurm, ``kubectl logs``), where nothing would otherwise appear until the run ends. So:

    Progress.resolve(True)   -> "bar" when stderr is a terminal (or a Jupyter kernel), else "lines"
    Progress.resolve(False)  -> "off"

In ``lines`` mode a counter prints a plain line every ``Every`` (N steps, or N seconds: 30 s by default)
and whenever its owner forces one (training: the first step and the last), each flushed at once::

    train: step 40/300 (13%) | loss 5.1234 | 12,345 tok/s | elapsed 1m02s | ETA 6m40s

Everything goes to stderr, as the bars do: stdout keeps the results (a table, ``--json``).
"""

from __future__ import annotations

import math
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["MODES", "Counter", "Every", "Progress", "duration"]

MODES = ("bar", "lines", "off")


@dataclass(frozen=True)
class Every:
    """How often a counter prints a line in ``lines`` mode: every ``steps`` updates or every ``seconds``."""

    steps: int | None = None
    seconds: float | None = 30.0

    def __post_init__(self) -> None:
        if (self.steps is None) == (self.seconds is None):
            raise ValueError(f"give steps or seconds, not both or neither (got {self.steps!r} and {self.seconds!r})")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"log every: steps must be an integer >= 1, got {self.steps!r}")
        if self.seconds is not None and not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"log every: seconds must be > 0, got {self.seconds!r}")

    @classmethod
    def parse(cls, text: str | int | float | Every) -> Every:
        """``50`` (steps), ``"30s"``, ``"2m"``, ``"1h"`` (seconds)."""
        if isinstance(text, Every):
            return text
        if isinstance(text, int) and not isinstance(text, bool):
            return cls(steps=text, seconds=None)
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
        value = float(m.group(1)) if m else 0.0
        if not m or value <= 0 or (not m.group(2) and not value.is_integer()):
            raise ValueError(f"expected a number of steps (50) or of seconds (30s, 2m, 1h), got {text!r}")
        if not m.group(2):
            return cls(steps=int(value), seconds=None)
        return cls(steps=None, seconds=value * {"s": 1, "m": 60, "h": 3600}[m.group(2)])

    def due(self, done: int, since_line: float) -> bool:
        if self.steps is not None:
            return done % self.steps == 0
        return since_line >= self.seconds  # type: ignore[operator]


def duration(seconds: float) -> str:
    """``7s``, ``2m05s``, ``1h02m03s``."""
    s = int(round(seconds))
    h, m, s = s // 3600, s % 3600 // 60, s % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def _interactive(stream: TextIO) -> bool:
    """A person is watching: a terminal, or a Jupyter kernel (whose streams are not terminals)."""
    if getattr(stream, "isatty", lambda: False)():
        return True
    return type(stream).__module__.startswith("ipykernel")


class Progress:
    """Where progress goes: ``mode`` is ``bar``, ``lines`` or ``off``; lines follow ``every``."""

    def __init__(self, mode: str = "lines", *, every: Every | str | int = "30s", stream: TextIO | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"progress must be one of {', '.join(MODES)} (or True/False), got {mode!r}")
        self.mode, self.every = mode, Every.parse(every)
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr  # looked up when used: pytest and notebooks swap sys.stderr

    @classmethod
    def resolve(cls, progress: bool | str | Progress | None, *, every: Every | str | int = "30s") -> Progress:
        """``True``/``"auto"``: a bar for a person at a terminal, lines for a log; ``False``/None: nothing."""
        if isinstance(progress, Progress):
            return progress
        if progress is True or progress == "auto":
            return cls("bar" if _interactive(sys.stderr) else "lines", every=every)
        if progress is False or progress is None:
            return cls("off", every=every)
        return cls(str(progress), every=every)

    def line(self, text: str) -> None:
        """A message: above the bar, a line of its own, or nothing."""
        if self.mode == "bar":
            from tqdm.auto import tqdm

            tqdm.write(text, file=self.stream)
        elif self.mode == "lines":
            print(text, file=self.stream, flush=True)

    def counter(
        self,
        *,
        total: int,
        desc: str,
        unit: str,
        initial: int = 0,
        every: Every | str | int | None = None,
        leave: bool = True,
    ) -> Counter:
        """A bar (``leave``: kept on screen when done), or a counter that prints lines (every ``every``,
        default this progress's)."""
        every = self.every if every is None else Every.parse(every)
        return Counter(self, total=total, desc=desc, unit=unit, initial=initial, every=every, leave=leave)


class Counter:
    """One loop's progress: ``update(n, postfix)`` after each step, ``close()`` at the end."""

    def __init__(
        self, progress: Progress, *, total: int, desc: str, unit: str, initial: int, every: Every, leave: bool = True
    ) -> None:
        self.progress, self.total, self.desc, self.unit, self.every = progress, total, desc, unit, every
        self.n = self.first = initial
        self.bar: Any = None
        self.started = self.last_line = time.monotonic()
        if progress.mode == "bar":
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                dynamic_ncols=True,
                leave=leave,
                file=progress.stream,
            )

    def update(self, n: int = 1, postfix: str = "", *, force: bool = False) -> bool:
        """Count ``n`` more; in ``lines`` mode print a line when ``every`` says so or when ``force``d.

        Returns:
            Whether this update was shown (always on a bar): the caller's rates can start afresh.
        """
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix_str(postfix, refresh=False)
            return True
        now = time.monotonic()
        if self.progress.mode == "lines" and (force or self.every.due(self.n, now - self.last_line)):
            self.last_line = now
            self.progress.line(self._line(postfix, now))
            return True
        return False

    def _line(self, postfix: str, now: float) -> str:
        elapsed = now - self.started
        done = self.n - self.first
        eta = (self.total - self.n) * elapsed / done if done else math.inf
        pct = 100 * self.n // max(self.total, 1)
        parts = [f"{self.desc}: {self.unit} {self.n}/{self.total} ({pct}%)", *([postfix] if postfix else [])]
        parts += [f"elapsed {duration(elapsed)}", f"ETA {duration(eta) if math.isfinite(eta) else '?'}"]
        return " | ".join(parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
