"""TODO docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


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


def _mixture_data(spec: dict, max_val_tokens: int | None) -> TrainingData:
    """A mixture: its sources' train splits, mixed by the loader; validation: each source's val split, by weight."""
    from tokembed.data.mixture import Mixture
    from tokembed.shards.reader import open_shards

    mixture = Mixture.from_spec(spec)
    vals, n_train = [], 0
    for path, weight in zip(mixture.paths, mixture.weights):
        n_train += open_shards(path, split="train").n_tokens
        try:
            split = open_shards(path, split="val")
        except ValueError:  # no val split (a Megatron dataset has none)
            continue
        n = split.n_tokens if max_val_tokens is None else min(split.n_tokens, math.ceil(max_val_tokens * weight))
        vals.append(np.asarray(split.read(0, n), dtype=np.int64))
    val = np.concatenate(vals) if vals and sum(map(len, vals)) else None
    desc = f"{mixture!r}: train splits {n_train} tokens, val splits {0 if val is None else len(val)} tokens read"
    return TrainingData(mixture, val, desc, n_train)


def load_training_data(
    data: str | Path | dict, *, val_fraction: float = 0.1, max_val_tokens: int | None = None
) -> TrainingData:
    """Resolve ``data`` into training source and validation tokens.

    A shard folder: its ``train`` split (read lazily by the loader) and its ``val`` split.
    A text file: GPT-2 tokens, the first ``1 - val_fraction`` for training, the rest for validation.
    A mixture's spec (`tokembed.Mixture.spec`): the `Mixture` of the sources' train splits; validation
    tokens from each source's val split, in proportion to its weight.

    Args:
        max_val_tokens: read at most this many validation tokens (large shard folders).
    """
    if isinstance(data, dict):
        return _mixture_data(data, max_val_tokens)
    path = Path(data)
    if not path.exists():
        raise FileNotFoundError(
            f"training data {path} does not exist; give a shard folder (tokembed prepare) or a text file"
        )
    if path.is_dir():
        if not _is_shard_folder(path):
            raise ValueError(
                f"{path} is a directory without manifest.json: give a shard folder written by `tokembed prepare`, or a text file"
            )
        from tokembed.shards.reader import open_shards

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
    from tokembed.data.windows import encode_text

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e}); give a text file or a shard folder") from None
    tokens = encode_text(text).astype(np.int64)  # (N,)
    cut = int(len(tokens) * (1.0 - val_fraction))
    val = tokens[cut:] if max_val_tokens is None else tokens[cut : cut + max_val_tokens]
    desc = f"text {path}: {len(tokens)} tokens, first {cut} for training, last {len(tokens) - cut} ({val_fraction:.0%}) for validation"
    return TrainingData(tokens[:cut], val, desc, cut)
