"""tokembed's epoch order as a batch sampler, for a DataLoader you build yourself (torchdata's included).

``WindowBatchSampler`` yields the window indices of each batch in exactly the order `create_dataloader`
reads them (the same shuffle, ranks, tail and epochs), and its iterator is resumable: torchdata's
``StatefulDataLoader`` saves and restores it, with workers. With `collate_windows`, each batch is one
vectorized gather (``SlidingWindowDataset.__getitems__``)::

    from torchdata.stateful_dataloader import StatefulDataLoader
    ds = tokembed.SlidingWindowDataset("shards/", max_length=1024)
    dl = StatefulDataLoader(ds, batch_sampler=WindowBatchSampler(ds, batch_size=8, seed=0),
                            collate_fn=tokembed.collate_windows, num_workers=2)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from tokembed.data.loader import STATE_FORMAT, LoaderConfig, WindowLoader
from tokembed.data.mixture_windows import MixtureWindows
from tokembed.data.windows import SlidingWindowDataset

__all__ = ["WindowBatchSampler"]


def _from_torchdata(state: dict[str, Any]) -> dict[str, Any]:
    """The loader state inside a torchdata ``StatefulDataLoader.state_dict()`` (taken at any ``num_workers``):
    this sampler's iterator's position when the loop's last batch was fetched, plus the batches since then
    (``snapshot_every_n_steps`` > 1). A finished pass is the next epoch's start, as torchdata starts a new pass.
    Anything else is returned as it is (`WindowLoader.load_state_dict` says what it is not)."""
    snapshot = state.get("_snapshot")
    main = snapshot.get("_main_snapshot", {}) if isinstance(snapshot, dict) else state
    inner = main.get("_sampler_iter_state") if isinstance(main, dict) else None
    if not isinstance(inner, dict) or inner.get("format") != STATE_FORMAT:
        return state
    done = inner.get("batches_done", 0) + (state.get("_steps_since_snapshot", 0) if snapshot else 0)
    if state.get("_iterator_finished"):
        return {**inner, "epoch": inner.get("epoch", 0) + 1, "batches_done": 0}
    return {**inner, "batches_done": done}


class _BatchIterator:
    """One epoch's batches of window indices, resumable (torchdata saves ``state_dict`` of a sampler's iterator)."""

    def __init__(self, loader: WindowLoader, start: int) -> None:
        self.loader, self.number, self.t = loader, loader.epoch, start
        self.arith, self.my_id = loader._epoch_arith(), loader._iter_id

    def __iter__(self) -> _BatchIterator:
        return self

    def __next__(self) -> list[int]:
        loader, plan = self.loader, self.arith.plan
        current = self.my_id == loader._iter_id
        if current:  # the resume point is taken by the pass that runs, not by every iter() (see __iter__)
            loader._resume_at = 0
        if self.t >= plan.batches:
            if current:  # the epoch ran to its end: the sampler moves to the next one
                self._end_epoch()
                loader._iter_id += 1
            raise StopIteration
        ks = self.arith.windows(np.array([self.t])) if self.t < plan.full_steps else self.arith.tail()[None]  # (1, B)
        self.t += 1
        if current:
            loader._done = self.t
        return ks[0].tolist()

    def state_dict(self) -> dict[str, Any]:
        """The loader-format state of this iterator's position (epoch, batches given)."""
        return {**self.loader.state_dict(), "epoch": self.number, "batches_done": self.t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)  # checks the data and options, sets the epoch
        self.loader._resume_at = 0
        type(self).__init__(self, self.loader, state["batches_done"])
        if self.t >= self.arith.plan.batches:  # a finished epoch: torchdata starts a new pass, the next epoch
            self._end_epoch()

    def _end_epoch(self) -> None:
        self.loader._epoch, self.loader._done = self.number + 1, 0


class WindowBatchSampler(torch.utils.data.Sampler):
    """Batches of window indices in `create_dataloader`'s order: pass it as a DataLoader's ``batch_sampler``.

    Args:
        dataset: the `SlidingWindowDataset` (or `PackedWindows`) the DataLoader reads.
        batch_size, shuffle, seed, drop_last: as for `create_dataloader`.
        rank, world_size: this process's share (default torch.distributed's when initialised, else 0 of 1).

    ``len()`` is the batches per epoch on this rank; an epoch iterated to its end moves the sampler to the
    next one (``set_epoch`` selects one). ``state_dict()``/``load_state_dict()`` are `WindowLoader`'s:
    the same format, the same checks, and elastic across world sizes with the same global batch. In a
    DataLoader with workers the sampler runs ahead by the batches they prefetched: save the position the
    loop reached (torchdata's ``StatefulDataLoader.state_dict()``, which ``load_state_dict`` also takes, at
    any ``num_workers``), not ``state_dict()``.

    Raises:
        TypeError: a `Mixture`'s windows (read them with `create_dataloader`, which keeps the mixture's order).
    """

    def __init__(
        self,
        dataset: SlidingWindowDataset,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if isinstance(dataset, MixtureWindows):
            raise TypeError(
                "a Mixture's windows are indexed by slots of its global order: read them with "
                "create_dataloader(mixture, ...) (or its .as_dataloader()), not with a batch sampler"
            )
        if not isinstance(dataset, SlidingWindowDataset):
            raise TypeError(f"dataset must be a tokembed SlidingWindowDataset, got {type(dataset).__name__}")
        config = LoaderConfig(batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.loader = WindowLoader(dataset, config, rank=rank, world_size=world_size)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        # torch's multi-process DataLoader iterator calls iter(batch_sampler) twice (in __init__ and _reset):
        # each starts at the loaded resume point, which the first next() of the latest one clears.
        loader = self.loader
        loader._iter_id += 1
        loader._done = loader._resume_at
        return _BatchIterator(loader, loader._resume_at)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from a loader state, or from a torchdata ``StatefulDataLoader``'s at any ``num_workers``
        (torchdata's own ``load_state_dict`` needs the same number): build the new ``StatefulDataLoader`` on this
        sampler and do not give it the state."""
        self.loader.load_state_dict(_from_torchdata(state) if isinstance(state, dict) else state)
