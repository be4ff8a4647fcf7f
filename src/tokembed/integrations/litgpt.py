"""litgpt: a ``DataModule`` over a tokembed shard folder or `Mixture`, for ``litgpt pretrain``.

litgpt's pretraining loop accepts only a ``torch.utils.data.DataLoader`` and slices one (B, T+1) tensor per
step (``input_ids = batch[:, 0:T]``, ``targets = batch[:, 1:T+1]``); it saves ``train_dataloader.state_dict()``
in its checkpoints and restores it on ``--resume``. `LitDataModule` gives it tokembed's loader in
``output="rows"`` mode through `WindowLoader.as_dataloader`: tokembed's shuffle, ranks (from
torch.distributed, which Fabric initialises) and exact resume, without converting the shards to litdata.

    from litgpt.pretrain import setup
    setup(model_name="pythia-14m", data=LitDataModule("shards/"), ...)
"""

from __future__ import annotations

from typing import Any

from litgpt.data import DataModule

from tokembed.data.loader import WindowDataLoader, create_dataloader
from tokembed.shards.reader import MissingSplitError

__all__ = ["LitDataModule"]


class LitDataModule(DataModule):
    """litgpt ``DataModule``: windows of ``max_seq_length`` (+1 for the targets) from tokembed's loader.

    Args:
        source: a shard folder, a Megatron prefix or a `tokembed.Mixture` (training windows: split ``"train"``).
        val_source: where validation windows come from (a shard folder, Megatron prefix or `Mixture`);
            default the ``"val"`` split of ``source``: of a shard folder, its val split (``tokembed prepare
            --val-fraction``); of a Mixture, every component's val split, in the mixture's weights. A
            Megatron prefix, or a folder prepared without a val split, has none: give ``val_source``.
        seed, shuffle, num_workers: tokembed's loader options.
    """

    def __init__(
        self, source: Any, *, val_source: Any = None, seed: int = 0, shuffle: bool = True, num_workers: int = 0
    ) -> None:
        super().__init__()
        self.source, self.val_source = source, val_source
        self.seed, self.shuffle, self.num_workers = seed, shuffle, num_workers
        self.batch_size: int = 1
        self.max_seq_length: int | None = None

    def __repr__(self) -> str:
        return f"LitDataModule({self.source!r}, seed={self.seed})"

    def connect(
        self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: int | None = None, **kwargs: Any
    ) -> None:
        """litgpt calls this with the micro batch size and the model's ``max_seq_length`` (``T``)."""
        if max_seq_length is None:
            raise ValueError("LitDataModule needs max_seq_length: the window length litgpt trains on")
        self.batch_size, self.max_seq_length = batch_size, max_seq_length

    def _loader(self, source: Any, **options: Any) -> WindowDataLoader:
        if self.max_seq_length is None:
            raise RuntimeError("call connect(batch_size=..., max_seq_length=...) before asking for data loaders")
        return create_dataloader(
            source,
            batch_size=self.batch_size,
            max_length=self.max_seq_length,
            seed=self.seed,
            num_workers=self.num_workers,
            output="rows",  # (B, T+1): litgpt slices inputs and targets itself
            **options,
        ).as_dataloader()

    def train_dataloader(self) -> WindowDataLoader:
        return self._loader(self.source, shuffle=self.shuffle)

    def val_dataloader(self) -> WindowDataLoader:
        """Validation windows in order (litgpt's ``pretrain`` always asks for them).

        Raises:
            MissingSplitError: no ``val_source`` and ``source`` (or one of a Mixture's components) has no
                ``"val"`` split; the message says to pass ``val_source=``.
        """
        if self.val_source is not None:
            return self._loader(self.val_source, shuffle=False, drop_last=False)
        try:
            return self._loader(self.source, split="val", shuffle=False, drop_last=False)
        except MissingSplitError as e:
            raise MissingSplitError(
                f"LitDataModule has no validation windows: {e}. litgpt's pretrain evaluates on them; pass "
                "LitDataModule(source, val_source=...) a shard folder (or Mixture) to validate on, or prepare "
                "the data with a val split (tokembed prepare --val-fraction)"
            ) from e
