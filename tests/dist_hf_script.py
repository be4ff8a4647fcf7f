"""Run by torchrun (tests/test_integrations_hf_dist.py): transformers' Trainer on `HFWindows` in several
processes (gloo on the CPU), each rank writing the batches it trained on.

Usage: dist_hf_script.py OUTPUT_DIR MAX_STEPS RECORD [RESUME_FROM]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
import transformers

from tokembed.integrations.hf import HFWindows, LoaderStateCallback


def _cpu_with_index(storage, location):
    """torch.load's deserializer for "cpu:N": the Trainer maps a multi-process CPU run's optimizer state
    to ``args.device`` (``cpu:N``), a location torch's own CPU deserializer does not accept."""
    return storage if location.startswith("cpu:") else None


torch.serialization.register_package(11, lambda obj: None, _cpu_with_index)


class RecordingTrainer(transformers.Trainer):
    seen: list

    def training_step(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs["input_ids"][:, 0].tolist())  # each window's first token names it
        return super().training_step(model, inputs, *args, **kwargs)


def main(output_dir: str, max_steps: str, record: str, resume: str | None = None) -> None:
    ds = HFWindows(np.arange(330) % 997, max_length=32, seed=4)  # 10 windows
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=1000, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    args = transformers.TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=2,  # 5 global batches of 2: rank 1's third one wraps to the epoch's start
        gradient_accumulation_steps=2,  # 3 batches a rank, 2 steps an epoch (the second of one batch)
        max_steps=int(max_steps),
        save_steps=3,
        report_to=[],
        use_cpu=True,
        train_sampling_strategy="sequential",
        seed=0,
    )
    trainer = RecordingTrainer(
        model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=ds, callbacks=[LoaderStateCallback(ds)]
    )
    trainer.seen = []
    trainer.train(resume_from_checkpoint=resume)
    with open(f"{record}-rank{args.process_index}.json", "w") as f:
        json.dump(trainer.seen, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
