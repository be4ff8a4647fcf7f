"""Validation loss and perplexity of a GPT at the training length and beyond.

Text is cut into non-overlapping windows of ``length`` tokens (each predicting the next token at
every position, as in training) and the cross-entropy is averaged over every predicted token.
A model with learned absolute positions has no row for positions past its table: at those
lengths it is reported as not applicable, with the reason, instead of crashing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from tokembed._checks import check_positive_int
from tokembed.embeddings.names import positional_scheme
from tokembed.embeddings.rotary import RotaryEmbedding
from tokembed.model.gpt import GPT

__all__ = ["evaluate", "evaluate_tokens", "rope_scaled"]


@torch.no_grad()
def evaluate_tokens(
    model: GPT, tokens: np.ndarray | torch.Tensor, *, length: int, batch_size: int = 8, max_windows: int | None = None
) -> dict:
    """Mean next-token cross-entropy of ``model`` over non-overlapping windows of ``tokens``.

    Args:
        model: the GPT (put in eval mode here, and left in it).
        tokens: (N,) token ids.
        length: window length T; windows start at 0, T, 2T, ... while T + 1 tokens remain.
        batch_size: windows per forward pass.
        max_windows: evaluate at most this many windows (the first ones).

    Returns:
        ``{"length", "loss", "perplexity", "windows", "tokens"}`` (tokens = predictions scored).
    """
    check_positive_int("length", length)
    check_positive_int("batch_size", batch_size)
    ids = torch.as_tensor(
        np.asarray(tokens, dtype=np.int64) if not isinstance(tokens, torch.Tensor) else tokens, dtype=torch.long
    )
    n_windows = len(range(0, len(ids) - length, length))
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    if n_windows == 0:
        raise ValueError(
            f"the validation text has {len(ids)} tokens, fewer than one window of length {length} needs ({length + 1}); evaluate shorter lengths or on more text"
        )
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for first in range(0, n_windows, batch_size):
        starts = torch.arange(first, min(first + batch_size, n_windows)) * length  # (b,)
        offsets = torch.arange(length + 1)  # (T+1,)
        win = ids[starts[:, None] + offsets].to(device)  # (b,T+1): window arithmetic, no copies per window
        total += model.loss(win[:, :-1], win[:, 1:], reduction="sum").item()  # (b,T),(b,T) -> summed nats
        count += win.shape[0] * length
    loss = total / count
    return {
        "length": length,
        "loss": loss,
        "perplexity": math.exp(min(loss, 700.0)),
        "windows": n_windows,
        "tokens": count,
    }


class rope_scaled:
    """Context manager: evaluate a RoPE model with ``scaling`` by ``factor``, then restore it."""

    def __init__(self, model: GPT, scaling: str | None, factor: float) -> None:
        self.modules = [m for m in model.modules() if isinstance(m, RotaryEmbedding)]
        self.scaling, self.factor = scaling, factor

    def __enter__(self) -> rope_scaled:
        self.saved = [(m.scaling, m.factor) for m in self.modules]
        for m in self.modules:
            m.set_scaling(self.scaling, self.factor)
        return self

    def __exit__(self, *exc) -> None:
        for m, (s, f) in zip(self.modules, self.saved):
            m.set_scaling(s, f)


def evaluate(
    checkpoint: str | Path | tuple[GPT, dict],
    *,
    lengths: list[int],
    data: str | Path | None = None,
    batch_size: int = 8,
    max_windows: int | None = None,
    max_tokens: int | None = None,
    rope_scaling: str | None = None,
) -> list[dict]:
    """Validation loss and perplexity of a checkpoint at each length.

    Args:
        checkpoint: a checkpoint directory, or ``(model, config)`` from ``load_checkpoint``.
        lengths: window lengths to evaluate (e.g. 1x, 2x, 4x, 8x the training length).
        data: a shard folder or text file; default the checkpoint's training data, whose
            validation part is used (a text file's last ``val_fraction`` of tokens).
        batch_size: windows per forward pass.
        max_windows: at most this many windows per length.
        max_tokens: at most ``max_tokens // length`` windows per length (at least 1): about the
            same number of scored tokens at every length.
        rope_scaling: for RoPE models past the training length: ``"linear"`` (position
            interpolation) or ``"ntk"``, with factor = length / training length.

    Returns:
        One dict per length: ``length``, ``loss``, ``perplexity``, ``windows``, ``tokens``, or
        ``loss=None`` with ``note`` when the model cannot read that far.
    """
    from tokembed.model.checkpoint import load_checkpoint
    from tokembed.training.data import check_same_tokenizer, load_training_data

    model, config = load_checkpoint(checkpoint) if not isinstance(checkpoint, tuple) else checkpoint
    if not lengths:
        raise ValueError("lengths is empty: give at least one window length, e.g. --lengths 64,128")
    for n in lengths:
        check_positive_int("length", n)
    train_cfg = config.get("train", {})
    train_length = int(train_cfg.get("max_length") or model.config.context_length)
    source = data if data is not None else train_cfg.get("data")
    if source is None:
        raise ValueError("the checkpoint does not name its training data; pass data= (--data)")
    if rope_scaling is not None and positional_scheme(model.config.positional).acts != "rotate":
        raise ValueError(f"rope_scaling applies to rope models; this one uses {model.config.positional!r} positions")
    split = load_training_data(
        source, val_fraction=float(train_cfg.get("val_fraction", 0.1)), tokenizer=train_cfg.get("tokenizer")
    )
    check_same_tokenizer(config, split.tokenizer, Path(str(checkpoint if not isinstance(checkpoint, tuple) else "")))
    if split.val is None:
        raise ValueError(f"{source} has no validation split to evaluate on; prepare it with one or pass a text file")
    rows = []
    for length in lengths:
        limit = model.max_length
        if limit is not None and length > limit:
            rows.append(
                {
                    "length": length,
                    "loss": None,
                    "perplexity": None,
                    "note": f"learned positions stop at {limit}: the table has no row for position {limit} and beyond",
                }
            )
            continue
        windows = max_windows
        if max_tokens is not None:
            windows = max(1, max_tokens // length) if windows is None else min(windows, max(1, max_tokens // length))
        factor = max(1.0, length / train_length)
        if rope_scaling is not None and factor > 1.0:
            with rope_scaled(model, rope_scaling, factor):
                row = evaluate_tokens(model, split.val, length=length, batch_size=batch_size, max_windows=windows)
            row["note"] = f"rope {rope_scaling} scaling x{factor:g}"
        else:
            row = evaluate_tokens(model, split.val, length=length, batch_size=batch_size, max_windows=windows)
        rows.append(row)
    return rows
