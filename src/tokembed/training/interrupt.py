"""Ctrl-C and SIGTERM stop training at a step boundary, so the checkpoint they leave describes one moment.

A ``KeyboardInterrupt`` raised wherever SIGINT happens to land (inside ``optimizer.step()``, between
fetching a batch and counting the step) leaves the model, the optimizer, the RNG and the loader at
different steps; a checkpoint of that state does not resume exactly. SIGTERM is what Slurm, Kubernetes
and spot preemption send (then SIGKILL after a grace period, 30 s by default): by default it ends the
process at once, losing every step since the last checkpoint.

While `DeferredInterrupt` is active, the first SIGINT or SIGTERM only records itself (``signal``): the
loop finishes the step in progress, saves it (without the evaluation that may be due: a resume does that
first) and raises `TrainingInterrupted`. The stop takes one step and one save after the signal (plus
the rest of an evaluation or a save under way when it came).

A second Ctrl-C, a second or more after the first, stops at once (the last checkpoint stands). Copies of
one request are not a second one: a terminal's Ctrl-C reaches torchrun and every rank, and torchrun then
forwards it to the ranks again; Slurm signals every process of a job step, torchrun forwards that too.
So SIGINTs within a second of the first, and any further SIGTERM, are the same request.
Under torchrun every rank asks each step whether any rank was signalled (`tokembed.training.loop` folds
the question into the loss's all-reduce), so all of them stop after the same step, also when the signal
reached one rank alone.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "DeferredInterrupt", "TrainingInterrupted"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SAME_REQUEST_S = 1.0  # SIGINTs this close to the first are copies of it (torchrun forwards the terminal's)


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped after ``step`` because of ``signal``; the checkpoint in ``checkpoint`` holds that step.

    A `KeyboardInterrupt`, so code that caught a Ctrl-C before still does. ``saved`` is False when a second
    Ctrl-C stopped the run at once: the checkpoint then holds the last step saved before (``step``).
    """

    def __init__(self, signum: int, step: int, checkpoint: Path, *, saved: bool = True) -> None:
        self.signal = signal.Signals(signum)
        self.step, self.checkpoint, self.saved = step, Path(checkpoint), saved
        if saved:
            what = f"stopped by {self.signal.name} after step {step}; the checkpoint {checkpoint} holds it"
        else:
            what = f"stopped at once by a second SIGINT; the checkpoint {checkpoint} holds step {step}"
        super().__init__(what)

    def __str__(self) -> str:
        return str(self.args[0])


# What signal.signal returns and takes: a function, SIG_DFL / SIG_IGN (ints), or None (set outside Python).
_Handler = Callable[[int, FrameType | None], Any] | int | None


class DeferredInterrupt:
    """A context manager: SIGINT and SIGTERM set ``signal`` instead of stopping the process.

    Only in the main thread (signal handlers can be set nowhere else), and a signal whose handler is
    ``SIG_IGN`` stays ignored. The previous handlers come back on exit.
    """

    def __init__(self) -> None:
        self.signal: int = 0  # the first signal received, 0 while none
        self._at = 0.0  # when it came (time.monotonic)
        self._previous: dict[int, _Handler] = {}

    @property
    def requested(self) -> bool:
        return self.signal != 0

    def __enter__(self) -> DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if not self.signal:
            self.signal, self._at = signum, now
        elif signum == signal.SIGINT and now - self._at >= SAME_REQUEST_S:  # a person asked twice: stop now
            raise KeyboardInterrupt(f"a second {signal.Signals(signum).name}")

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()
