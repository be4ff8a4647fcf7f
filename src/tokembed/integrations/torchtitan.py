"""torchtitan: tokembed's loader as a torchtitan ``BaseDataLoader`` (a ``Stateful`` that DCP checkpoints).

torchtitan builds its data loader from a config (``config.dataloader.build(dp_world_size=, dp_rank=,
tokenizer=, seq_len=, local_batch_size=, ...)``), iterates ``(input_dict, labels)`` and checkpoints it with
``dcp.save({"dataloader": loader, ...})`` on every rank; on resume ``dcp.load`` takes the keys of each new
rank's ``state_dict()`` as its template and refuses a key the checkpoint lacks. torchtitan's own
``ParallelAwareDataloader`` keys its state ``dp_rank_<r>`` (each rank has its own stream) and refuses another
data-parallel degree (torchtitan #811). tokembed's position is one point in the *global* order, the same on
every rank, so its state has one key every rank shares (``"tokembed"``, with ``"world_size"``): DCP keeps
one copy, and a state saved at one degree loads at any other, fewer or more ranks, with the same global batch
(``local_batch_size x dp_world_size``).

Batches: ``({"input": (B, T), "positions": (B, T)}, labels (B, T))``; ``positions`` restart at every
document start (torchtitan builds its FlexAttention block mask or varlen ``cu_seqlens`` from them);
labels are -100 where nothing is predicted (with packing).

torchtitan is imported when this module is (``pip install torchtitan``); without it the class is built
on ``torch.distributed.checkpoint.stateful.Stateful`` with the same contract.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tokembed.data.loader import create_dataloader

try:  # the real base class when torchtitan is installed: isinstance checks and config.build() work
    from torchtitan.components.dataloader import BaseDataLoader as _Base
except ImportError:  # pragma: no cover - exercised where torchtitan is absent
    from torch.distributed.checkpoint.stateful import Stateful as _Base

__all__ = ["STATE_KEY", "TitanDataLoader"]

STATE_KEY = "tokembed"  # the one key of the loader's position, shared by every rank

_BaseConfig: Any = getattr(_Base, "Config", object)


class TitanDataLoader(_Base):
    """torchtitan's ``BaseDataLoader`` over a tokembed shard folder (see the module's notes).

    Build it as torchtitan does, ``TitanDataLoader.Config(dataset_path="shards/").build(dp_world_size=,
    dp_rank=, seq_len=, local_batch_size=, tokenizer=...)``, or directly with the same arguments.

    Config fields (besides torchtitan's ``dataset`` and ``dataset_path``): ``seed``, ``shuffle``,
    ``packing`` (None or a packer such as ``"best-fit"``), ``num_workers``, ``infinite`` (start the next
    epoch when one ends, as torchtitan's datasets do; else stop after one).
    """

    @dataclass(kw_only=True, slots=True)
    class Config(_BaseConfig):
        dataset: str = "tokembed"
        dataset_path: str | None = None
        seed: int = 0
        shuffle: bool = True
        packing: str | None = None
        num_workers: int = 0
        infinite: bool = True

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        seq_len: int,
        local_batch_size: int,
        tokenizer: Any = None,
        **unused: Any,
    ) -> None:
        if not config.dataset_path:
            raise ValueError("TitanDataLoader.Config needs dataset_path: the shard folder `tokembed prepare` wrote")
        self.config, self.dp_rank, self.dp_world_size = config, dp_rank, dp_world_size
        self.loader = create_dataloader(
            config.dataset_path,
            batch_size=local_batch_size,
            max_length=seq_len,
            shuffle=config.shuffle,
            seed=config.seed,
            num_workers=config.num_workers,
            rank=dp_rank,
            world_size=dp_world_size,
            packing=config.packing,
            output="documents",
        )

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        while True:
            for b in self.loader:
                yield {"input": b.inputs, "positions": b.position_ids}, b.targets  # (B,T) each
            if not self.config.infinite:
                return

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """``{"tokembed": the loader's state as JSON, "world_size": dp_world_size}``: the same keys on every rank.

        The state is the global position (no rank in it), so the copy DCP keeps of the shared key is every
        rank's, and every rank of another degree finds its key on load.
        """
        return {STATE_KEY: json.dumps(self.loader.state_dict()), "world_size": self.dp_world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume, at this or another data-parallel degree (same global batch).

        Also reads the per-rank layout of earlier versions (``dp_rank_<r>`` keys): any rank's, they are the same.

        Raises:
            ValueError: a state of other data or options, or of another global batch size (names what differs).
        """
        if not state_dict:  # torchtitan: an empty state is valid (nothing saved yet)
            return
        keys = [STATE_KEY] if STATE_KEY in state_dict else sorted(k for k in state_dict if k.startswith("dp_rank_"))
        if not keys:
            raise ValueError(
                f"not a TitanDataLoader state: no {STATE_KEY!r} key in {sorted(state_dict)}; pass what state_dict() returned"
            )
        value = state_dict[keys[0]]
        self.loader.load_state_dict(json.loads(value if isinstance(value, str) else bytes(value).decode()))
