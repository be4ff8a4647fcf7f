"""accelerate: tokembed's loader behind an ``Accelerator``, each process reading its own rank's batches.

``Accelerator.prepare`` takes a DataLoader to be one global stream and deals it out to the processes again:
process 0 reads and dispatches (its default for an ``IterableDataset``), or every process keeps every n-th
batch (``IterableDatasetShard``, ``BatchSamplerShard``). tokembed's loader has already dealt the windows out
(its rank and world size come from torch.distributed, which the ``Accelerator`` starts), so a prepared loader
would keep a fraction of each rank's share, and accelerate has no switch for a loader that is already sharded
(huggingface/accelerate#4199). `prepare_dataloader` wraps the loader in accelerate's own ``DataLoaderShard``
without sharding it again:

- each process yields exactly its rank's batches, moved to ``accelerator.device``;
- accelerate's gradient accumulation sees the end of each epoch (``end_of_dataloader``), and
  ``gather_for_metrics`` drops the padding of a shared-out last step (``drop_last=False``);
- ``batch_size`` is the windows per batch on this process, ``total_batch_size`` the global batch;
- ``state_dict()`` is the loader's position after the batches the loop has received (accelerate fetches one
  batch ahead), and the wrapper is registered for checkpointing: ``accelerator.save_state(dir)`` writes the
  position and ``accelerator.load_state(dir)`` resumes exactly, also at another number of processes with the
  same global batch, gradient accumulation included (the state carries ``accelerator.step``, which accelerate
  restores only on processes the saved run had). Resume that way: accelerate's ``skip_first_batches`` would
  batch the batches again, and is refused;
- it counts as prepared: ``accelerator.prepare(model, optimizer, wrapper)`` returns it as it is.

accelerate is imported when this module is (``pip install accelerate``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.data_loader import DataLoaderShard

from tokembed.data.loader import WindowDataLoader, WindowLoader

__all__ = ["AcceleratedLoader", "prepare_dataloader"]


class _RankBatches(torch.utils.data.IterableDataset):
    """One rank's batches, as they are (the wrapped DataLoader has ``batch_size=None``: no batching again).

    ``shown``: the one the wrapper shows as its ``dataset``. Only code that builds another DataLoader from it
    iterates that one (accelerate's ``skip_first_batches``), and such a DataLoader would batch the batches again:
    it raises an error that says how to resume instead.
    """

    def __init__(self, loader: WindowLoader, *, shown: bool = False) -> None:
        self.loader, self.shown = loader, shown

    def __iter__(self) -> Iterator[Any]:
        if self.shown:
            raise ValueError(
                "a DataLoader was built again from a tokembed AcceleratedLoader's dataset (accelerate's "
                "skip_first_batches does that): it would batch tokembed's batches again. Resume with "
                "accelerator.load_state(dir) (accelerator.save_state saved the loader's position) and iterate the "
                "AcceleratedLoader itself"
            )
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def total_dataset_length(self) -> int:
        """Windows per epoch (accelerate reads it to know the genuine windows of a shared-out last step)."""
        return self.loader.plan.windows


class AcceleratedLoader(DataLoaderShard):
    """accelerate's ``DataLoaderShard`` over one rank's `WindowLoader` (``loader``), not sharded again.

    Build it with `prepare_dataloader`. Iterating yields the loader's batches on the accelerator's device;
    ``set_epoch``, ``state_dict`` and ``load_state_dict`` are the loader's (see the module's notes).
    """

    def __init__(
        self,
        loader: WindowLoader,
        *,
        device: torch.device | None = None,
        non_blocking: bool = False,
        accelerator: Accelerator | None = None,
    ):
        super().__init__(
            _RankBatches(loader),
            device=device,
            _drop_last=loader.drop_last,
            _non_blocking=non_blocking,
            batch_size=None,
        )
        self.loader, self.accelerator = loader, accelerator
        self._shown = _RankBatches(loader, shown=True)
        self._position = loader.state_dict()

    _is_accelerate_prepared = True  # accelerator.prepare(this) returns it as it is

    @property
    def dataset(self) -> _RankBatches:
        """What accelerate reads (windows per epoch, for ``gather_for_metrics``); not iterable on its own."""
        return self._shown

    @property
    def batch_size(self) -> int:
        """Windows per batch on this process (``B``)."""
        return self.loader.batch_size

    @property
    def total_batch_size(self) -> int:
        """Windows per step over all processes (``B x world size``)."""
        return self.loader.global_batch_size

    @property
    def total_dataset_length(self) -> int:
        """Windows per epoch: with ``drop_last=False``, ``gather_for_metrics`` keeps the first ``windows % total_batch_size``
        of the last step's gathered rows, which are the genuine ones (the rest repeat the epoch's first windows)."""
        return self.loader.plan.windows

    def __iter__(self) -> Iterator[Any]:
        # accelerate calls set_epoch(self.iteration) as each pass starts: the loader's own epoch, so that a
        # loaded resume point stays (WindowLoader.set_epoch keeps it for the same epoch).
        self.iteration = self.loader.epoch
        yield from super().__iter__()

    def set_epoch(self, epoch: int) -> None:
        self.iteration = epoch
        self.loader.set_epoch(epoch)

    def _update_state_dict(self) -> None:
        # accelerate calls this right before it fetches the batch after the one it yields next: the loader's
        # position then counts exactly the batches the loop will have received.
        self._position = self.loader.state_dict()

    def state_dict(self) -> dict[str, Any]:
        """The loader's position after the batches this iteration has yielded (plain JSON-able values), and the
        accelerator's gradient accumulation step (``"accelerate_step"``)."""
        state = dict(self._position)
        if self.accelerator is not None:
            state["accelerate_step"] = int(self.accelerator.step)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume: the next pass yields exactly the batches that remained (see ``WindowLoader.load_state_dict``),
        and every process takes up gradient accumulation where the saved run was. accelerate restores its step from
        a file per process: a process the saved run did not have would start a new accumulation while the others
        finish theirs, and the next gradient all-reduce would wait forever."""
        state = dict(state_dict)
        step = state.pop("accelerate_step", None)
        self.loader.load_state_dict(state)
        self._position = self.loader.state_dict()
        if step is not None and self.accelerator is not None:
            self.accelerator.step = int(step)


def prepare_dataloader(accelerator: Accelerator, loader: WindowLoader | WindowDataLoader) -> AcceleratedLoader:
    """``accelerator.prepare`` for a tokembed loader: its batches on this process, not dealt out again.

    Create the loader after the ``Accelerator`` (the loader then reads this process's rank and the number of
    processes from torch.distributed). The wrapper is registered with ``accelerator.register_for_checkpointing``:
    ``save_state``/``load_state`` carry the loader's position.

    Raises:
        TypeError: ``loader`` is not a tokembed loader.
        ValueError: the loader's rank or world size is not this process's (names both).
    """
    if isinstance(loader, WindowDataLoader):
        loader = loader.loader
    if not isinstance(loader, WindowLoader):
        raise TypeError(
            f"prepare_dataloader() takes a tokembed loader (tokembed.create_dataloader(...)), got {type(loader).__name__}"
        )
    mine = (accelerator.process_index, accelerator.num_processes)
    if (loader.rank, loader.world_size) != mine:
        raise ValueError(
            f"the loader reads rank {loader.rank} of {loader.world_size}, but this process is {mine[0]} of {mine[1]}; "
            "create the loader after Accelerator() (it reads the rank from torch.distributed) or pass "
            "rank=accelerator.process_index, world_size=accelerator.num_processes"
        )
    device = accelerator.device if accelerator.device_placement else None
    wrapped = AcceleratedLoader(loader, device=device, non_blocking=accelerator.non_blocking, accelerator=accelerator)
    accelerator.register_for_checkpointing(wrapped)
    return wrapped
