"""Run by tests/test_integrations_dist.py under ``torchrun --nproc_per_node N`` (gloo, CPU): torchtitan's own
``CheckpointManager`` saves and loads a `TitanDataLoader` (DCP on every rank, as torchtitan's trainer does).

``argv``: the shard folder, the checkpoint base folder, the mode, the local batch size, the output folder.

- ``save``: each rank takes 3 batches, then ``CheckpointManager.save(curr_step=3)``; it records the batches
  that remain (the uninterrupted run).
- ``load``: a fresh loader at this degree; ``CheckpointManager.load(step=3)``; records the batches it yields.

Each rank writes ``OUT/<mode>-<N>-rank<r>.json``: the first two tokens of every window of every batch.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
from torchtitan.components.optimizer.optimizer import ParamGroupConfig

from tokembed.integrations.torchtitan import TitanDataLoader


def main() -> None:
    folder, base, mode, local_bs, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), Path(sys.argv[5])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = TitanDataLoader.Config(dataset_path=folder, seed=5, infinite=False).build(
        dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=32, local_batch_size=local_bs
    )
    model = torch.nn.Linear(2, 2)
    group = ParamGroupConfig(pattern=".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-3})
    optimizers = OptimizersContainer.Config(implementation="for-loop", param_groups=[group]).build(model_parts=[model])
    schedulers = LRSchedulersContainer.Config().build(optimizers=optimizers, training_steps=10)
    manager = CheckpointManager(
        CheckpointManager.Config(enable=True, folder="checkpoint", interval=1, keep_latest_k=0),
        dataloader=loader,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=schedulers,
        states={},
        sd_adapter=None,
        base_folder=base,
    )
    if mode == "save":
        it = iter(loader)
        for _ in range(3):
            next(it)
        manager.save(curr_step=3)
    else:
        manager.load(step=3)
        it = iter(loader)
    rest = [inputs["input"][:, :2].tolist() for inputs, _ in it]
    (out / f"{mode}-{world}-rank{rank}.json").write_text(json.dumps({"rank": rank, "world": world, "rest": rest}))
    manager.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
