"""Stage 3.5: tokembed's batches for the trainers people use, one small module per trainer.

Each module adapts the loader (`tokembed.create_dataloader`: exact shuffles, ranks, mixtures, packing,
exact and elastic resume) to one trainer's contract, and imports that trainer only when used:

- `tokembed.integrations.hf`: Hugging Face ``Trainer``: `HFWindows` (map-style ``{"input_ids", "labels"}`` in
  HF's shifting convention, ``position_ids`` on request) and `LoaderStateCallback` (the loader's position in
  each checkpoint folder).
- `tokembed.integrations.torchtitan`: `TitanDataLoader`, torchtitan's ``BaseDataLoader`` (its state under one
  key all ranks share: DCP resumes it at fewer or more data-parallel ranks, where torchtitan's own loader refuses).
- `tokembed.integrations.accelerate`: `prepare_dataloader`, the loader behind an ``Accelerator`` without being
  dealt out again (``Accelerator.prepare`` would), its position in ``save_state``/``load_state``.
- `tokembed.integrations.litgpt`: `LitDataModule`, a litgpt ``DataModule`` over a shard folder or `Mixture`.
- `tokembed.integrations.megatron`: `megatron_tokenizer`, the tokenizer object Megatron-core's ``GPTDataset`` needs.

Other PyTorch-native trainers (Fabric, your own loop) need no module here: ``create_dataloader(...).as_dataloader()``
is a ``torch.utils.data.DataLoader``, ``output="rows"`` yields one (B, T+1) tensor, and `tokembed.collate_windows`
with `tokembed.WindowBatchSampler` makes any DataLoader (torchdata's ``StatefulDataLoader`` too) read
tokembed's order at tokembed's speed. nanoGPT and Megatron read ``tokembed export`` folders as they are
(docs/integrations.md).
"""
