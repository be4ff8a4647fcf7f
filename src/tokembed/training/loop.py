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

What the run is (new or resumed, its settings, data and model) is settled first by
`tokembed.training.setup`; Ctrl-C and SIGTERM stop it at a step boundary (`tokembed.training.interrupt`);
progress is a bar on a terminal and plain lines in a log (`tokembed.training.progress`).

Devices and ranks (``DeviceConfig``, ``tokembed.training.device``): the model trains on CPU, CUDA or
MPS, optionally under bf16 autocast and ``torch.compile``; under ``torchrun`` each rank trains on its
own part of every global batch (``global_batch_size`` windows, ``batch_size`` per rank) with
DistributedDataParallel, and rank 0 alone evaluates and writes checkpoints. Checkpoints hold CPU
tensors whatever the device, and resume on any number of ranks that divides the global batch.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tokembed._checks import check_positive_int
from tokembed.data.loader import create_dataloader
from tokembed.embeddings.registry import positional_scheme
from tokembed.model.checkpoint import read_checkpoint_config, save_checkpoint, verify_checkpoint
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT
from tokembed.training.config import TrainConfig, lr_at
from tokembed.training.counts import COUNTS_FILE, MIN_COUNT, TokenCounter
from tokembed.training.data import TrainingData, data_identity, load_training_data, weighted_share
from tokembed.training.device import DeviceConfig, Distributed, autocast, init_distributed, resolve_device, to_device
from tokembed.training.evaluation import evaluate_sources
from tokembed.training.interrupt import DeferredInterrupt, TrainingInterrupted
from tokembed.training.phase_log import PhaseLog
from tokembed.training.progress import Counter, Every, Progress
from tokembed.training.setup import Saved, out_of, saved_run, settle_config, settle_model
from tokembed.training.state import TrainState

__all__ = ["TrainResult", "train"]


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
    config: TrainConfig | Mapping[str, Any],
    model_config: GPTConfig | Mapping[str, Any] | None = None,
    *,
    resume: bool | str = False,
    stop_at: int | None = None,
    progress: bool | str = True,
    log_every: str | int = "30s",
    device: DeviceConfig | None = None,
    allow_unverified: bool = False,
) -> TrainResult:
    """Train a GPT and write checkpoints to ``config.out``; or continue the checkpoint there.

    Args:
        config: the training setup: a `TrainConfig`, or a mapping of the options you choose (``out`` at
            least): the others come from the checkpoint when resuming (``data`` too), else the defaults.
        model_config: the model, a `GPTConfig` or a mapping of the options you choose. The vocabulary and
            end-of-text id are the data's tokenizer's (a `GPTConfig` with another vocabulary is refused,
            naming both); ``context_length`` defaults to ``max_length``. Resuming: the checkpoint's model
            (options given must agree with it).
        resume: continue the checkpoint in ``out`` (required if it exists); ``"auto"``: continue it when it
            exists, else start (for job scripts that restart themselves). The data is recognised by its
            content: a copy elsewhere resumes, other data at the same path is refused.
        stop_at: stop after this step as if interrupted (a checkpoint is written); the schedule
            still runs to ``max_steps``, so a later ``resume=True`` continues exactly.
        progress: on rank 0, a progress bar when stderr is a terminal, else plain log lines (`Progress`);
            ``"bar"``, ``"lines"``, or False for nothing.
        log_every: how often a line is logged without a terminal: steps (``50``) or seconds (``"30s"``).
        device: where and how to compute (default ``DeviceConfig()``: the best device, fp32, eager).
            Under torchrun (``WORLD_SIZE`` > 1) the run is data-parallel over the ranks; the global batch
            (``global_batch_size``, else ``batch_size`` x ranks) is what a resumed run keeps, on any
            number of ranks.
        allow_unverified: resume a checkpoint that has no sha256.json (written before tokembed 0.2).

    Returns:
        A ``TrainResult``.

    Raises:
        TrainingInterrupted: Ctrl-C or SIGTERM (on any rank): the step in progress was finished and saved
            (model, optimizer, RNG and loader at that one step: it resumes exactly), on every rank at the
            same step. A `KeyboardInterrupt`.
    """
    out = out_of(config)
    saved = saved_run(out, resume=resume, allow_unverified=allow_unverified)
    if stop_at is not None:
        check_positive_int("stop_at", stop_at)
    every = Every.parse(log_every)
    device = device or DeviceConfig()
    dist = init_distributed(device.device)
    try:
        config = settle_config(config, saved, world_size=dist.world_size, model_options=model_config)
        if stop_at is not None and stop_at > config.max_steps:
            raise ValueError(
                f"stop_at (--stop-at) {stop_at} is beyond the run's last step, max_steps (--steps) "
                f"{config.max_steps}: give a step <= {config.max_steps}, or leave it out to run to the end"
            )
        run = _start(config, model_config, saved, device=device, dist=dist)
        end = config.max_steps if stop_at is None else stop_at
        report = Progress.resolve(progress if dist.is_main else False, every=every)
        run.loop(end, progress=report, resumed=saved is not None)
    finally:
        dist.close()
    s = run.state
    return TrainResult(out, s.step, s.tokens_seen, s.last_loss("train"), s.last_loss("val"), s.log, dist.is_main)


def _start(config: TrainConfig, model_config, saved: Saved | None, *, device: DeviceConfig, dist: Distributed) -> _Run:
    """Read the data, settle the model (its vocabulary is the data's), build the run and restore a saved one."""
    # Validation: eval_batches global batches, shared by the sources by weight; the same for any world size.
    data = load_training_data(
        config.data,
        val_fraction=config.val_fraction,
        max_val_windows=config.eval_batches * config.rank_batch(dist.world_size) * dist.world_size,
        length=config.max_length,
        tokenizer=config.tokenizer,
    )
    model = settle_model(model_config, saved, config, data.tokenizer)
    run = _Run(config, model, data, new=saved is None, device=device, dist=dist)
    if saved is not None:
        out = Path(config.out)
        verify_checkpoint(out)  # every file exactly as saved (after the setup checks), or the damaged one named
        run.state.restore(out, run.model, run.optimizer, run.loader)
        run.restore_counts(out)
        for note in run.loader.resume_notes:  # a phased mixture's schedule changed after the resume point
            run.state.log.setdefault("schedule", []).append({"step": run.state.step, "change": note})
    return run


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
        self.batch_size = config.rank_batch(dist.world_size)  # windows per step on this rank
        self.global_batch_size = self.batch_size * dist.world_size
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
            batch_size=self.batch_size,
            max_length=config.max_length,
            stride=config.window_stride,
            packing=config.packing,
            materialize=config.materialize_packing,
            output="documents" if config.packing else "pairs",  # packing: the model reads the documents' bounds
            shuffle=True,
            seed=config.seed,
            drop_last=True,
            rank=dist.rank,
            world_size=dist.world_size,
            pin_memory=self.device.type == "cuda",
        )
        if len(self.loader) == 0:
            raise ValueError(
                f"{config.data} gives no full batch of {self.batch_size} windows of {config.max_length} tokens; lower batch_size or max_length"
            )
        self.phase_log = PhaseLog.of(self.loader)  # a phased mixture: which phase each step reads
        if self.phase_log is not None:
            self.phase_log.check_end(config.max_steps, config.max_length)
        self.state = TrainState()
        self.counter: TokenCounter | None = TokenCounter(model_config.vocab_size)
        self.batches: Iterator[Any] = iter(())  # (inputs, targets), or DocumentBatch es with packing
        self.rate = [0, 0.0]
        self.progress = Progress("off")  # the loop's (rank 0 shows it)
        # What the data is, whatever its path (rank 0 writes it with each checkpoint; resume compares it).
        self.identity = data_identity(config.data) if dist.is_main else None

    def restore_counts(self, out: Path) -> None:
        """Continue the checkpoint's token counts (rank 0 holds them; the ranks' counts add up at each save).

        A checkpoint without them gives a run without them, not counts of part of the run.
        """
        if not (out / COUNTS_FILE).is_file():
            import warnings

            warnings.warn(f"{out} records no token counts (an older tokembed): this run records none", stacklevel=2)
            self.counter = None
        elif self.dist.is_main and self.counter is not None:
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

    def loop(self, end: int, *, progress: Progress, resumed: bool) -> None:
        """Train until step ``end``, evaluating and checkpointing on schedule.

        Ctrl-C or SIGTERM on any rank: every rank finishes the step in progress, the step is saved and
        `TrainingInterrupted` raised (see `tokembed.training.interrupt`); a second Ctrl-C stops at once,
        keeping the last checkpoint.
        """
        c, s = self.config, self.state
        self.progress = progress
        what = f"resuming {c.out} at step {s.step}" if resumed else f"training into {c.out}"
        progress.line(
            f"{what}: GPT with {self.model.num_parameters():,} parameters ({self.model.config.positional} positions); {self.data.description}; {self._batch_words()}"
        )
        for change in s.log.get("schedule", []):  # a phased mixture's schedule changed after the resume point
            if change["step"] == s.step:
                progress.line(f"data: resuming at step {s.step:,}: {change['change']}")
        if self.phase_log is not None and s.step < end:
            progress.line(self.phase_log.at_start(s.step + 1))
        counter = progress.counter(total=c.max_steps, initial=s.step, desc="train", unit="step")
        self.rate = [0, 0.0]  # tokens and seconds since the last line shown
        last_saved = s.step if resumed else -1
        if resumed and self._evaluate_if_missing(progress):
            last_saved = -1  # saved again, with it (a run stopped at its last step has nothing else to save)
        self.batches = iter(self.loader)
        interrupt = DeferredInterrupt()
        try:
            self.model.train()
            with interrupt:  # Ctrl-C, SIGTERM: finish the step, save it, then stop
                first = s.step
                while s.step < end:
                    signum = self._step(interrupt)
                    self._show(counter, force=s.step == first + 1 or s.step == end)
                    if signum:  # some rank was asked to stop: every rank saves this step and stops
                        self.checkpoint()
                        raise TrainingInterrupted(signum, s.step, Path(c.out))
                    if self._evaluation_due():
                        self._evaluate(progress)
                    if s.step % c.checkpoint_interval == 0 or s.step == end:
                        self.checkpoint()
                        last_saved = s.step
        except KeyboardInterrupt as e:
            if isinstance(e, TrainingInterrupted) or not interrupt.signal:
                raise
            raise TrainingInterrupted(signal.SIGINT, _saved_step(c.out), Path(c.out), saved=False) from None
        finally:
            counter.close()
        if last_saved != s.step:
            self.checkpoint()

    def _batch_words(self) -> str:
        w = self.dist.world_size
        return f"global batch {self.global_batch_size} windows ({self.batch_size} per rank x {w} rank{'s' if w != 1 else ''})"

    def _next_batch(self) -> Any:
        while True:
            try:
                return next(self.batches)
            except StopIteration:  # the epoch is over: the next one, reshuffled
                self.state.epoch += 1
                self.loader.set_epoch(self.state.epoch)
                self.batches = iter(self.loader)

    def _step(self, interrupt: DeferredInterrupt) -> int:
        """One optimizer step; tokens/s counts loading and the step only.

        Returns:
            The stop signal any rank has received by now (0: none): every rank learns it from the same
            all-reduce that averages the loss, so all of them stop after the same step.
        """
        c, s = self.config, self.state
        t_start = time.perf_counter()
        batch = self._next_batch()  # (inputs, targets), or with packing a DocumentBatch
        if c.packing:  # attention within documents, positions restarting at each: from the loader's metadata
            batch = (batch.inputs, batch.targets, batch.document_ids())
        inputs, targets, *documents = to_device(batch, self.device)  # (B,T),(B,T)[,(B,T)] of this rank
        lr = lr_at(s.step, c)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with autocast(self.device, self.precision):
            loss = self.step_model(inputs, targets, *documents)  # (B,T),(B,T)[,(B,T)] -> scalar
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP: gradients are averaged over the ranks here
        if c.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip)
        self.optimizer.step()
        if self.counter is not None:  # beside the step count: an interrupted step counts neither
            self.counter.add(inputs)
        # The global batch's loss (as one process with all of it would log), and whether any rank must stop.
        mean_loss, signum = self._share(loss, interrupt.signal)
        tokens = self.global_batch_size * c.max_length
        s.step += 1
        s.tokens_seen += tokens
        seconds = time.perf_counter() - t_start
        self.rate[0] += tokens
        self.rate[1] += seconds
        s.log["train"].append(
            {
                "step": s.step,
                "tokens": s.tokens_seen,
                "loss": mean_loss,
                "lr": lr,
                "tokens_per_s": tokens / max(seconds, 1e-9),
            }
        )
        if self.phase_log is not None:  # a phased mixture: the phase of the step, and a line when one starts
            s.log["train"][-1].update(self.phase_log.entry(s.step))
            line = self.phase_log.starts_in(s.step)
            if line:
                self.progress.line(line)
        return signum

    def _share(self, loss: torch.Tensor, signum: int) -> tuple[float, int]:
        """The loss averaged over the ranks and the stop signal any rank got, in one all-reduce (the one the
        loss needed anyway, one number longer: asking about signals costs no collective of its own).

        The second number sums each rank's flag: 1 for Ctrl-C, ``world_size + 1`` for SIGTERM, so a sum over
        ``world_size`` means some rank got SIGTERM (which wins: the scheduler's SIGKILL follows it).
        """
        if not self.dist.active:
            return loss.item(), signum
        world = self.dist.world_size
        flag = {0: 0.0, signal.SIGINT: 1.0, signal.SIGTERM: float(world + 1)}[signum]
        packed = torch.stack([loss.detach().float(), torch.tensor(flag, device=loss.device)])  # (2,)
        torch.distributed.all_reduce(packed, op=torch.distributed.ReduceOp.SUM)
        flags = packed[1].item()
        stop = signal.SIGTERM if flags > world else signal.SIGINT if flags > 0 else 0
        return (packed[0] / world).item(), stop

    def _show(self, counter: Counter, *, force: bool) -> None:
        tokens, seconds = self.rate
        if counter.update(
            1, f"loss {self.state.last_loss('train'):.4f} | {tokens / max(seconds, 1e-9):,.0f} tok/s", force=force
        ):
            self.rate = [0, 0.0]

    def _evaluate(self, progress: Progress) -> None:
        """The validation loss of each source and their weighted total (rank 0), logged and shown."""
        if not self.data.validation or not self.dist.is_main:
            return
        c = self.config
        budget = c.eval_batches * self.global_batch_size  # windows in all, shared by the sources by weight
        sources = self.data.validation
        if self.phase_log is not None:  # the same windows each time; the total weighs them as the phase in effect
            sources = self.phase_log.weigh(sources, self.state.step)
        with autocast(self.device, self.precision):
            row = evaluate_sources(
                self.model,
                sources,
                length=c.max_length,
                batch_size=self.batch_size,
                max_windows=[weighted_share(budget, v.weight) for v in self.data.validation],
            )
        self.model.train()
        entry = {"step": self.state.step, "loss": row["loss"]}
        if len(row["sources"]) > 1:
            entry["sources"] = {r["source"]: r["loss"] for r in row["sources"]}
        self.state.log["val"].append(entry)
        each = ", ".join(f"{Path(k).name} {v:.4f}" for k, v in entry.get("sources", {}).items())
        progress.line(
            f"train: step {self.state.step}: validation loss {row['loss']:.4f}" + (f" ({each})" if each else "")
        )

    def _evaluation_due(self) -> bool:
        """Whether the step just taken is one the schedule evaluates after: every ``eval_interval``, and the last."""
        c, step = self.config, self.state.step
        return step % c.eval_interval == 0 or step == c.max_steps

    def _evaluate_if_missing(self, progress: Progress) -> bool:
        """A run stopped by a signal saved before the evaluation due at its step: do it first.

        Returns:
            Whether it was missing: the same on every rank (each read the same log), so every rank then takes part
            in the checkpoint that saves it. A run without validation data misses none (its log has no "val" rows:
            counting them missing saved the step again at each resume, pruning an older kept checkpoint).
        """
        s = self.state
        due = bool(self.data.validation) and s.step > 0 and self._evaluation_due()
        missing = due and (not s.log["val"] or s.log["val"][-1]["step"] != s.step)
        if missing:
            self._evaluate(progress)
        return missing

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
            state=s.to_dict(self.loader, data=self.identity),
            log=log,
            extra_files={COUNTS_FILE: counter.write} if counter is not None else None,
            keep=self.config.keep_checkpoints,
        )


def _saved_step(out: str) -> int:
    """The step the checkpoint in ``out`` holds (0 when there is none yet)."""
    try:
        return int(read_checkpoint_config(out)["step"])
    except (OSError, ValueError, KeyError):
        return 0


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

    def forward(
        self, inputs: torch.Tensor, targets: torch.Tensor, document_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.model.loss(inputs, targets, document_ids=document_ids)  # (B,T),(B,T)[,(B,T)] -> scalar


def _step_model(model: GPT, device: DeviceConfig, dist: Distributed, where: torch.device) -> torch.nn.Module:
    """The training step's module: the loss, wrapped in DDP across ranks and compiled when asked."""
    step: Any = _LossStep(model)  # a module, or what torch.compile makes of it
    if dist.active:
        from torch.nn.parallel import DistributedDataParallel

        # Buffers (RoPE frequencies, sinusoid tables) are constants: nothing to broadcast each step.
        ids = [where.index] if where.type == "cuda" else None
        step = DistributedDataParallel(step, device_ids=ids, forward_sync_buffers=False)
    if device.compile:
        step = torch.compile(step)
    return step


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
        position = model.embed.position  # a bounded scheme's module is a table of positions, like GPT-2's wpe
        if positional_scheme(c.positional).bounded and position is not None:
            if wpe.shape[1] != c.dim or wpe.shape[0] < c.context_length:
                raise ValueError(
                    f"GPT-2 position table has shape {tuple(wpe.shape)}, the model needs at least ({c.context_length}, {c.dim})"
                )
            position.weight.copy_(wpe[: c.context_length])
