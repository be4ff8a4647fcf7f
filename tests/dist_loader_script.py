"""Run by tests/test_distributed.py under ``torchrun --nproc_per_node 2`` (gloo, CPU).

Each rank builds ``create_dataloader`` over the shard folder ``argv[1]`` without rank arguments (it
must take them from torch.distributed), runs one epoch, and writes what it saw to ``argv[2]/rank<r>.json``:
the start of every window of every batch, the loader's len, and the windows a resumed loader yields.
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist

import tokembed
from tokembed.data.loader import resolve_rank

EOT = 50256


def starts(batches):
    # The test's tokens count up through the stream, separators (EOT) excepted.
    return [[int(r[0]) if int(r[0]) != EOT else int(r[1]) - 1 for r in x.tolist()] for x, _ in batches]


def main() -> None:
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    drop_last = sys.argv[3] == "drop"
    dist.init_process_group("gloo")
    rank, world = resolve_rank()
    kw = dict(batch_size=4, max_length=16, stride=8, seed=3, drop_last=drop_last, num_workers=int(sys.argv[4]))
    loader = tokembed.create_dataloader(root, **kw)
    epoch = starts(loader)
    # Resume this rank after 3 batches of epoch 0, in a fresh loader.
    a = tokembed.create_dataloader(root, **kw)
    it = iter(a)
    head = [next(it) for _ in range(3)]
    b = tokembed.create_dataloader(root, **kw)
    b.load_state_dict(a.state_dict())
    resumed = starts(head) + starts(b)
    record = {
        "rank": rank,
        "world": world,
        "loader_rank": loader.rank,
        "len": len(loader),
        "epoch": epoch,
        "resumed": resumed,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
