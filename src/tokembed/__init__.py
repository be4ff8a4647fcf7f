"""tokembed: the input stage of GPT-style language-model training.

text -> GPT-2 BPE token ids -> shards -> sliding windows -> batches -> token + positional embeddings
-> a small GPT -> inspection.

The public names below are imported on first use (PEP 562), so ``import tokembed`` is cheap and a
process that only prepares shards (a worker, a Ray task, ``tokembed check``) never pays for torch.
"""

from __future__ import annotations

from tokembed._lazy import lazy_attributes

__version__ = "0.1.0"

# name -> module, in the order data flows. No module or subpackage is named like a public function
# (training/ holds train, evaluation.py evaluate): importing a submodule binds its name on the package.
_PUBLIC = {
    # text -> tokens
    "ENDOFTEXT": "tokenizer",
    "Tokenizer": "tokenizer",
    "TokenizerIdentity": "tokenizer",
    "available_tokenizers": "tokenizer",
    "get_tokenizer": "tokenizer",
    "register_tokenizer": "tokenizer",
    # tokens -> shards
    "PrepareConfig": "shards.config",
    "PrepareResult": "shards.prepare",
    "merge_manifests": "shards.prepare",
    "prepare_corpus": "shards.prepare",
    "InputFormat": "shards.formats",
    "register_format": "shards.formats",
    "ShardInfo": "shards.format",
    "ShardSet": "shards.reader",
    "check_shards": "shards.check",
    "open_shards": "shards.reader",
    "shard_stats": "data.stats",
    # shards -> windows -> batches
    "GPTDatasetV1": "data.book",
    "SlidingWindowDataset": "data.windows",
    "create_dataloader_v1": "data.book",
    "encode_text": "data.windows",
    "window_count": "data.plan",
    "WindowLoader": "data.loader",
    "Mixture": "data.mixture",
    "create_dataloader": "data.loader",
    "collate_windows": "data.windows",
    "DocumentBatch": "data.batch",
    "PackedWindows": "data.packed",
    "WindowBatchSampler": "data.sampler",
    # batches -> embeddings
    "TokenEmbedding": "embeddings",
    "LearnedPositionalEmbedding": "embeddings",
    "InputEmbedding": "embeddings",
    "POSITIONAL_NAMES": "embeddings.names",
    "SinusoidalPositionalEmbedding": "embeddings",
    "RotaryEmbedding": "embeddings",
    "ALiBi": "embeddings",
    "T5RelativeBias": "embeddings",
    "ShawRelativePositions": "embeddings",
    "PositionalScheme": "embeddings.scheme",
    "register_scheme": "embeddings.names",
    "scheme_names": "embeddings.names",
    # embeddings -> model
    "GPT": "model.gpt",
    "GPTConfig": "model.config",
    "TrainConfig": "training.config",
    "train": "training.loop",
    "TrainingInterrupted": "training.interrupt",
    "load_checkpoint": "model.checkpoint",
    "save_checkpoint": "model.checkpoint",
    "evaluate": "training.evaluation",
    "PositionsExperiment": "training.experiment",
    "run_positions_experiment": "training.experiment",
    # -> inspection
    "EmbeddingTable": "inspection.table",
    "load_table": "inspection.load",
    "token_counts": "inspection.counts",
    "export_table": "inspection.export",
    "load_gpt2_embeddings": "model.gpt2_weights",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_attributes("tokembed", globals(), _PUBLIC)
