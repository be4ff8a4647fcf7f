"""Validation loss and perplexity of a GPT at the training length and beyond.

Two ways to cut the validation tokens into windows of ``length`` (Press et al. 2022, appendix B):

- ``nonoverlapping``: windows at 0, T, 2T, ...; every position of a window is scored, as in
  training. The first tokens of each window see little context (the "early token curse"), and
  fewer of them there are at longer T, which flatters long windows.
- ``sliding``: windows every ``stride`` tokens (default T/2); each window scores only its last
  ``stride`` tokens, so every scored token sees at least ``T - stride`` tokens of context. Stride 1
  gives every token exactly T - 1 (the most exact and the most expensive: T forward positions per token).

A model with learned absolute positions has no row for positions past its table: at those
lengths it is reported as not applicable (``loss`` None), with the reason, instead of crashing.

Data of several sources (a `tokembed.Mixture`) is scored source by source: each source's loss over
windows of its own validation split, and the total weighted by the mixture (`evaluate_sources`; training
logs the same numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokembed._checks import check_positive_int
from tokembed.embeddings.names import positional_scheme
from tokembed.embeddings.rotary import RotaryEmbedding
from tokembed.model.gpt import GPT
from tokembed.model.loss import linear_cross_entropy
from tokembed.training.data import TrainingData, ValidationSource, phase_weighted
from tokembed.training.device import resolve_device
from tokembed.training.progress import Progress

__all__ = ["EVALUATIONS", "evaluate", "evaluate_sources", "evaluate_tokens", "rope_scaled"]

EVALUATIONS = ("nonoverlapping", "sliding")
SCORES = ("loss", "perplexity", "windows", "tokens")
EVAL_EVERY = "30s"  # evaluation lines without a terminal: one per length, and one every 30 s within a long one


@torch.no_grad()
def evaluate_tokens(
    model: GPT,
    tokens: np.ndarray | torch.Tensor,
    *,
    length: int,
    batch_size: int = 8,
    max_windows: int | None = None,
    stride: int | None = None,
    progress: bool | str | Progress = False,
) -> dict:
    """Mean next-token cross-entropy of ``model`` over windows of ``tokens``.

    Args:
        model: the GPT (put in eval mode here, and left in it).
        tokens: (N,) token ids.
        length: window length T; windows start at 0, S, 2S, ... while T + 1 tokens remain.
        batch_size: windows per forward pass.
        max_windows: evaluate at most this many windows (the first ones).
        stride: S. None (or T): non-overlapping windows, every position scored. S < T: a sliding
            window that scores only the last S positions of each window (each sees >= T - S tokens).
        progress: a progress bar over the windows (`Progress.resolve`: lines without a terminal).

    Returns:
        ``{"length", "stride", "loss", "perplexity", "windows", "tokens"}`` (tokens = predictions scored).
    """
    check_positive_int("length", length)
    check_positive_int("batch_size", batch_size)
    stride = length if stride is None else min(check_positive_int("stride", stride), length)
    ids = torch.as_tensor(
        np.asarray(tokens, dtype=np.int64) if not isinstance(tokens, torch.Tensor) else tokens, dtype=torch.long
    )
    n_windows = len(range(0, len(ids) - length, stride))
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    if n_windows == 0:
        raise ValueError(
            f"the validation text has {len(ids)} tokens, fewer than one window of length {length} needs ({length + 1}); evaluate shorter lengths or on more text"
        )
    model.eval()
    total, count = _scored(model, ids, length, stride, n_windows, batch_size, Progress.resolve(progress))
    loss = total / count
    return {
        "length": length,
        "stride": stride,
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "windows": n_windows,
        "tokens": count,
    }


def _scored(
    model: GPT, ids: torch.Tensor, length: int, stride: int, n_windows: int, batch_size: int, progress: Progress
) -> tuple[float, int]:
    """Summed nats and the number of scored predictions over ``n_windows`` windows every ``stride`` tokens."""
    device = next(model.parameters()).device
    offsets = torch.arange(length + 1)  # (T+1,)
    total, count = 0.0, 0
    bar = progress.counter(total=n_windows, desc=f"eval T={length}", unit="window", every=EVAL_EVERY, leave=False)
    for first in range(0, n_windows, batch_size):
        starts = torch.arange(first, min(first + batch_size, n_windows)) * stride  # (b,)
        win = ids[starts[:, None] + offsets].to(device)  # (b,T+1): window arithmetic, no copies per window
        if stride == length:
            total += model.loss(win[:, :-1], win[:, 1:], reduction="sum").item()  # (b,T),(b,T) -> summed nats
        else:  # only the last `stride` predictions of each window, which see >= T - stride tokens
            h = model.hidden(win[:, :-1])[:, -stride:]  # (b,S,D)
            targets = win[:, -stride:]  # (b,S)
            total += linear_cross_entropy(h.flatten(0, 1), model.head.weight, targets.flatten(), reduction="sum").item()
        count += win.shape[0] * stride
        bar.update(win.shape[0])
    bar.close()
    return total, count


def evaluate_sources(
    model: GPT,
    sources: Sequence[ValidationSource],
    *,
    length: int,
    batch_size: int = 8,
    max_windows: int | Sequence[int | None] | None = None,
    stride: int | None = None,
    progress: bool | str | Progress = False,
) -> dict:
    """Each source's loss over windows of its own tokens, and the total weighted by the mixture.

    What training logs as its validation loss and what ``evaluate`` reports, so the two agree. One
    source (a shard folder, a text file) gives its plain loss.

    Args:
        sources: the validation tokens of each source with its weight (`TrainingData.validation`).
        max_windows: at most this many windows of each source, or one limit per source.
        length, batch_size, stride, progress: as `evaluate_tokens` takes them.

    Returns:
        ``{"length", "stride", "loss", "perplexity", "windows", "tokens", "sources"}``: ``loss`` is
        ``sum(w_i * loss_i) / sum(w_i)``, windows and tokens add up, and ``sources`` lists
        ``{"source", "weight", "loss", "perplexity", "windows", "tokens"}`` per source.
    """
    if not sources:
        raise ValueError("there are no validation tokens to evaluate on; prepare the data with a validation split")
    limits = list(max_windows) if isinstance(max_windows, Sequence) else [max_windows] * len(sources)
    if len(limits) != len(sources):
        raise ValueError(f"max_windows gives {len(limits)} limits for {len(sources)} sources; give one per source")
    rows = []
    for source, limit in zip(sources, limits):
        try:
            row = evaluate_tokens(
                model, source.tokens, length=length, batch_size=batch_size, max_windows=limit, stride=stride,
                progress=progress,
            )  # fmt: skip
        except ValueError as e:
            if len(sources) == 1:
                raise
            raise ValueError(f"source {source.name}: {e}") from None
        rows.append({"source": source.name, "weight": source.weight, **{k: row[k] for k in SCORES}})
    weight = math.fsum(r["weight"] for r in rows)
    loss = math.fsum(r["weight"] * r["loss"] for r in rows) / weight
    return {
        "length": length,
        "stride": row["stride"],
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "windows": sum(r["windows"] for r in rows),
        "tokens": sum(r["tokens"] for r in rows),
        "sources": rows,
    }


class rope_scaled:
    """Context manager: evaluate a RoPE model with ``scaling`` by ``factor``, then restore it.

    ``original_length`` is the trained length (YaRN and Llama 3 scale from it; default the model's context).
    """

    def __init__(self, model: GPT, scaling: str | None, factor: float, *, original_length: int | None = None) -> None:
        self.modules = [m for m in model.modules() if isinstance(m, RotaryEmbedding)]
        self.scaling, self.factor = scaling, factor
        self.original_length = original_length or model.config.context_length

    def __enter__(self) -> rope_scaled:
        self.saved = [(m.scaling, m.factor, m.original_length) for m in self.modules]
        for m in self.modules:
            m.set_scaling(self.scaling, self.factor, original_length=self.original_length)
        return self

    def __exit__(self, *exc) -> None:
        for m, (s, f, n) in zip(self.modules, self.saved):
            m.set_scaling(s, f, original_length=n)


def evaluate(
    checkpoint: str | Path | tuple[GPT, dict],
    *,
    lengths: Sequence[int] | None = None,
    data: str | Path | dict | None = None,
    batch_size: int = 8,
    max_windows: int | None = None,
    max_tokens: int | None = None,
    rope_scaling: str | None = None,
    evaluation: str = "nonoverlapping",
    stride: int | None = None,
    progress: bool | str | Progress = False,
    device: str | None = None,
    allow_unverified: bool = False,
) -> list[dict]:
    """Validation loss and perplexity of a checkpoint at each length, per source and in all.

    Args:
        checkpoint: a checkpoint directory, or ``(model, config)`` from ``load_checkpoint``.
        lengths: window lengths to evaluate (default 1x, 2x, 4x and 8x the training length).
        data: a shard folder, text file or mixture spec; default the checkpoint's training data, whose
            validation part is used (a text file's last ``val_fraction`` of tokens, each source's val split).
        batch_size: windows per forward pass.
        max_windows: at most this many windows per length, of each source.
        max_tokens: score about this many tokens per length of each source (windows = max_tokens //
            scored per window, at least 1): the same number of scored tokens at every length.
        rope_scaling: for RoPE models past the training length: ``"linear"`` (position
            interpolation), ``"ntk"``, ``"yarn"`` or ``"llama3"``, with factor = length / training length.
        evaluation: ``"nonoverlapping"`` or ``"sliding"`` (see the module docstring).
        stride: the sliding window's stride (default half of each length); only with ``"sliding"``.
        progress: a bar per length on a terminal, a line per length in a log (`Progress.resolve`).
        device: where to run: ``"auto"`` (CUDA, then MPS, then CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or
            ``"mps"`` (the model is moved there); None leaves the model where it is (a loaded checkpoint: the CPU).
        allow_unverified: load a checkpoint directory that has no sha256.json (written before tokembed 0.2).

    Returns:
        One dict per length, as `evaluate_sources` gives it (``length``, ``stride``, ``loss``,
        ``perplexity``, ``windows``, ``tokens``, ``sources``: each source's numbers and weight), with
        ``scored``: what was scored, in words; or ``loss=None`` with ``note`` when the model cannot read
        that far.
    """
    from tokembed.model.checkpoint import load_checkpoint

    check_positive_int("batch_size (--batch-size)", batch_size)
    for name, value in (("max_windows (--max-windows)", max_windows), ("max_tokens (--max-tokens)", max_tokens)):
        if value is not None:  # 0 scores nothing: the question, not the data, is wrong
            check_positive_int(name, value, hint="leave it out to score every window")
    if isinstance(checkpoint, tuple):
        model, config = checkpoint
    else:
        model, config = load_checkpoint(checkpoint, allow_unverified=allow_unverified)
    train_length = int(config.get("train", {}).get("max_length") or model.config.context_length)
    lengths = [train_length * m for m in (1, 2, 4, 8)] if lengths is None else list(lengths)
    _check_evaluate_args(model, lengths, rope_scaling, evaluation, stride)
    if device is not None:
        model.to(resolve_device(device))
    sources = _validation(checkpoint, config, data)
    scored = describe_validation(sources)
    report = Progress.resolve(progress)
    rows = []
    for length in lengths:
        limit = model.max_length
        if limit is not None and length > limit:
            note = f"learned positions stop at {limit}: the table has no row for position {limit} and beyond"
            rows.append({"length": length, "loss": None, "perplexity": None, "note": note})
            report.line(f"eval: length {length}: n/a ({note})")
            continue
        step = (stride or max(1, length // 2)) if evaluation == "sliding" else length
        windows = max_windows
        if max_tokens is not None:
            fit = max(1, max_tokens // min(step, length))
            windows = fit if windows is None else min(windows, fit)
        factor = max(1.0, length / train_length)
        scaled = rope_scaling is not None and factor > 1.0
        with rope_scaled(model, rope_scaling, factor, original_length=train_length) if scaled else _Unchanged():
            row = evaluate_sources(
                model, sources, length=length, batch_size=batch_size, max_windows=windows, stride=step,
                progress=report,
            )  # fmt: skip
        if scaled:
            row["note"] = f"rope {rope_scaling} scaling x{factor:g}"
        rows.append({**row, "scored": scored})
        report.line(_result_line(row))
    return rows


def describe_validation(sources: Sequence[ValidationSource]) -> str:
    """What is scored, in words: ``the last 10% of story.txt (513 tokens)``, or each source with its weight."""
    if len(sources) == 1:
        return f"{sources[0].what} ({len(sources[0].tokens):,} tokens)"
    parts = [f"{s.name} (weight {s.weight:.4g}, {len(s.tokens):,} tokens)" for s in sources]
    return "validation splits of " + ", ".join(parts)


def _result_line(row: dict) -> str:
    line = f"eval: length {row['length']}: loss {row['loss']:.4f}, perplexity {row['perplexity']:.2f} ({row['windows']} windows)"
    if len(row["sources"]) > 1:
        line += "; " + ", ".join(f"{Path(s['source']).name} {s['loss']:.4f}" for s in row["sources"])
    return line


class _Unchanged:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


def _check_evaluate_args(model: GPT, lengths, rope_scaling, evaluation: str, stride) -> None:
    if not lengths:
        raise ValueError("lengths is empty: give at least one window length, e.g. --lengths 64,128")
    for n in lengths:
        check_positive_int("length", n)
    scalings = positional_scheme(model.config.positional).scalings  # the scheme says which it takes (RoPE's)
    if rope_scaling is not None and not scalings:
        raise ValueError(f"rope_scaling applies to rope models; this one uses {model.config.positional!r} positions")
    if rope_scaling is not None and rope_scaling not in scalings:
        raise ValueError(f"rope scaling must be one of {', '.join(scalings)} or None, got {rope_scaling!r}")
    if evaluation not in EVALUATIONS:
        raise ValueError(f"evaluation must be one of {', '.join(EVALUATIONS)}, got {evaluation!r}")
    if stride is not None:
        check_positive_int("stride", stride)
        if evaluation != "sliding":
            raise ValueError(
                f"stride={stride} (--stride) applies to the sliding evaluation; pass evaluation='sliding' "
                "(--sliding) or drop it"
            )


def _validation(checkpoint, config: dict, data) -> list[ValidationSource]:
    """Each source's validation tokens of ``data`` (default: the checkpoint's training data) in the checkpoint's
    ids: a text file is tokenized with the checkpoint's tokenizer; data prepared with another one is an error."""
    from tokembed.tokenizer import identity_from_manifest, tokenizer_from_record
    from tokembed.training.data import load_training_data

    train_cfg = config.get("train", {})
    source = data if data is not None else train_cfg.get("data")
    if source is None:
        raise ValueError("the checkpoint does not name its training data; pass data= (--data)")
    record = config.get("tokenizer_record") or config.get("tokenizer")
    trained = identity_from_manifest(record)
    is_text = not isinstance(source, dict) and Path(source).is_file()
    text_tokenizer = (
        (tokenizer_from_record(record) if isinstance(record, dict) else trained.source) if is_text else None
    )
    split = load_training_data(source, val_fraction=float(train_cfg.get("val_fraction", 0.1)), tokenizer=text_tokenizer)
    if not split.tokenizer.same_ids(trained):
        where = "the checkpoint" if isinstance(checkpoint, tuple) else str(checkpoint)
        raise ValueError(
            f"{where} was trained on ids of {trained.describe()}, but {source} holds ids of "
            f"{split.tokenizer.describe()}; evaluate on data prepared with {trained.source} (tokembed prepare TEXT "
            f"--out DIR --tokenizer {trained.source}), or on a text file (tokenized with the checkpoint's tokenizer)"
        )
    if not split.validation:
        raise ValueError(f"{source} has no validation split to evaluate on; prepare it with one or pass a text file")
    if data is None and len(getattr(split.train, "phases", ())) > 1 and not isinstance(checkpoint, tuple):
        return _at_saved_phase(split, Path(checkpoint), train_cfg)
    return split.validation


def _at_saved_phase(split: TrainingData, checkpoint: Path, train_cfg: dict) -> list[ValidationSource]:
    """A phased mixture's validation sources weighted as the phase of the checkpoint's last step weighs them
    (as training weighed its validation total then)."""
    import json

    from tokembed.model.checkpoint import read_checkpoint_file

    state = read_checkpoint_file(checkpoint, "state.json", lambda p: json.loads(p.read_text(encoding="utf-8")))
    g, length, step = train_cfg.get("global_batch_size"), train_cfg.get("max_length"), state.get("step")
    if not (g and length and step):
        return split.validation
    mixture: Any = split.train  # a PhasedMixture
    phase = mixture.phase_at((int(step) - 1) * int(g) * int(length))  # the phase of the step's first window
    return phase_weighted(split.validation, phase, [str(p) for p in mixture.paths])
