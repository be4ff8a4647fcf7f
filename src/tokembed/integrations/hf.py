"""Hugging Face ``Trainer``: tokembed's windows as a map-style dataset, and the loader's position in checkpoints.

The label-shift trap. tokembed's ``targets`` are the inputs shifted by one already; a Hugging Face causal
LM shifts ``labels`` itself (position ``t`` is scored against ``labels[t + 1]``), so passing tokembed's
targets as labels trains on the token *two* ahead, silently. `HFWindows` gives ``labels`` in HF's
convention: ``labels[t + 1] = targets[t]``, i.e. ``labels = [-100, targets[0], ..., targets[T-2]]``,
which for plain windows is the inputs themselves (``labels[0]`` is never scored). The window's last target
is not scored (HF's shift drops one per row); with packing, -100 marks what predicts nothing.

The order. Item ``i`` of epoch ``e`` is position ``i`` of tokembed's epoch ``e`` order (the same shuffle,
by formula, as `create_dataloader` with one rank), so with ``TrainingArguments(train_sampling_strategy=
"sequential")`` the Trainer reads tokembed's order; accelerate deals its batches to the processes, and
calls ``set_epoch``: the epoch lives in shared memory, so the DataLoader's workers (persistent ones too)
read the epoch the main process set. Resuming, the Trainer skips the batches it has done by skipping
sampler indices (no data is read); `LoaderStateCallback` writes tokembed's position into every
``checkpoint-N`` folder (``tokembed_loader.json``) and, on resume, checks the checkpoint the Trainer
resumes from (wherever it is): the data and options must be this run's, the position must be the one the
Trainer recorded in its own ``trainer_state.json``, and this run's Trainer must skip to that same position,
so the resumed run reads exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

import inspect
import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokembed._atomic import atomic_write_json
from tokembed.data.batch import IGNORE_INDEX
from tokembed.data.loader import create_dataloader

__all__ = ["STATE_FILE", "HFWindows", "LoaderStateCallback", "hf_labels"]

STATE_FILE = "tokembed_loader.json"


def hf_labels(targets: torch.Tensor) -> torch.Tensor:
    """tokembed's targets (B, T) -> Hugging Face ``labels`` (B, T) that a causal LM shifts back onto them."""
    labels = torch.full_like(targets, IGNORE_INDEX)
    labels[:, 1:] = targets[:, :-1]  # HF scores position t against labels[t + 1]
    return labels


class HFWindows(torch.utils.data.Dataset):
    """tokembed's windows in tokembed's order, as ``{"input_ids", "labels"[, "position_ids"]}`` (T,) each.

    Args:
        source: a shard folder, a `Mixture`, a token array or a text (as for `create_dataloader`).
        max_length: tokens per window (``T``): at most the model's ``n_positions``.
        stride, split, within_documents, packing: as for `create_dataloader`.
        shuffle, seed: tokembed's order (a new one each epoch).
        position_ids: also give ``position_ids`` restarting at each document (default: with packing).

    ``len()`` is the windows of one epoch; ``set_epoch(e)`` (accelerate calls it) selects the order.
    """

    def __init__(
        self,
        source: Any,
        *,
        max_length: int,
        stride: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        split: str | None = None,
        within_documents: bool = False,
        packing: str | None = None,
        position_ids: bool | None = None,
    ) -> None:
        self.loader = create_dataloader(
            source,
            batch_size=1,  # one window per position: position p of an epoch is batch p
            max_length=max_length,
            stride=stride,
            shuffle=shuffle,
            seed=seed,
            split=split,
            within_documents=within_documents,
            packing=packing,
            rank=0,
            world_size=1,
        )
        self.dataset = self.loader.dataset
        self.position_ids = packing is not None if position_ids is None else bool(position_ids)
        # The epoch in shared memory: the DataLoader's workers hold copies of this dataset (persistent workers
        # keep the copy of their first epoch), and read the epoch the main process's set_epoch writes here.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def epoch(self) -> int:
        """The epoch whose order ``__getitems__`` reads (the one of the last ``set_epoch``, in every process)."""
        return int(self._epoch)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.fill_(int(epoch))

    def windows(self, indices: Sequence[int], epoch: int | None = None) -> np.ndarray:
        """The dataset's windows at positions ``indices`` of epoch ``epoch`` (default the current one): (K,)."""
        idx = np.asarray(indices, dtype=np.int64)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise IndexError(f"position {bad} is outside the epoch of {n} windows")
        self.loader.set_epoch(self.epoch if epoch is None else epoch)
        return self.loader._epoch_arith().windows(idx).ravel()

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, torch.Tensor]]:
        k = self.windows(indices)
        if self.position_ids:
            batch = self.dataset._gather_documents(k)
            inputs, targets, pos = batch.inputs, batch.targets, batch.position_ids
        else:
            inputs, targets = self.dataset._gather(k)
            pos = None
        labels = hf_labels(targets)
        return [
            {"input_ids": inputs[j], "labels": labels[j], **({} if pos is None else {"position_ids": pos[j]})}
            for j in range(len(k))
        ]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.__getitems__([i])[0]

    def state_at(self, epoch: int, position: int) -> dict[str, Any]:
        """tokembed's loader state at window ``position`` of epoch ``epoch``."""
        state = self.loader.state_dict()
        state["epoch"], state["batches_done"] = int(epoch), int(position)
        return state


def _callback_base() -> type:
    from transformers import TrainerCallback

    return TrainerCallback


class LoaderStateCallback(_callback_base()):  # type: ignore[misc]
    """Writes tokembed's position into each ``checkpoint-N`` folder; on resume, checks it (see the module).

    Args:
        dataset: the `HFWindows` the Trainer trains on.

    Raises (on train begin):
        ValueError: ``train_sampling_strategy`` is not ``"sequential"`` (the Trainer would shuffle
            tokembed's order away), or the checkpoint resumed from holds other data or options, or a position
            other than the one the Trainer recorded, or one this run's Trainer will not skip to (another batch
            size, accumulation, number of processes or ``drop_last``, or ``ignore_data_skip``).
    """

    def __init__(self, dataset: HFWindows) -> None:
        self.dataset = dataset

    def geometry(self, args: Any, dataloader: Any = None) -> tuple[int, int]:
        """``(batches per epoch in each process, windows per batch over all processes)`` of the Trainer's loader.

        Asked of the Trainer's (accelerate-prepared) ``dataloader`` where given; otherwise from the arguments:
        ``per_device_train_batch_size`` windows a process, the loader dropping (``dataloader_drop_last``) or
        keeping a last, shorter batch of each epoch.
        """
        per_batch = getattr(dataloader, "total_batch_size", None) or args.train_batch_size * args.world_size
        n = len(self.dataset)
        if dataloader is not None:
            return len(dataloader), per_batch
        return (n // per_batch if args.dataloader_drop_last else -(-n // per_batch)), per_batch

    def position(self, args: Any, step: int, dataloader: Any = None) -> tuple[int, int]:
        """``(epoch, window)`` of tokembed's order where a Trainer resuming after ``step`` optimizer steps reads on.

        The Trainer's arithmetic (``set_initial_training_values`` and ``_init_training_state`` of
        transformers' trainer.py): an epoch of ``b`` batches takes ``ceil(b / gradient_accumulation_steps)``
        optimizer steps (the last accumulation may be shorter; ``max_steps`` only ends the run), and a resumed
        run skips ``step % steps_per_epoch`` accumulations of ``gradient_accumulation_steps`` batches into
        epoch ``step // steps_per_epoch``.
        """
        batches, per_batch = self.geometry(args, dataloader)
        accumulation = args.gradient_accumulation_steps
        per_epoch = max(-(-batches // accumulation), 1)
        epoch, steps = divmod(int(step), per_epoch)
        return epoch, min(steps * accumulation * per_batch, len(self.dataset))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(args, "train_sampling_strategy", "sequential") != "sequential":
            raise ValueError(
                f"train_sampling_strategy={args.train_sampling_strategy!r} lets the Trainer shuffle tokembed's order "
                "(shuffled by tokembed already, resumable); use TrainingArguments(train_sampling_strategy='sequential')"
            )
        folder = _resumed_folder(args, state)
        if folder is None:
            return
        saved_file = folder / STATE_FILE
        if not saved_file.is_file():
            warnings.warn(
                f"resuming from {folder}, which has no {STATE_FILE} (saved without LoaderStateCallback): tokembed "
                "cannot check that the resumed run reads the batches the saved run would have",
                stacklevel=2,
            )
            return
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
        self.dataset.loader.load_state_dict(saved)  # the same data and options, or a ValueError naming what differs
        self._check_position(saved_file, saved, args, state, kwargs.get("train_dataloader"))

    def _check_position(self, saved_file: Path, saved: dict[str, Any], args: Any, state: Any, dataloader: Any) -> None:
        """The saved position against the Trainer's own record of the saved run, then against where this run's
        Trainer skips to."""
        at = (saved["epoch"], saved["batches_done"])
        recorded = _recorded_position(state, saved.get("trainer"), len(self.dataset))
        if recorded is not None and recorded != at:
            raise ValueError(
                f"{saved_file} says the run stopped at epoch {at[0]} window {at[1]}, but the Trainer's own state "
                f"(trainer_state.json: epoch {state.epoch}) puts it at epoch {recorded[0]} window {recorded[1]}: "
                f"the {STATE_FILE} does not belong to this checkpoint; resume from an untouched checkpoint folder"
            )
        epoch, window = self.position(args, state.global_step, dataloader)
        if getattr(args, "ignore_data_skip", False) and window:
            raise ValueError(
                f"{saved_file} says the run stopped at epoch {at[0]} window {at[1]}, but ignore_data_skip=True makes "
                f"the Trainer read epoch {epoch} from its start again: leave ignore_data_skip off (skipping the "
                "done batches of HFWindows reads no data)"
            )
        if at != (epoch, window):
            raise ValueError(
                f"{saved_file} says the run stopped at epoch {at[0]} window {at[1]}, but this run's Trainer resumes "
                f"{state.global_step} steps in at epoch {epoch} window {window}: resume with the batch size, "
                "accumulation, processes and drop_last of the saved run"
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        dataloader = kwargs.get("train_dataloader")
        batches, per_batch = self.geometry(args, dataloader)
        saved = self.dataset.state_at(*self.position(args, state.global_step, dataloader))
        # The saved run's loader: what turns the Trainer's own record (its fractional epoch) into a position.
        saved["trainer"] = {"batches_per_epoch": batches, "windows_per_batch": per_batch}
        atomic_write_json(folder / STATE_FILE, saved)


def _resumed_folder(args: Any, state: Any) -> Path | None:
    """The checkpoint folder the running ``Trainer.train`` resumes from; None for a fresh start.

    It is the training loop's ``resume_from_checkpoint`` (``True`` already resolved to the last checkpoint);
    the folder may be anywhere, not only under ``args.output_dir``. A Trainer whose loop is not found
    (another transformers) resumes, by its own naming, from ``output_dir/checkpoint-<global_step>``.
    """
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "_inner_training_loop" and "resume_from_checkpoint" in frame.f_locals:
            folder = frame.f_locals["resume_from_checkpoint"]
            return None if folder is None else Path(folder)
        frame = frame.f_back
    return Path(args.output_dir) / f"checkpoint-{state.global_step}" if state.global_step else None


def _recorded_position(state: Any, trainer: dict[str, int] | None, n: int) -> tuple[int, int] | None:
    """``(epoch, window)`` from the Trainer's own record: its ``state.epoch`` is ``epoch + batches / batches
    per epoch`` of the batches its loop ran; None where the saved loader geometry is unknown."""
    if not trainer:
        return None
    batches_per_epoch, per_batch = int(trainer["batches_per_epoch"]), int(trainer["windows_per_batch"])
    epoch = math.floor(state.epoch)
    batches = round((state.epoch - epoch) * batches_per_epoch)
    if batches >= batches_per_epoch:  # a fraction within rounding of the epoch's end
        epoch, batches = epoch + 1, 0
    return epoch, min(batches * per_batch, n)
