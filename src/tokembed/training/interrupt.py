"""Ctrl-C during training stops at a step boundary, so the checkpoint it writes describes one moment.

A ``KeyboardInterrupt`` raised wherever SIGINT happens to land (inside ``optimizer.step()``, between
fetching a batch and counting the step) leaves the model, the optimizer, the RNG and the loader at
different steps; a checkpoint of that state does not resume exactly. While `DeferredInterrupt` is
active, the first SIGINT only sets ``requested``: the loop finishes the step in progress, saves, and
raises ``KeyboardInterrupt`` itself. A second SIGINT raises at once (the last checkpoint stands).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Literal

__all__ = ["DeferredInterrupt"]

# what signal.signal returns: a handler, SIG_DFL/SIG_IGN (ints), or None (installed outside Python)
_Handler = Callable[[int, FrameType | None], Any] | int | None


class DeferredInterrupt:
    """A context manager: SIGINT sets ``requested`` instead of raising (main thread only; elsewhere,
    and where SIGINT is ignored, it changes nothing)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: _Handler = None

    def __enter__(self) -> DeferredInterrupt:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # asked twice: stop now
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc: object) -> Literal[False]:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False
