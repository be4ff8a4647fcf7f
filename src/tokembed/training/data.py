"""What a training run reads: the train and validation tokens of a shard folder, a text file or a mixture
of shard folders, and the identity of the tokenizer that made them (the model's vocabulary comes from it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tokembed.tokenizer.base import TokenizerIdentity


@dataclass
class TrainingData:
    """The two sides of a corpus: what the loader trains on and the validation tokens.

    Attributes:
        train: a shard folder path or a token array, as ``create_dataloader`` takes it.
        val: validation tokens (int64 array), or None when the corpus has none.
        description: how the split was made, for logs.
        n_train_tokens: tokens of the training side.
        tokenizer: the tokenizer that made the ids (vocabulary size, end-of-text id).
    """

    train: object
    val: np.ndarray | None
    description: str
    n_train_tokens: int
    tokenizer: TokenizerIdentity


def _is_shard_folder(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").exists()


def data_tokenizer(data: str | Path | dict, *, tokenizer: Any = None) -> TokenizerIdentity:
    """The tokenizer of ``data``: a shard folder's manifest (another ``tokenizer`` is an error naming
    both), a mixture's (its sources share one), or ``tokenizer`` (default gpt2) for a text file. Cheap:
    nothing is tokenized."""
    from tokembed.tokenizer import get_tokenizer, identity_from_manifest, tokenizer_identity

    if isinstance(data, dict):
        from tokembed.shards.reader import expect_tokenizer

        mixture = _mixture(data)
        recorded = mixture.tokenizer or identity_from_manifest(None)  # none recorded: GPT-2's ids
        if tokenizer is not None:
            expect_tokenizer(Path(mixture.paths[0]), recorded, tokenizer)
        return recorded

    path = Path(data)
    if _is_shard_folder(path):
        from tokembed.shards.format import read_manifest
        from tokembed.shards.reader import expect_tokenizer

        recorded = identity_from_manifest(read_manifest(path).get("tokenizer"))
        if tokenizer is not None:
            expect_tokenizer(path, recorded, tokenizer)
        return recorded
    return tokenizer_identity(get_tokenizer(tokenizer or "gpt2"))


def _mixture(spec: dict):
    from tokembed.data.phases import mixture_from_spec

    return mixture_from_spec(spec)


def _validation_weights(mixture) -> list[float]:
    """Each source's share of the validation tokens: its weight; over phases, its largest weight in any phase
    (normalised), so that every source the run reads is validated."""
    peak = [max(float(ph.weights[i]) for ph in mixture.phases) for i in range(len(mixture.paths))]
    return [w / sum(peak) for w in peak]


def _mixture_data(spec: dict, max_val_tokens: int | None, tokenizer: Any) -> TrainingData:
    """A mixture: its sources' train splits, mixed by the loader; validation: each source's val split, by weight."""
    from tokembed.shards.reader import open_shards

    mixture, tok = _mixture(spec), data_tokenizer(spec, tokenizer=tokenizer)
    vals, n_train = [], 0
    for path, weight in zip(mixture.paths, _validation_weights(mixture)):
        n_train += open_shards(path, split="train").n_tokens
        try:
            split = open_shards(path, split="val")
        except ValueError:  # no val split (a Megatron dataset has none)
            continue
        n = split.n_tokens if max_val_tokens is None else min(split.n_tokens, math.ceil(max_val_tokens * weight))
        vals.append(np.asarray(split.read(0, n), dtype=np.int64))
    val = np.concatenate(vals) if vals and sum(map(len, vals)) else None
    desc = f"{mixture!r}: train splits {n_train} tokens, val splits {0 if val is None else len(val)} tokens read"
    return TrainingData(mixture, val, desc, n_train, tok)


def load_training_data(
    data: str | Path | dict, *, val_fraction: float = 0.1, max_val_tokens: int | None = None, tokenizer: Any = None
) -> TrainingData:
    """Resolve ``data`` into training source and validation tokens.

    A shard folder: its ``train`` split (read lazily by the loader) and its ``val`` split.
    A text file: its tokens, the first ``1 - val_fraction`` for training, the rest for validation.
    A mixture's spec (`tokembed.Mixture.spec`, `tokembed.PhasedMixture.spec`): the mixture of the sources' train
    splits; validation tokens from each source's val split, in proportion to its weight (over phases: its
    largest weight).

    Args:
        max_val_tokens: read at most this many validation tokens (large shard folders).
        tokenizer: for a text file, the tokenizer (default gpt2); for a shard folder, the one expected
            (another is an error naming both).
    """
    if isinstance(data, dict):
        return _mixture_data(data, max_val_tokens, tokenizer)
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

        train_split = open_shards(path, split="train", tokenizer=tokenizer)
        val = None
        try:
            val_split = open_shards(path, split="val")
        except ValueError:
            val_split = None
        if val_split is not None and val_split.n_tokens:
            n = val_split.n_tokens if max_val_tokens is None else min(val_split.n_tokens, max_val_tokens)
            val = np.asarray(val_split.read(0, n), dtype=np.int64)
        desc = f"shard folder {path}: train split {train_split.n_tokens} tokens, val split {0 if val is None else len(val)} tokens read"
        return TrainingData(str(path), val, desc, int(train_split.n_tokens), train_split.tokenizer)
    from tokembed.data.windows import encode_text
    from tokembed.tokenizer import get_tokenizer, tokenizer_identity

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e}); give a text file or a shard folder") from None
    enc = get_tokenizer(tokenizer or "gpt2")
    tokens = encode_text(text, tokenizer=enc).astype(np.int64)  # (N,)
    cut = int(len(tokens) * (1.0 - val_fraction))
    val = tokens[cut:] if max_val_tokens is None else tokens[cut : cut + max_val_tokens]
    desc = f"text {path}: {len(tokens)} tokens, first {cut} for training, last {len(tokens) - cut} ({val_fraction:.0%}) for validation"
    return TrainingData(tokens[:cut], val, desc, cut, tokenizer_identity(enc))


def check_same_tokenizer(saved: dict, tok: TokenizerIdentity, out: Path) -> None:
    """Raise when a checkpoint was trained on ids of another tokenizer than the data's (names both)."""
    from tokembed.tokenizer import identity_from_manifest

    recorded = identity_from_manifest(saved.get("tokenizer_record") or saved.get("tokenizer"))
    if not recorded.same_ids(tok):
        raise ValueError(
            f"the checkpoint in {out} was trained on ids of {recorded.describe()}, but the data was made with "
            f"{tok.describe()}; resume on data of the same tokenizer, or train into a new --out"
        )
