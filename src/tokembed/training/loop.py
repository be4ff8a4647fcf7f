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

Devices and ranks (``DeviceConfig``, ``tokembed.training.device``): the model trains on CPU, CUDA or
MPS, optionally under bf16 autocast and ``torch.compile``; under ``torchrun`` each rank trains on its
own part of every global batch (``batch_size`` windows per rank) with DistributedDataParallel, and
rank 0 alone evaluates and writes checkpoints. Checkpoints hold CPU tensors whatever the device.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from tokembed._checks import check_positive_int
from tokembed.data.loader import create_dataloader
from tokembed.data.phases import schedule_decides
from tokembed.embeddings.registry import positional_scheme
from tokembed.model.checkpoint import (
    interrupted_save_hint,
    read_checkpoint_config,
    resume_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT
from tokembed.tokenizer.base import TokenizerIdentity
from tokembed.training.config import RESUMABLE_CHANGES, TrainConfig, lr_at
from tokembed.training.counts import COUNTS_FILE, MIN_COUNT, TokenCounter
from tokembed.training.data import TrainingData, check_same_tokenizer, load_training_data
from tokembed.training.device import DeviceConfig, Distributed, autocast, init_distributed, resolve_device, to_device
from tokembed.training.evaluation import evaluate_tokens
from tokembed.training.interrupt import DeferredInterrupt
from tokembed.training.phase_log import PhaseLog
from tokembed.training.state import TrainState

__all__ = ["TrainResult", "train"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """What ``train`` returns: where the checkpoint is, how far it got, and the log."""

    checkpoint: Path
    step: int
    tokens_seen: int
    train_loss: float | None
    val_loss: float | None
    log: dict
    is_main: bool = True


def train(
    config: TrainConfig,
    model_config: GPTConfig | None = None,
    *,
    resume: bool = False,
    stop_at: int | None = None,
    progress: bool = True,
    device: DeviceConfig | None = None,
) -> TrainResult:
    """Train a GPT and write checkpoints to ``config.out``.

    Args:
        config: the training setup.
        model_config: the model (default ``GPTConfig()`` with ``context_length = max_length``);
            when resuming, taken from the checkpoint (a different one given here is an error).
        resume: continue the checkpoint in ``config.out`` (required if it exists).
        stop_at: stop after this step as if interrupted (a checkpoint is written); the schedule
            still runs to ``max_steps``, so a later ``resume=True`` continues exactly.
        progress: show a tqdm progress bar with loss and tokens/s (on rank 0).
        device: where and how to compute (default ``DeviceConfig()``: the best device, fp32, eager).
            Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel over the ranks.

    Returns:
        A ``TrainResult``. Ctrl-C finishes the step in progress, writes a checkpoint of it (model,
        optimizer, RNG and loader at that one step: it resumes exactly), then raises KeyboardInterrupt.
    """
    out = Path(config.out)
    saved = _saved_run(out, config, resume=resume)
    if stop_at is not None:
        check_positive_int("stop_at", stop_at)
    device = device or DeviceConfig()
    dist = init_distributed(device.device)
    try:
        run = _start(config, model_config, saved, out, device=device, dist=dist)
        end = config.max_steps if stop_at is None else min(stop_at, config.max_steps)
        run.loop(end, progress=progress and dist.is_main, resumed=saved is not None)
    finally:
        dist.close()
    s = run.state
    return TrainResult(out, s.step, s.tokens_seen, s.last_loss("train"), s.last_loss("val"), s.log, dist.is_main)


def fit_vocabulary(model_config: GPTConfig | None, tok: TokenizerIdentity, *, given: bool) -> GPTConfig:
    """The model config for data made by ``tok``: its vocabulary and end-of-text id when none was given;
    a given one must hold every id (and, with ``document_mask``, end documents at the data's id)."""
    if not given:
        return dataclasses.replace(model_config, vocab_size=tok.n_vocab, eot_token=tok.eot_token)
    if model_config.vocab_size < tok.n_vocab:
        raise ValueError(
            f"the model's vocabulary has {model_config.vocab_size:,} ids, but the data was made with {tok.describe()}; "
            f"use vocab_size={tok.n_vocab} (the CLI takes it from the data)"
        )
    if model_config.eot_token != tok.eot_token:
        if given and model_config.document_mask:
            raise ValueError(
                f"the model ends documents at id {model_config.eot_token}, but the data was made with {tok.describe()}; "
                f"use eot_token={tok.eot_token}"
            )
        model_config = dataclasses.replace(model_config, eot_token=tok.eot_token)
    return model_config


def _start(config: TrainConfig, model_config: GPTConfig | None, saved: dict | None, out: Path, *, device, dist) -> _Run:
    """Read the data, settle the model's vocabulary, build the run and restore a saved one."""
    # Validation: eval_batches global batches (batch_size windows per rank), the same for any world size.
    max_val_tokens = config.eval_batches * config.batch_size * dist.world_size * config.max_length + 1
    data = load_training_data(
        config.data, val_fraction=config.val_fraction, max_val_tokens=max_val_tokens, tokenizer=config.tokenizer
    )
    if saved is not None:
        check_same_tokenizer(saved, data.tokenizer, out)
    given = model_config is not None or saved is not None
    model_config = fit_vocabulary(_model_config(saved, model_config, config, out), data.tokenizer, given=given)
    run = _Run(config, model_config, data, new=saved is None, device=device, dist=dist)
    if saved is not None:
        verify_checkpoint(out)  # every file exactly as saved (after the setup checks), or the damaged one named
        run.state.restore(out, run.model, run.optimizer, run.loader)
        run.restore_counts(out)
        for note in run.loader.resume_notes:  # a phased mixture's schedule changed after the resume point
            run.state.log.setdefault("schedule", []).append({"step": run.state.step, "change": note})
    return run


def _saved_run(out: Path, config: TrainConfig, *, resume: bool) -> dict | None:
    """The checkpoint config to resume from (checked against ``config``), or None for a new run."""
    if resume:
        resume_checkpoint(out)  # the newest complete one of the run (a killed or damaged save falls back)
    if out.exists():
        if not resume:
            raise FileExistsError(
                f"{out} already exists; pass resume=True (--resume) to continue it, or choose another out directory"
            )
        saved = read_checkpoint_config(out)
        _check_resumable(saved["train"], config)
        return saved
    if resume:
        hint = interrupted_save_hint(out)  # a save killed between its two renames left the checkpoint beside
        if hint:
            raise FileNotFoundError(f"checkpoint {out} does not exist{hint}")
        raise FileNotFoundError(f"nothing to resume: {out} does not exist; drop resume (--resume) to start a new run")
    return None


def _model_config(saved: dict | None, given: GPTConfig | None, config: TrainConfig, out: Path) -> GPTConfig:
    model_config = given
    if saved is not None:
        ckpt_model = GPTConfig.from_dict(saved["model"])
        if given is not None and given != ckpt_model:
            new = given.to_dict()  # compared as dicts: the scheme's options too
            diff = [f"{k}: {v!r} -> {new[k]!r}" for k, v in ckpt_model.to_dict().items() if new[k] != v]
            raise ValueError(
                f"the checkpoint in {out} has another model ({'; '.join(diff)}); omit the model options when resuming"
            )
        model_config = ckpt_model
    if model_config is None:
        model_config = GPTConfig(context_length=config.max_length)  # its vocabulary comes from the data
    if model_config.context_length < config.max_length:
        raise ValueError(
            f"max_length={config.max_length} exceeds the model's context_length={model_config.context_length}; "
            "lower max_length or raise context_length"
        )
    return model_config


class _Run:
    """One training run in memory: the model, its optimizer, the loader, and the resumable `TrainState`."""

    def __init__(
        self,
        config: TrainConfig,
        model_config: GPTConfig,
        data: TrainingData,
        *,
        new: bool,
        device: DeviceConfig,
        dist: Distributed,
    ) -> None:
        self.config, self.data, self.dist, self.precision = config, data, dist, device.precision
        self.device = resolve_device(device.device, local_rank=dist.local_rank)
        torch.manual_seed(config.seed)  # weights first, then the loader: the order resume relies on
        self.model = GPT(model_config)  # the plain module: checkpoints and evaluation use it
        if config.init_embeddings and new:  # a resumed run takes its embeddings from the checkpoint
            _init_from_gpt2(self.model, config.init_embeddings)
        self.model.to(self.device)
        self.step_model = _step_model(self.model, device, dist, self.device)  # the same weights, maybe wrapped
        self.optimizer = _optimizer(self.model, config)
        self.loader = create_dataloader(
            data.train,
            batch_size=config.batch_size,
            max_length=config.max_length,
            stride=config.window_stride,
            shuffle=True,
            seed=config.seed,
            drop_last=True,
            rank=dist.rank,
            world_size=dist.world_size,
            pin_memory=self.device.type == "cuda",
        )
        if len(self.loader) == 0:
            raise ValueError(
                f"{config.data} gives no full batch of {config.batch_size} windows of {config.max_length} tokens; lower batch_size or max_length"
            )
        self.phase_log = PhaseLog.of(self.loader)  # a phased mixture: which phase each step reads
        if self.phase_log is not None:
            self.phase_log.check_end(config.max_steps, config.max_length)
        self.state = TrainState()
        self.counter: TokenCounter | None = TokenCounter(model_config.vocab_size)
        self.batches = None
        self.progress = False

    def restore_counts(self, out: Path) -> None:
        """Continue the checkpoint's token counts (rank 0 holds them; the ranks' counts add up at each save).

        A checkpoint without them gives a run without them, not counts of part of the run.
        """
        if not (out / COUNTS_FILE).is_file():
            import warnings

            warnings.warn(f"{out} records no token counts (an older tokembed): this run records none", stacklevel=2)
            self.counter = None
        elif self.dist.is_main:
            self.counter.restore(out)

    def _global_counts(self) -> TokenCounter | None:
        """The counts of every rank added up (a collective: every rank calls it at each save)."""
        if self.counter is None or not self.dist.active:
            return self.counter
        total = TokenCounter(self.counter.counts.shape[0])
        summed = self.counter.counts.to(self.device)
        torch.distributed.all_reduce(summed)
        total.counts = summed.cpu()
        return total

    def loop(self, end: int, *, progress: bool, resumed: bool) -> None:
        """Train until step ``end``, evaluating and checkpointing on schedule.

        Ctrl-C finishes the step in progress, saves it and raises ``KeyboardInterrupt`` (see
        `tokembed.training.interrupt`); a second Ctrl-C stops at once, keeping the last checkpoint.
        """
        from tqdm.auto import tqdm

        c, s = self.config, self.state
        self.progress = progress
        if progress:
            what = f"resuming {c.out} at step {s.step}" if resumed else f"training into {c.out}"
            tqdm.write(
                f"{what}: GPT with {self.model.num_parameters():,} parameters ({self.model.config.positional} positions); {self.data.description}"
            )
        for change in s.log.get("schedule", []):
            if change["step"] == s.step:
                self._say(f"data: resuming at step {s.step:,}: {change['change']}")
        if self.phase_log is not None and s.step < end:
            self._say(self.phase_log.at_start(s.step + 1))
        bar = tqdm(
            total=c.max_steps,
            initial=s.step,
            desc=f"train {self.model.config.positional}",
            unit="step",
            disable=not progress,
            dynamic_ncols=True,
        )
        last_saved = s.step if resumed else -1
        self.batches = iter(self.loader)
        try:
            self.model.train()
            with DeferredInterrupt() as interrupt:  # Ctrl-C: finish the step, save it, then stop
                while s.step < end:
                    self._step(bar)
                    if interrupt.requested or s.step % c.checkpoint_interval == 0 or s.step == end:
                        self.checkpoint()
                        last_saved = s.step
                    if interrupt.requested:
                        raise KeyboardInterrupt
        finally:
            bar.close()
        if last_saved != s.step:
            self.checkpoint()

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        while True:
            try:
                return next(self.batches)
            except StopIteration:  # the epoch is over: the next one, reshuffled
                self.state.epoch += 1
                self.loader.set_epoch(self.state.epoch)
                self.batches = iter(self.loader)

    def _step(self, bar) -> None:
        """One optimizer step (and an evaluation when due); tokens/s counts loading and the step only."""
        c, s = self.config, self.state
        t_start = time.perf_counter()
        inputs, targets = to_device(self._next_batch(), self.device)  # (B,T),(B,T) of this rank
        lr = lr_at(s.step, c)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with autocast(self.device, self.precision):
            loss = self.step_model(inputs, targets)  # (B,T),(B,T) -> scalar
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP: gradients are averaged over the ranks here
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        self.optimizer.step()
        if self.counter is not None:  # beside the step count: an interrupted step counts neither
            self.counter.add(inputs)
        loss = self.dist.mean(loss)  # the global batch's loss, as one process with all of it would log
        tokens = c.batch_size * c.max_length * self.dist.world_size
        s.step += 1
        s.tokens_seen += tokens
        tok_s = tokens / max(time.perf_counter() - t_start, 1e-9)
        s.log["train"].append(
            {"step": s.step, "tokens": s.tokens_seen, "loss": loss.item(), "lr": lr, "tokens_per_s": tok_s}
        )
        if self.phase_log is not None:  # a phased mixture: the phase of the step, and a line when one starts
            s.log["train"][-1].update(self.phase_log.entry(s.step))
            line = self.phase_log.starts_in(s.step)
            if line:
                self._say(line)
        val = s.last_loss("val")
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{val:.3f}" if val is not None else "-", tok_s=f"{tok_s:,.0f}")
        if s.step % c.eval_interval == 0 or s.step == c.max_steps:
            self._evaluate()

    def _say(self, line: str) -> None:
        """A log line (rank 0): above the progress bar, and to the ``tokembed.training`` logger."""
        if not self.dist.is_main:
            return
        _log.info(line)
        if self.progress:
            from tqdm.auto import tqdm

            tqdm.write(line)

    def _evaluate(self) -> None:
        if self.data.val is None or not self.dist.is_main:
            return
        c = self.config
        with autocast(self.device, self.precision):
            val = evaluate_tokens(
                self.model,
                self.data.val,
                length=c.max_length,
                batch_size=c.batch_size,
                max_windows=c.eval_batches * c.batch_size * self.dist.world_size,
            )["loss"]
        self.model.train()
        self.state.log["val"].append({"step": self.state.step, "loss": val})

    def checkpoint(self) -> None:
        """Rank 0 writes the checkpoint; the other ranks wait for it (a resume then finds it whole)."""
        counter = self._global_counts()  # every rank: a collective
        if self.dist.is_main:
            self._write_checkpoint(counter)
        self.dist.barrier()

    def _write_checkpoint(self, counter: TokenCounter | None) -> None:
        s = self.state
        log = s.log
        _log_isotropy(log, s.step, self.model, counter)
        save_checkpoint(
            self.config.out,
            self.model,
            train=self.config.to_dict(),
            tokenizer=self.data.tokenizer.to_dict(),
            step=s.step,
            tokens_seen=s.tokens_seen,
            optimizer=self.optimizer,
            state=s.to_dict(self.loader),
            log=log,
            extra_files={COUNTS_FILE: counter.write} if counter is not None else None,
            keep=self.config.keep_checkpoints,
        )


def _log_isotropy(log: dict, step: int, model: GPT, counter: TokenCounter | None) -> None:
    """Append the token table's isotropy at this step to ``log["isotropy"]`` (once per step)."""
    from tokembed.embeddings.isotropy import isotropy_of_table

    history = log.setdefault("isotropy", [])
    if history and history[-1]["step"] == step:
        return
    with torch.no_grad():
        iso = isotropy_of_table(
            model.embed.token.weight, None if counter is None else counter.counts, min_count=MIN_COUNT
        )
    history.append({"step": step, **{k: None if v is None else v.to_dict() for k, v in iso.items()}})


class _LossStep(torch.nn.Module):
    """``GPT.loss`` as a module's forward: what DistributedDataParallel and torch.compile wrap."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model.loss(inputs, targets)  # (B,T),(B,T) -> scalar


def _step_model(model: GPT, device: DeviceConfig, dist: Distributed, where: torch.device) -> torch.nn.Module:
    """The training step's module: the loss, wrapped in DDP across ranks and compiled when asked."""
    step: torch.nn.Module = _LossStep(model)
    if dist.active:
        from torch.nn.parallel import DistributedDataParallel

        # Buffers (RoPE frequencies, sinusoid tables) are constants: nothing to broadcast each step.
        ids = [where.index] if where.type == "cuda" else None
        step = DistributedDataParallel(step, device_ids=ids, forward_sync_buffers=False)
    if device.compile:
        step = torch.compile(step)
    return step


def _check_resumable(saved: dict, given: TrainConfig) -> None:
    old, new = TrainConfig.from_dict(saved).to_dict(), given.to_dict()
    # A phased mixture may change the phases after the resume point: the loader decides, at the saved position.
    skip = (*RESUMABLE_CHANGES, "data") if schedule_decides(old["data"], new["data"]) else RESUMABLE_CHANGES
    diff = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in old if k not in skip and old[k] != new[k]]
    if diff:
        raise ValueError(
            f"cannot resume with a different training setup ({'; '.join(diff)}); resume with the checkpoint's values or train into a new --out"
        )


def _optimizer(model: GPT, config: TrainConfig) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices and embedding tables
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # biases, LayerNorm gains
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # fused: one kernel per tensor; on a CPU the optimizer step is ~30x faster than the foreach path
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=True)


def _init_from_gpt2(model: GPT, path: str) -> None:
    from tokembed.model.gpt2_weights import load_gpt2_embeddings

    tables = load_gpt2_embeddings(path)
    wte, wpe = tables["wte"], tables["wpe"]
    c = model.config
    if tuple(wte.shape) != (c.vocab_size, c.dim):
        raise ValueError(
            f"GPT-2 token table {path} has shape {tuple(wte.shape)}, the model needs ({c.vocab_size}, {c.dim}); use --dim {wte.shape[1]}"
        )
    with torch.no_grad():
        model.embed.token.weight.copy_(wte)
        if positional_scheme(c.positional).bounded:  # a table of positions, like GPT-2's wpe
            if wpe.shape[1] != c.dim or wpe.shape[0] < c.context_length:
                raise ValueError(
                    f"GPT-2 position table has shape {tuple(wpe.shape)}, the model needs at least ({c.context_length}, {c.dim})"
                )
            model.embed.position.weight.copy_(wpe[: c.context_length])
