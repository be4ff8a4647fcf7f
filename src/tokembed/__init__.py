"""tokembed: the input stage of GPT-style language-model training.

text -> GPT-2 BPE token ids -> shards -> sliding windows -> batches -> token + positional embeddings
-> a small GPT -> inspection.

The public names below are imported on first use (PEP 562), so ``import tokembed`` is cheap and a
process that only prepares shards (a worker, a Ray task, ``tokembed check``) never pays for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    "PhasedMixture": "data.phases",
    "load_schedule": "data.phases",
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

# What type checkers and editors see (the same names, from their modules); at run time each loads on first use.
if TYPE_CHECKING:
    from tokembed.data.batch import DocumentBatch as DocumentBatch
    from tokembed.data.book import GPTDatasetV1 as GPTDatasetV1
    from tokembed.data.book import create_dataloader_v1 as create_dataloader_v1
    from tokembed.data.loader import WindowLoader as WindowLoader
    from tokembed.data.loader import create_dataloader as create_dataloader
    from tokembed.data.mixture import Mixture as Mixture
    from tokembed.data.packed import PackedWindows as PackedWindows
    from tokembed.data.phases import PhasedMixture as PhasedMixture
    from tokembed.data.phases import load_schedule as load_schedule
    from tokembed.data.plan import window_count as window_count
    from tokembed.data.sampler import WindowBatchSampler as WindowBatchSampler
    from tokembed.data.stats import shard_stats as shard_stats
    from tokembed.data.windows import SlidingWindowDataset as SlidingWindowDataset
    from tokembed.data.windows import collate_windows as collate_windows
    from tokembed.data.windows import encode_text as encode_text
    from tokembed.embeddings import ALiBi as ALiBi
    from tokembed.embeddings import InputEmbedding as InputEmbedding
    from tokembed.embeddings import LearnedPositionalEmbedding as LearnedPositionalEmbedding
    from tokembed.embeddings import RotaryEmbedding as RotaryEmbedding
    from tokembed.embeddings import ShawRelativePositions as ShawRelativePositions
    from tokembed.embeddings import SinusoidalPositionalEmbedding as SinusoidalPositionalEmbedding
    from tokembed.embeddings import T5RelativeBias as T5RelativeBias
    from tokembed.embeddings import TokenEmbedding as TokenEmbedding
    from tokembed.embeddings.names import POSITIONAL_NAMES as POSITIONAL_NAMES
    from tokembed.embeddings.names import register_scheme as register_scheme
    from tokembed.embeddings.names import scheme_names as scheme_names
    from tokembed.embeddings.scheme import PositionalScheme as PositionalScheme
    from tokembed.inspection.counts import token_counts as token_counts
    from tokembed.inspection.export import export_table as export_table
    from tokembed.inspection.load import load_table as load_table
    from tokembed.inspection.table import EmbeddingTable as EmbeddingTable
    from tokembed.model.checkpoint import load_checkpoint as load_checkpoint
    from tokembed.model.checkpoint import save_checkpoint as save_checkpoint
    from tokembed.model.config import GPTConfig as GPTConfig
    from tokembed.model.gpt import GPT as GPT
    from tokembed.model.gpt2_weights import load_gpt2_embeddings as load_gpt2_embeddings
    from tokembed.shards.check import check_shards as check_shards
    from tokembed.shards.config import PrepareConfig as PrepareConfig
    from tokembed.shards.format import ShardInfo as ShardInfo
    from tokembed.shards.formats import InputFormat as InputFormat
    from tokembed.shards.formats import register_format as register_format
    from tokembed.shards.prepare import PrepareResult as PrepareResult
    from tokembed.shards.prepare import merge_manifests as merge_manifests
    from tokembed.shards.prepare import prepare_corpus as prepare_corpus
    from tokembed.shards.reader import ShardSet as ShardSet
    from tokembed.shards.reader import open_shards as open_shards
    from tokembed.tokenizer import ENDOFTEXT as ENDOFTEXT
    from tokembed.tokenizer import Tokenizer as Tokenizer
    from tokembed.tokenizer import TokenizerIdentity as TokenizerIdentity
    from tokembed.tokenizer import available_tokenizers as available_tokenizers
    from tokembed.tokenizer import get_tokenizer as get_tokenizer
    from tokembed.tokenizer import register_tokenizer as register_tokenizer
    from tokembed.training.config import TrainConfig as TrainConfig
    from tokembed.training.evaluation import evaluate as evaluate
    from tokembed.training.experiment import PositionsExperiment as PositionsExperiment
    from tokembed.training.experiment import run_positions_experiment as run_positions_experiment
    from tokembed.training.interrupt import TrainingInterrupted as TrainingInterrupted
    from tokembed.training.loop import train as train


__getattr__, __dir__ = lazy_attributes("tokembed", globals(), _PUBLIC)
