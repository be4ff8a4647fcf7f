"""Run by tests/test_devices.py under ``torchrun --standalone --nproc_per_node 2`` (gloo, CPU).

Trains a tiny GPT in one process group, writing checkpoints under ``argv[2]``: ``plain`` (``argv[3]``
steps, per-rank batch ``argv[4]``, no dropout); ``whole``, the same with dropout 0.1; ``cut``, that run
stopped half way, then resumed to the end. Rank 0 writes the checkpoints; the test compares their logs.
"""

import sys
from pathlib import Path

import torch.distributed as dist

from tokembed import GPTConfig, TrainConfig, train
from tokembed.training.device import DeviceConfig


def main() -> None:
    data, out = sys.argv[1], Path(sys.argv[2])
    steps, batch = int(sys.argv[3]), int(sys.argv[4])
    plain = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2)
    model = GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2, dropout=0.1)  # resume restores the RNG
    cpu = DeviceConfig(device="cpu")

    def config(name: str) -> TrainConfig:
        return TrainConfig(
            data=data,
            out=str(out / name),
            max_length=16,
            batch_size=batch,
            max_steps=steps,
            eval_interval=3,
            eval_batches=2,
            checkpoint_interval=100,
            warmup_steps=2,
        )

    dist.init_process_group("gloo")  # once for the three runs (train joins a group that exists)
    train(config("plain"), plain, progress=False, device=cpu)
    train(config("whole"), model, progress=False, device=cpu)
    train(config("cut"), model, progress=False, device=cpu, stop_at=steps // 2)
    train(config("cut"), None, resume=True, progress=False, device=cpu)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
