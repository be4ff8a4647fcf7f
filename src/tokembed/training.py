"""Train a GPT on a shard folder or a text file: AdamW, warmup + cosine, clipping, eval, checkpoints.

    tokens -> create_dataloader (shuffled windows) -> GPT.loss -> AdamW step
    every eval_interval steps: validation loss;  every checkpoint_interval steps: a checkpoint

Validation data: a shard folder's ``val`` split; for a text file, the last ``val_fraction`` (10%)
of its tokens (the first 90% are trained on: the split is by token position, so no window of
one side overlaps the other).

Exact resume: a checkpoint holds the weights, AdamW's state, the loader's position inside its
epoch, torch's RNG state (dropout) and the step, and the learning rate is a function of the step.
A run stopped at any checkpoint and resumed continues with the same batches and the same random
numbers, so its losses equal an uninterrupted run's (bit for bit on the same machine and threads).
"""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from tokembed._checks import check_positive_int, config_from_dict
from tokembed.checkpoint import read_checkpoint_config, save_checkpoint
from tokembed.model import GPT, GPTConfig

__all__ = ["TrainConfig", "TrainResult", "TrainingData", "load_training_data", "lr_at", "train"]

# Fields that may differ when a run is resumed (they do not change what has been computed so far).
RESUMABLE_CHANGES = ("max_steps", "eval_interval", "eval_batches", "checkpoint_interval", "out")


@dataclass(frozen=True)
class TrainConfig:
    """How to train.

    Attributes:
        data: a shard folder (``tokembed prepare`` output) or a UTF-8 text file (stored as an absolute path).
        out: the checkpoint directory to write (and resume from).
        max_length: tokens per training window (must not exceed the model's context_length).
        stride: step between window starts (default: max_length, no overlap).
        batch_size: windows per step.
        max_steps: optimizer steps in all.
        lr: peak learning rate, reached after ``warmup_steps`` of linear warmup, then a cosine
            decay to ``min_lr_ratio * lr`` at ``max_steps``.
        weight_decay: AdamW decay of matrices and embeddings (not of biases and norms).
        beta1, beta2: AdamW betas (GPT-3's 0.9, 0.95).
        grad_clip: clip the global gradient norm to this (0: no clipping).
        eval_interval: steps between validation losses (and at the end).
        eval_batches: at most this many validation batches per evaluation.
        checkpoint_interval: steps between checkpoints (and at the end).
        seed: seeds weights, shuffling and dropout.
        val_fraction: for a text file, the share of its tokens (at the end) held out for validation.
        init_embeddings: a local GPT-2 weights file whose ``wte``/``wpe`` start the embeddings.
    """

    data: str
    out: str
    max_length: int = 64
    stride: int | None = None
    batch_size: int = 8
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
    seed: int = 0
    val_fraction: float = 0.1
    init_embeddings: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", str(Path(self.data).resolve()))  # absolute: eval and resume work from any folder
        object.__setattr__(self, "out", str(self.out))
        if self.init_embeddings is not None:
            object.__setattr__(self, "init_embeddings", str(self.init_embeddings))
        for name in ("max_length", "batch_size", "max_steps", "eval_interval", "eval_batches", "checkpoint_interval"):
            check_positive_int(name, getattr(self, name))
        if self.stride is not None:
            check_positive_int("stride", self.stride)
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio!r}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(f"weight_decay and grad_clip must be >= 0, got {self.weight_decay!r} and {self.grad_clip!r}")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"beta1 and beta2 must be in [0, 1), got {self.beta1!r} and {self.beta2!r}")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")

    @property
    def window_stride(self) -> int:
        return self.stride or self.max_length

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Build from a dict (e.g. a checkpoint's ``config.json``), naming unknown keys."""
        return config_from_dict(cls, d)


@dataclass(frozen=True)
class TrainResult:
    """What ``train`` returns: where the checkpoint is, how far it got, and the log."""

    checkpoint: Path
    step: int
    tokens_seen: int
    train_loss: float | None
    val_loss: float | None
    log: dict


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (0-based): linear warmup, then cosine to ``min_lr_ratio * lr``."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    decay_steps = max(1, config.max_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / decay_steps)
    min_lr = config.lr * config.min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.lr - min_lr)


# ------------------------------------------------------------------------------------------- data


@dataclass
class TrainingData:
    """The two sides of a corpus: what the loader trains on and the validation tokens.

    Attributes:
        train: a shard folder path or a token array, as ``create_dataloader`` takes it.
        val: validation tokens (int64 array), or None when the corpus has none.
        description: how the split was made, for logs.
    """

    train: object
    val: np.ndarray | None
    description: str
    n_train_tokens: int


def _is_shard_folder(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").exists()


def load_training_data(data: str | Path, *, val_fraction: float = 0.1, max_val_tokens: int | None = None) -> TrainingData:
    """Resolve ``data`` into training source and validation tokens.

    A shard folder: its ``train`` split (read lazily by the loader) and its ``val`` split.
    A text file: GPT-2 tokens, the first ``1 - val_fraction`` for training, the rest for validation.

    Args:
        max_val_tokens: read at most this many validation tokens (large shard folders).
    """
    path = Path(data)
    if not path.exists():
        raise FileNotFoundError(f"training data {path} does not exist; give a shard folder (tokembed prepare) or a text file")
    if path.is_dir():
        if not _is_shard_folder(path):
            raise ValueError(f"{path} is a directory without manifest.json: give a shard folder written by `tokembed prepare`, or a text file")
        from tokembed.shards import open_shards

        train_split = open_shards(path, split="train")
        val = None
        try:
            val_split = open_shards(path, split="val")
        except ValueError:
            val_split = None
        if val_split is not None and val_split.n_tokens:
            n = val_split.n_tokens if max_val_tokens is None else min(val_split.n_tokens, max_val_tokens)
            val = np.asarray(val_split.read(0, n), dtype=np.int64)
        desc = f"shard folder {path}: train split {train_split.n_tokens} tokens, val split {0 if val is None else len(val)} tokens read"
        return TrainingData(str(path), val, desc, int(train_split.n_tokens))
    from tokembed.windows import encode_text

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e}); give a text file or a shard folder") from None
    tokens = encode_text(text).astype(np.int64)  # (N,)
    cut = int(len(tokens) * (1.0 - val_fraction))
    val = tokens[cut:] if max_val_tokens is None else tokens[cut : cut + max_val_tokens]
    desc = f"text {path}: {len(tokens)} tokens, first {cut} for training, last {len(tokens) - cut} ({val_fraction:.0%}) for validation"
    return TrainingData(tokens[:cut], val, desc, cut)


# ------------------------------------------------------------------------------------------- resume state


def _rng_state() -> str:
    return base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode("ascii")


def _set_rng_state(s: str) -> None:
    torch.set_rng_state(torch.from_numpy(np.frombuffer(base64.b64decode(s), dtype=np.uint8).copy()))


def _jsonable(obj):
    """Loader states may hold numpy scalars/arrays or tensors: make them JSON."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _check_resumable(saved: dict, given: TrainConfig) -> None:
    old, new = TrainConfig.from_dict(saved).to_dict(), given.to_dict()
    diff = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in old if k not in RESUMABLE_CHANGES and old[k] != new[k]]
    if diff:
        raise ValueError(f"cannot resume with a different training setup ({'; '.join(diff)}); resume with the checkpoint's values or train into a new --out")


def _optimizer(model: GPT, config: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embedding tables
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, LayerNorm gains
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel per tensor; on a CPU the optimizer step is ~30x faster than the foreach path
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=True)


def _init_from_gpt2(model: GPT, path: str) -> None:
    from tokembed.gpt2_weights import load_gpt2_embeddings

    tables = load_gpt2_embeddings(path)
    wte, wpe = tables["wte"], tables["wpe"]
    c = model.config
    if tuple(wte.shape) != (c.vocab_size, c.dim):
        raise ValueError(f"GPT-2 token table {path} has shape {tuple(wte.shape)}, the model needs ({c.vocab_size}, {c.dim}); use --dim {wte.shape[1]}")
    with torch.no_grad():
        model.embed.token.weight.copy_(wte)
        if c.positional == "learned":
            if wpe.shape[1] != c.dim or wpe.shape[0] < c.context_length:
                raise ValueError(f"GPT-2 position table has shape {tuple(wpe.shape)}, the model needs at least ({c.context_length}, {c.dim})")
            model.embed.position.weight.copy_(wpe[: c.context_length])


# ------------------------------------------------------------------------------------------- the loop


def train(
    config: TrainConfig,
    model_config: GPTConfig | None = None,
    *,
    resume: bool = False,
    stop_at: int | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train a GPT and write checkpoints to ``config.out``.

    Args:
        config: the training setup.
        model_config: the model (default ``GPTConfig()`` with ``context_length = max_length``);
            when resuming, taken from the checkpoint (a different one given here is an error).
        resume: continue the checkpoint in ``config.out`` (required if it exists).
        stop_at: stop after this step as if interrupted (a checkpoint is written); the schedule
            still runs to ``max_steps``, so a later ``resume=True`` continues exactly.
        progress: show a tqdm progress bar with loss and tokens/s.

    Returns:
        A ``TrainResult``. Ctrl-C writes a checkpoint at the last finished step, then re-raises.
    """
    from tokembed.evaluation import evaluate_tokens
    from tokembed.loader import create_dataloader

    out = Path(config.out)
    saved = None
    if out.exists():
        if not resume:
            raise FileExistsError(f"{out} already exists; pass resume=True (--resume) to continue it, or choose another out directory")
        saved = read_checkpoint_config(out)
        _check_resumable(saved["train"], config)
        ckpt_model = GPTConfig.from_dict(saved["model"])
        if model_config is not None and model_config != ckpt_model:
            diff = [f"{k}: {v!r} -> {getattr(model_config, k)!r}" for k, v in ckpt_model.to_dict().items() if getattr(model_config, k) != v]
            raise ValueError(f"the checkpoint in {out} has another model ({'; '.join(diff)}); omit the model options when resuming")
        model_config = ckpt_model
    elif resume:
        raise FileNotFoundError(f"nothing to resume: {out} does not exist; drop resume (--resume) to start a new run")
    if model_config is None:
        model_config = GPTConfig(context_length=config.max_length)
    if model_config.context_length < config.max_length:
        raise ValueError(f"max_length={config.max_length} exceeds the model's context_length={model_config.context_length}; lower max_length or raise context_length")
    if stop_at is not None:
        check_positive_int("stop_at", stop_at)

    data = load_training_data(config.data, val_fraction=config.val_fraction, max_val_tokens=config.eval_batches * config.batch_size * config.max_length + 1)
    torch.manual_seed(config.seed)
    model = GPT(model_config)
    if config.init_embeddings and saved is None:
        _init_from_gpt2(model, config.init_embeddings)
    optimizer = _optimizer(model, config)
    loader = create_dataloader(
        data.train, batch_size=config.batch_size, max_length=config.max_length, stride=config.window_stride, shuffle=True, seed=config.seed, drop_last=True
    )
    if len(loader) == 0:
        raise ValueError(f"{config.data} gives no full batch of {config.batch_size} windows of {config.max_length} tokens; lower batch_size or max_length")
    step, tokens_seen, epoch = 0, 0, 0
    log: dict = {"train": [], "val": []}
    if saved is not None:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(str(out / "model.safetensors")), strict=not model_config.tie_embeddings)
        optimizer.load_state_dict(torch.load(out / "optimizer.pt", weights_only=True))
        state = json.loads((out / "state.json").read_text())
        log = json.loads((out / "log.json").read_text())
        step, tokens_seen, epoch = state["step"], state["tokens_seen"], state["epoch"]
        loader.set_epoch(epoch)
        loader.load_state_dict(state["loader"])
        _set_rng_state(state["rng"])

    def evaluate() -> float | None:
        if data.val is None:
            return None
        return evaluate_tokens(model, data.val, length=config.max_length, batch_size=config.batch_size, max_windows=config.eval_batches * config.batch_size)["loss"]

    def checkpoint() -> None:
        state = {"step": step, "tokens_seen": tokens_seen, "epoch": epoch, "loader": _jsonable(loader.state_dict()), "rng": _rng_state()}
        save_checkpoint(out, model, train=config.to_dict(), step=step, tokens_seen=tokens_seen, optimizer=optimizer, state=state, log=log)

    from tqdm.auto import tqdm

    if progress:
        what = f"resuming {out} at step {step}" if saved is not None else f"training into {out}"
        tqdm.write(f"{what}: GPT with {model.num_parameters():,} parameters ({model_config.positional} positions); {data.description}")
    bar = tqdm(total=config.max_steps, initial=step, desc=f"train {model_config.positional}", unit="step", disable=not progress, dynamic_ncols=True)
    last_saved = step if saved is not None else -1
    end = config.max_steps if stop_at is None else min(stop_at, config.max_steps)
    batches = iter(loader)
    val_loss = log["val"][-1]["loss"] if log["val"] else None
    train_loss = log["train"][-1]["loss"] if log["train"] else None
    tokens_per_batch = config.batch_size * config.max_length
    try:
        model.train()
        while step < end:
            t_start = time.perf_counter()  # tokens/s counts loading and the step, not evaluation or saving
            try:
                inputs, targets = next(batches)
            except StopIteration:
                epoch += 1
                loader.set_epoch(epoch)
                batches = iter(loader)
                continue
            lr = lr_at(step, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = model.loss(inputs, targets)  # (B,T),(B,T) -> scalar
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            tokens_seen += tokens_per_batch
            tok_s = tokens_per_batch / max(time.perf_counter() - t_start, 1e-9)
            train_loss = loss.item()
            log["train"].append({"step": step, "tokens": tokens_seen, "loss": train_loss, "lr": lr, "tokens_per_s": tok_s})
            bar.update(1)
            bar.set_postfix(loss=f"{train_loss:.3f}", val=f"{val_loss:.3f}" if val_loss is not None else "-", tok_s=f"{tok_s:,.0f}")
            if step % config.eval_interval == 0 or step == config.max_steps:
                val_loss = evaluate()
                model.train()
                if val_loss is not None:
                    log["val"].append({"step": step, "loss": val_loss})
            if step % config.checkpoint_interval == 0 or step == end:
                checkpoint()
                last_saved = step
    except KeyboardInterrupt:
        if step > last_saved and step > 0:
            checkpoint()
        raise
    finally:
        bar.close()
    if last_saved != step:
        checkpoint()
    return TrainResult(out, step, tokens_seen, train_loss, val_loss, log)
