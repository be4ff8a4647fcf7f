"""TODO docstring."""

from __future__ import annotations

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


def load_training_data(
    data: str | Path, *, val_fraction: float = 0.1, max_val_tokens: int | None = None, tokenizer: str = "gpt2"
) -> TrainingData:
    """Resolve ``data`` into training source and validation tokens.

    A shard folder: its ``train`` split (read lazily by the loader) and its ``val`` split.
    A text file: its tokens (``tokenizer``, default GPT-2's), the first ``1 - val_fraction`` for training,
    the rest for validation.

    Args:
        max_val_tokens: read at most this many validation tokens (large shard folders).
    """
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
    from tokembed.tokenizer import get_tokenizer

    tokens = encode_text(text, get_tokenizer(tokenizer)).astype(np.int64)  # (N,)
    cut = int(len(tokens) * (1.0 - val_fraction))
    val = tokens[cut:] if max_val_tokens is None else tokens[cut : cut + max_val_tokens]
    desc = f"text {path}: {len(tokens)} tokens, first {cut} for training, last {len(tokens) - cut} ({val_fraction:.0%}) for validation"
    return TrainingData(tokens[:cut], val, desc, cut)
