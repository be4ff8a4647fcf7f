"""`TrainConfig`: how to train (data, windows, optimizer, schedule, intervals), validated and saved in every checkpoint.

`lr_at` is its learning-rate schedule (linear warmup, then cosine decay); `RESUMABLE_CHANGES` lists the fields a
resumed run may change without changing what has been computed so far.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from tokembed._checks import check_bool, check_int, check_number, check_positive_int, config_from_dict
from tokembed._paths import local_path
from tokembed.data.packing import check_packer

DEFAULT_BATCH_SIZE = 8  # windows per rank when neither batch_size nor global_batch_size is given

# Fields that may differ when a run is resumed (they do not change what has been computed so far).
RESUMABLE_CHANGES = (
    "max_steps",
    "eval_interval",
    "eval_batches",
    "checkpoint_interval",
    "keep_checkpoints",
    "out",
    "materialize_packing",  # the same batches, read from the cache or gathered
)


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Attributes:
        data: a shard folder (``tokembed prepare`` output; a URL of a remote one, stored as given, without
            credentials), a Megatron prefix or a UTF-8 text file (stored as an absolute path),
            or a `tokembed.Mixture` or `tokembed.PhasedMixture` of shard folders (stored as its ``spec()``, a dict).
        out: the checkpoint directory to write (and resume from).
        max_length: tokens per training window (must not exceed the model's context_length).
        stride: step between window starts (default: max_length, no overlap).
        batch_size: windows per step on each rank (under torchrun; one process is one rank). Default:
            ``global_batch_size / ranks`` when that is given, else 8 (when resuming: the checkpoint's
            global batch).
        global_batch_size: windows per step over all ranks: what a resumed run must keep, on any number
            of ranks that divides it. Give this or ``batch_size`` (or both, when they agree).
        max_steps: optimizer steps in all.
        lr: peak learning rate, reached after ``warmup_steps`` of linear warmup, then a cosine
            decay to ``min_lr_ratio * lr`` at ``max_steps``.
        weight_decay: AdamW decay of matrices and embeddings (not of biases and norms).
        beta1, beta2: AdamW betas (GPT-3's 0.9, 0.95).
        grad_clip: clip the global gradient norm to this (0: no clipping).
        eval_interval: steps between validation losses (and at the end).
        eval_batches: at most this many validation batches per evaluation.
        checkpoint_interval: steps between checkpoints (and at the end).
        keep_checkpoints: checkpoints kept: the latest in ``out`` and the ``keep_checkpoints - 1`` newest before it
            beside it (``OUT.step-NNNNNNN``); a resume takes the newest complete one.
        seed: seeds weights, shuffling and dropout.
        val_fraction: for a text file, the share of its tokens (at the end) held out for validation.
        init_embeddings: a local GPT-2 weights file whose ``wte``/``wpe`` start the embeddings.
        tokenizer: for a text file, the tokenizer (default ``"gpt2"``); for a shard folder, the one its
            manifest names is used, and naming another here is an error.
        packing: train on whole documents packed into windows (a `tokembed.data.packing.PACKERS` name, e.g.
            ``"best-fit"``): attention stays within each document and positions restart at each (the loader's
            document metadata goes to the model, saved with ``document_mask`` on, so that validation, eval and
            generate read it as it trained); padding and each document's last token predict nothing.
            None: sliding windows over the token stream (the chapter's).
        materialize_packing: with ``packing`` over a shard folder (or each folder of a mixture), write the packed
            windows once into the cache and read them as rows (`tokembed.data.packed.PackedWindows`,
            ``materialize``): the same batches, read several times faster, for the split's bytes plus its
            padding on disk. None (the default): the loader's choice (a local split of up to 2**28 tokens is
            materialized when the cache has room); False: always gathered.
    """

    data: str | dict
    out: str
    max_length: int = 64
    stride: int | None = None
    batch_size: int | None = None
    max_steps: int = 300
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 20
    checkpoint_interval: int = 100
    keep_checkpoints: int = 3
    seed: int = 0
    val_fraction: float = 0.1
    init_embeddings: str | None = None
    tokenizer: str | None = None
    global_batch_size: int | None = None
    packing: str | None = None
    materialize_packing: bool | None = None

    def __post_init__(self) -> None:
        # absolute paths (eval and resume work from any folder), or a mixture's spec
        object.__setattr__(self, "data", _data_entry(self.data))
        object.__setattr__(self, "out", str(local_path(self.out, what="out (--out)")))
        if self.init_embeddings is not None:
            object.__setattr__(self, "init_embeddings", str(self.init_embeddings))
        # Checked values are stored as plain int/float: a numpy scalar would not survive config.json.
        for name in (
            "max_length",
            "max_steps",
            "eval_interval",
            "eval_batches",
            "checkpoint_interval",
            "keep_checkpoints",
        ):
            object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        for name in ("batch_size", "global_batch_size"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.batch_size and self.global_batch_size and self.global_batch_size % self.batch_size:
            raise ValueError(
                f"global_batch_size={self.global_batch_size} is not a multiple of batch_size={self.batch_size}: "
                "it is batch_size x the number of ranks; give one of them (the other follows from the ranks)"
            )
        if self.stride is not None:
            object.__setattr__(self, "stride", check_positive_int("stride", self.stride))
        if self.packing is not None:
            object.__setattr__(self, "packing", check_packer(self.packing))
            if self.stride is not None:
                raise ValueError(
                    f"stride={self.stride} does not apply with packing={self.packing!r} (each window holds whole "
                    "documents from its first slot); leave stride out"
                )
        if self.materialize_packing is not None:
            check_bool("materialize_packing", self.materialize_packing)
        if self.materialize_packing and self.packing is None:
            raise ValueError("materialize_packing=True applies with packing (it stores packed windows); give packing")
        object.__setattr__(self, "warmup_steps", check_int("warmup_steps", self.warmup_steps, min=0, noun="an integer"))
        object.__setattr__(self, "lr", check_number("lr", self.lr, min=0.0, min_open=True, noun=""))
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(
                f"weight_decay and grad_clip must be >= 0, got {self.weight_decay!r} and {self.grad_clip!r}"
            )
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {self.beta1!r} and {self.beta2!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        object.__setattr__(self, "seed", check_int("seed", self.seed, min=0, noun="an integer"))

    @property
    def window_stride(self) -> int | None:
        """The loader's stride: ``stride``, else ``max_length``; None with packing (windows of whole documents)."""
        return None if self.packing else self.stride or self.max_length

    def rank_batch(self, world_size: int) -> int:
        """Windows per step on each of ``world_size`` ranks (``batch_size``, or the global batch's share)."""
        g, b = self.global_batch_size, self.batch_size
        if g is None:
            return b or DEFAULT_BATCH_SIZE
        ranks = f"{world_size} rank{'s' if world_size != 1 else ''}"
        if b is not None:
            if b * world_size != g:
                raise ValueError(
                    f"batch_size={b} x {ranks} is not global_batch_size={g}; give one of them (the other follows "
                    "from the number of ranks)"
                )
            return b
        if g % world_size:
            raise ValueError(
                f"global_batch_size={g} does not divide among {ranks}: every rank reads the same number of "
                f"windows; run on a number of ranks that divides {g}"
            )
        return g // world_size

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Build from a dict (e.g. a checkpoint's ``config.json``), naming unknown keys."""
        return config_from_dict(cls, d)


def _data_entry(data: Any) -> str | dict:
    """An absolute path, or a mixture's spec (checked: its sources exist and share a tokenizer)."""
    from tokembed.data.mixture import Mixture
    from tokembed.data.phases import PhasedMixture, mixture_from_spec

    if isinstance(data, (Mixture, PhasedMixture)):
        return data.spec()
    if isinstance(data, dict):
        return mixture_from_spec(data).spec()
    from tokembed.storage.urls import as_url, is_url, local_path_of, public_url

    if is_url(data) and local_path_of(data) is None:  # a remote shard folder, recorded without credentials
        return public_url(as_url(data))
    return str(local_path(local_path_of(data) or data, what="the training data").resolve())


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warmup, then cosine to ``min_lr_ratio * lr``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = max(1, config.max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    min_lr = config.lr * config.min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.lr - min_lr)
