"""tokembed: the input stage of GPT-style language-model training.

text -> GPT-2 BPE token ids -> shards -> sliding windows -> batches -> token + positional embeddings
-> a small GPT -> inspection.

The public names below are imported on first use (PEP 562), so ``import tokembed`` is cheap and a
process that only prepares shards (a worker, a Ray task, ``tokembed check``) never pays for torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> module, in the order data flows. No module is named like a public function (training.py
# holds train, evaluation.py evaluate): importing a submodule binds its name on the package.
_PUBLIC = {
    # text -> tokens
    "ENDOFTEXT": "tokenizer",
    "available_tokenizers": "tokenizer",
    "get_tokenizer": "tokenizer",
    # tokens -> shards
    "PrepareConfig": "prepare",
    "PrepareResult": "prepare",
    "merge_manifests": "prepare",
    "prepare_corpus": "prepare",
    "ShardInfo": "shards",
    "ShardSet": "shards",
    "check_shards": "shards",
    "open_shards": "shards",
    "shard_stats": "shards",
    # shards -> windows -> batches
    "GPTDatasetV1": "windows",
    "SlidingWindowDataset": "windows",
    "create_dataloader_v1": "windows",
    "encode_text": "windows",
    "window_count": "shards",
    "WindowLoader": "loader",
    "create_dataloader": "loader",
    # batches -> embeddings
    "TokenEmbedding": "embeddings",
    "LearnedPositionalEmbedding": "embeddings",
    "InputEmbedding": "embeddings",
    "POSITIONAL_NAMES": "embeddings",
    "SinusoidalPositionalEmbedding": "embeddings",
    "RotaryEmbedding": "embeddings",
    "ALiBi": "embeddings",
    "T5RelativeBias": "embeddings",
    "ShawRelativePositions": "embeddings",
    # embeddings -> model
    "GPT": "model",
    "GPTConfig": "model",
    "TrainConfig": "training",
    "train": "training",
    "load_checkpoint": "checkpoint",
    "save_checkpoint": "checkpoint",
    "evaluate": "evaluation",
    "PositionsExperiment": "experiment",
    "run_positions_experiment": "experiment",
    # -> inspection
    "EmbeddingTable": "inspection",
    "load_table": "inspection",
    "token_counts": "inspection",
    "export_table": "export",
    "load_gpt2_embeddings": "gpt2_weights",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tokembed' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tokembed.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
