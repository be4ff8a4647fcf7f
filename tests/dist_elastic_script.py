"""Run by tests/test_distributed.py under ``torchrun --nproc_per_node N`` (gloo, CPU): elastic resume of a mixture.

``argv``: the two source folders, the output folder, the mode, the global batch size, the steps before saving,
and optionally a schedule file (`tokembed.load_schedule`): then the mixture is that `PhasedMixture`.

- ``save`` (N = 2): each rank reads one uninterrupted epoch (recorded), then, in a fresh loader, ``cut`` batches;
  rank 0 writes the loader state to ``OUT/state.json``.
- ``resume`` (any N): each rank loads ``OUT/state.json`` and records the batches that remain.

Each rank writes ``OUT/<mode>-<N>-rank<r>.json``: the first two tokens of every window of every batch.
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist

import tokembed
from tokembed.data.loader import resolve_rank


def heads(batches):
    return [x[:, :2].tolist() for x, _ in batches]


def main() -> None:
    a, b, out, mode, g, cut = (
        sys.argv[1],
        sys.argv[2],
        Path(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
        int(sys.argv[6]),
    )
    dist.init_process_group("gloo")
    rank, world = resolve_rank()
    mixture = tokembed.Mixture({a: 0.7, b: 0.3}, seed=1) if len(sys.argv) < 8 else tokembed.load_schedule(sys.argv[7])

    def loader():  # rank and world size from torch.distributed; B = G / world size
        return tokembed.create_dataloader(mixture, global_batch_size=g, max_length=8, seed=5)

    record = {"rank": rank, "world": world}
    if mode == "save":
        record["epoch"] = heads(loader())
        saver = loader()
        it = iter(saver)
        for _ in range(cut):
            next(it)
        if rank == 0:
            (out / "state.json").write_text(json.dumps(saver.state_dict()))
    else:
        resumed = loader()
        resumed.load_state_dict(json.loads((out / "state.json").read_text()))
        record["rest"] = heads(resumed)
    (out / f"{mode}-{world}-rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
