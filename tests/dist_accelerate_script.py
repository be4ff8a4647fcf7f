"""Run by tests/test_integrations_dist.py under ``torchrun --nproc_per_node N`` (gloo, CPU): tokembed's loader
behind accelerate's ``Accelerator`` in every process.

``argv``: the shard folder, the checkpoint folder, the mode, the global batch size, the output folder.

- ``save``: ``prepare_dataloader``; 3 batches; ``accelerator.save_state``; the rest of the epoch. Records the
  batches, what accelerate reads (``batch_size``, ``total_batch_size``, ``len``) and ``end_of_dataloader``.
- ``load``: a fresh loader at this number of processes; ``prepare_dataloader``; ``accelerator.load_state``;
  records the batches it yields.
- ``metrics``: a loader with ``drop_last=False`` (windows of 31 tokens: an odd number of them, so the shared-out
  last step is padded); ``accelerator.gather_for_metrics`` of every batch.
- ``prepare``: ``accelerator.prepare(loader.as_dataloader())`` with ``dispatch_batches=False``; records the
  error iterating it raises.

Each process writes ``OUT/<mode>-<N>-rank<r>.json``: the first two tokens of every window of every batch.
"""

import json
import sys
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration

import tokembed
from tokembed.integrations.accelerate import prepare_dataloader


def heads(batches):
    return [x[:, :2].tolist() for x, _ in batches]


def main() -> None:
    folder, ckpt, mode, g, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
    no_dispatch = DataLoaderConfiguration(dispatch_batches=False, split_batches=False)
    accelerator = Accelerator(cpu=True, dataloader_config=no_dispatch if mode == "prepare" else None)
    rank, world = accelerator.process_index, accelerator.num_processes
    loader = tokembed.create_dataloader(  # rank and world size from torch.distributed
        folder, global_batch_size=g, max_length=31 if mode == "metrics" else 32, seed=2, drop_last=mode != "metrics"
    )
    rec: dict = {"rank": rank, "world": world, "loader_rank": loader.rank}
    if mode == "prepare":
        try:
            next(iter(accelerator.prepare(loader.as_dataloader())))
        except ValueError as e:
            rec["error"] = str(e)
    else:
        dl = prepare_dataloader(accelerator, loader)
        rec.update(batch_size=dl.batch_size, total_batch_size=dl.total_batch_size, len=len(dl))
        rec["is_dataloader"] = isinstance(dl, torch.utils.data.DataLoader)
        if mode == "metrics":
            rec["gathered"] = [accelerator.gather_for_metrics(x[:, :2]).tolist() for x, _ in dl]
        elif mode == "save":
            it = iter(dl)
            rec["head"] = heads(next(it) for _ in range(3))
            accelerator.save_state(ckpt)
            rest, ends = [], []
            for batch in it:
                rest.append(batch)
                ends.append(accelerator.gradient_state.end_of_dataloader)
            rec.update(rest=heads(rest), ends=ends)
        else:
            accelerator.load_state(ckpt)
            rec["rest"] = heads(dl)
    (out / f"{mode}-{world}-rank{rank}.json").write_text(json.dumps(rec))
    accelerator.end_training()


if __name__ == "__main__":
    main()
