"""Which phase of a `tokembed.PhasedMixture` each training step reads, and the log lines that say so.

Step ``t`` (numbered from 1, as the training log numbers them) reads slots ``[(t-1) G, t G)`` of the global
order; it is *in* the phase of its first window. A phase that starts inside a step (its start is not a
multiple of ``G x max_length`` tokens) is announced at that step, with how many windows into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tokembed.data.mixture_windows import MixtureWindows
from tokembed.training.data import ValidationSource, phase_weighted

__all__ = ["PhaseLog"]


class PhaseLog:
    """The phases of a loader's mixture, step by step.

    Args:
        dataset: the loader's `MixtureWindows` (of a phased mixture).
        global_batch_size: windows per step (``G``).
    """

    def __init__(self, dataset: MixtureWindows, global_batch_size: int) -> None:
        self.dataset, self.g = dataset, int(global_batch_size)
        self.phases, self.first = dataset.phases, np.asarray(dataset.first_slots, dtype=np.int64)
        self.paths = [str(p) for p in dataset.mixture.paths]

    @classmethod
    def of(cls, loader: Any) -> PhaseLog | None:
        """The log of ``loader``'s phases; None unless it reads a mixture of more than one phase."""
        ds = loader.dataset
        if not isinstance(ds, MixtureWindows) or len(ds.phases) < 2:
            return None
        return cls(ds, loader.global_batch_size)

    def check_end(self, max_steps: int, max_length: int) -> None:
        """Refuse a phase that starts at or after the run's last step (`tokembed.data.phases.check_end`)."""
        from tokembed.data.phases import check_end

        what = f"{max_steps:,} steps x {self.g} windows x {max_length} tokens"
        check_end(self.phases, windows=max_steps * self.g, max_length=max_length, what=what)

    def phase(self, step: int) -> int:
        """The phase (0-based) of step ``step`` (from 1): the phase of its first window."""
        return int(np.searchsorted(self.first, (step - 1) * self.g, side="right")) - 1

    def describe(self, k: int) -> str:
        ph = self.phases[k]
        weights = ", ".join(f"{self.paths[i]} {float(ph.weights[i]):.4g}" for i, _ in ph.listed if ph.weights[i])
        return f"{ph.label}, {k + 1} of {len(self.phases)}: {weights}"

    def at_start(self, step: int) -> str:
        """The line for a run that starts (or resumes) before step ``step``."""
        return f"data: step {step:,} reads {self.describe(self.phase(step))}"

    def starts_in(self, step: int) -> str | None:
        """The line announcing a phase that starts in step ``step`` (from 1), or None."""
        lo, hi = (step - 1) * self.g, step * self.g
        ks = np.flatnonzero((self.first >= lo) & (self.first < hi)).tolist()
        if not ks or ks == [0]:
            return None
        k = ks[-1]
        into = int(self.first[k]) - lo
        where = "" if not into else f", {into} windows into the step"
        return f"data: step {step:,} starts {self.describe(k)} (window {int(self.first[k]):,}{where})"

    def entry(self, step: int) -> dict[str, Any]:
        """What log.json records of step ``step``: its phase's number (and name)."""
        ph = self.phases[self.phase(step)]
        return {"phase": ph.number, **({"phase_name": ph.name} if ph.name else {})}

    def weigh(self, sources: Sequence[ValidationSource], step: int) -> list[ValidationSource]:
        """``sources`` (each source's validation tokens) weighted as the phase of step ``step`` weighs them
        (`tokembed.training.data.phase_weighted`)."""
        return phase_weighted(list(sources), self.phases[self.phase(max(int(step), 1))], self.paths)
