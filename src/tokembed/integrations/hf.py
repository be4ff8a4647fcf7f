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
calls ``set_epoch``. Resuming, the Trainer skips the batches it has done by skipping sampler indices (no
data is read); `LoaderStateCallback` writes tokembed's position into every ``checkpoint-N`` folder
(``tokembed_loader.json``) and, on resume, checks that the data, the options and the position agree
with the checkpoint, so the resumed run reads exactly the batches the uninterrupted run would have.
"""

from __future__ import annotations

import json
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
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

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
            tokembed's order away), or the checkpoint's data, options or position differ from this run's.
    """

    def __init__(self, dataset: HFWindows) -> None:
        self.dataset = dataset

    def position(self, args: Any, step: int) -> tuple[int, int]:
        """``(epoch, window)`` of tokembed's order the Trainer has reached after ``step`` optimizer steps.

        The Trainer's arithmetic: an epoch is ``len(dataloader) // gradient_accumulation_steps`` steps of
        ``per_device_train_batch_size x gradient_accumulation_steps x world_size`` windows, the dataloader
        dropping (``dataloader_drop_last``) or keeping a last, shorter batch of each epoch.
        """
        per_batch = args.per_device_train_batch_size * args.world_size
        n = len(self.dataset)
        batches = n // per_batch if args.dataloader_drop_last else -(-n // per_batch)
        per_epoch = max(batches // args.gradient_accumulation_steps, 1)
        epoch, steps = divmod(int(step), per_epoch)
        return epoch, min(steps * args.gradient_accumulation_steps * per_batch, n)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if getattr(args, "train_sampling_strategy", "sequential") != "sequential":
            raise ValueError(
                f"train_sampling_strategy={args.train_sampling_strategy!r} lets the Trainer shuffle tokembed's order "
                "(shuffled by tokembed already, resumable); use TrainingArguments(train_sampling_strategy='sequential')"
            )
        if state.global_step == 0:
            return
        saved_file = Path(args.output_dir) / f"checkpoint-{state.global_step}" / STATE_FILE
        if not saved_file.is_file():
            return  # a checkpoint written without this callback: nothing to check against
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
        self.dataset.loader.load_state_dict(saved)  # the same data and options, or a ValueError naming what differs
        epoch, window = self.position(args, state.global_step)
        if (saved["epoch"], saved["batches_done"]) != (epoch, window):
            raise ValueError(
                f"{saved_file} says the run stopped at epoch {saved['epoch']} window {saved['batches_done']}, but "
                f"{state.global_step} steps of this run come to epoch {epoch} window {window}: resume with the "
                "batch size, accumulation, processes and drop_last of the saved run"
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / STATE_FILE, self.dataset.state_at(*self.position(args, state.global_step)))
