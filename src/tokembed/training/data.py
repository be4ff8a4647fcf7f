"""What a training run reads: the train and validation tokens of a shard folder, a text file or a mixture
of shard folders, the identity of the tokenizer that made them (the model's vocabulary comes from it), and
the identity of the data itself (`data_identity`: by content, so a moved copy is the same data)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tokembed._paths import local_path
from tokembed.tokenizer.base import TokenizerIdentity, TokenizerLike

if TYPE_CHECKING:
    from tokembed.data.windows import WindowSource


@dataclass(frozen=True)
class ValidationSource:
    """The validation tokens of one source, scored on their own (`tokembed.training.evaluation.evaluate_sources`).

    Attributes:
        name: the source as the run names it: a shard folder, Megatron prefix or text file path.
        weight: its share of the mixture (1.0 for data of one source).
        tokens: (N,) int64 validation ids.
        what: which part of the source they are, for the output ("the validation split of ...").
    """

    name: str
    weight: float
    tokens: np.ndarray
    what: str


@dataclass
class TrainingData:
    """The two sides of a corpus: what the loader trains on and the validation tokens of each source.

    Attributes:
        train: a shard folder path, a token array or a `Mixture`, as ``create_dataloader`` takes it.
        validation: each source's validation tokens (a source without any is left out).
        description: how the split was made, for logs.
        n_train_tokens: tokens of the training side.
        tokenizer: the tokenizer that made the ids (vocabulary size, end-of-text id).
    """

    train: WindowSource
    validation: list[ValidationSource]
    description: str
    n_train_tokens: int
    tokenizer: TokenizerIdentity

    @property
    def val(self) -> np.ndarray | None:
        """Every source's validation tokens, one after the other (None when there are none)."""
        if not self.validation:
            return None
        return np.concatenate([v.tokens for v in self.validation])


def _is_shard_folder(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").exists()


def _is_megatron(path: Path) -> bool:
    from tokembed.shards import megatron

    return megatron.is_megatron_prefix(path)


def data_tokenizer(data: str | Path | dict, *, tokenizer: TokenizerLike | None = None) -> TokenizerIdentity:
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

    if _remote(data):
        from tokembed.shards.reader import open_shards

        return open_shards(str(data), tokenizer=tokenizer).tokenizer  # the manifest's (another one: an error)
    path = Path(data)
    if _is_shard_folder(path) or _is_megatron(path):
        from tokembed.shards import megatron
        from tokembed.shards.format import read_manifest
        from tokembed.shards.reader import expect_tokenizer

        entry = megatron.recorded_tokenizer(path) if _is_megatron(path) else read_manifest(path).get("tokenizer")
        recorded = identity_from_manifest(entry)  # none recorded (a dataset made elsewhere): GPT-2's ids
        if tokenizer is not None:
            expect_tokenizer(path, recorded, tokenizer)
        return recorded
    return tokenizer_identity(get_tokenizer(tokenizer or "gpt2"))


def _remote(data: object) -> bool:
    """A URL of a remote shard folder (``file://`` names a local path)."""
    from tokembed.storage.urls import is_url, local_path_of

    return isinstance(data, (str, Path)) and is_url(data) and local_path_of(data) is None


def _mixture(spec: dict):
    from tokembed.data.phases import mixture_from_spec

    return mixture_from_spec(spec)


def _validation_weights(mixture) -> list[float]:
    """Each source's share of the validation tokens: its weight; over phases, its largest weight in any phase
    (normalised), so that every source the run reads is validated."""
    peak = [max(float(ph.weights[i]) for ph in mixture.phases) for i in range(len(mixture.paths))]
    return [w / sum(peak) for w in peak]


def phase_weighted(sources: list[ValidationSource], phase: Any, paths: list[str]) -> list[ValidationSource]:
    """``sources`` weighted as ``phase`` (a `tokembed.PhasedMixture` phase over ``paths``, its sources in source
    order) weighs them, so that a validation total is the loss of the mixture being trained on then; a source
    the phase does not read weighs 0 (its own loss is still reported). Unchanged when the phase reads none of
    them (its sources have no validation split)."""
    now = {path: float(phase.weights[i]) for i, path in enumerate(paths)}
    if not any(now.get(s.name) for s in sources):
        return list(sources)
    return [dataclasses.replace(s, weight=now.get(s.name, 0.0)) for s in sources]


def weighted_share(budget: int, weight: float) -> int:
    """A source's part of ``budget`` windows: ``ceil(budget * weight)``, at least 1. The weight is read as the
    small fraction it is (a `Mixture`'s ``q / Q``), so ``10 * 0.3`` is 3, not 4."""
    exact = Fraction(weight).limit_denominator(1 << 20)
    return max(1, math.ceil(budget * exact))


def _mixture_data(
    spec: dict, max_val_windows: int | None, length: int, tokenizer: TokenizerLike | None
) -> TrainingData:
    """A mixture: its sources' train splits, mixed by the loader; validation: each source's val split on its own,
    at most ``ceil(max_val_windows * weight)`` windows of ``length`` of each (the budget shared by weight)."""
    from tokembed.shards.reader import open_shards

    mixture, tok = _mixture(spec), data_tokenizer(spec, tokenizer=tokenizer)
    vals, n_train = [], 0
    for path, weight in zip(mixture.paths, _validation_weights(mixture)):
        n_train += open_shards(path, split="train").n_tokens
        try:
            split = open_shards(path, split="val")
        except ValueError:  # no val split (a Megatron dataset has none)
            continue
        n = split.n_tokens
        if max_val_windows is not None:
            n = min(n, weighted_share(max_val_windows, weight) * length + 1)
        if n:
            what = f"the validation split of {path}"
            vals.append(ValidationSource(str(path), float(weight), np.asarray(split.read(0, n), dtype=np.int64), what))
    read = sum(len(v.tokens) for v in vals)
    desc = f"{mixture!r}: train splits {n_train} tokens, val splits {read} tokens read"
    return TrainingData(mixture, vals, desc, n_train, tok)


def load_training_data(
    data: str | Path | dict,
    *,
    val_fraction: float = 0.1,
    max_val_windows: int | None = None,
    length: int = 1,
    tokenizer: TokenizerLike | None = None,
) -> TrainingData:
    """Resolve ``data`` into training source and validation tokens.

    A shard folder: its ``train`` split (read lazily by the loader) and its ``val`` split; a Megatron prefix
    (``PREFIX.bin`` + ``PREFIX.idx``): its tokens, read as a ``train`` split, and no validation.
    A text file: its tokens, the first ``1 - val_fraction`` for training, the rest for validation.
    A mixture's spec (`tokembed.Mixture.spec`, `tokembed.PhasedMixture.spec`): the mixture of the sources' train
    splits; each source's val split, on its own (`TrainingData.validation`), weighted by its weight (over phases:
    its largest weight in any phase, so that every source the run reads is validated).

    Args:
        max_val_windows: read only the validation tokens of this many windows of ``length`` (large
            corpora); a mixture's sources share them by weight (each at least one window).
        length: the window length ``max_val_windows`` counts.
        tokenizer: for a text file, the tokenizer (default gpt2); for a shard folder, the one expected
            (another is an error naming both).
    """
    if isinstance(data, dict):
        return _mixture_data(data, max_val_windows, length, tokenizer)
    max_val_tokens = None if max_val_windows is None else max_val_windows * length + 1
    if _remote(data):
        return _folder_data(str(data), max_val_tokens, tokenizer)
    path = local_path(data, what="the data")
    if _is_megatron(path):
        return _folder_data(path, max_val_tokens, tokenizer)
    if not path.exists():
        raise FileNotFoundError(
            f"training data {path} does not exist; give a shard folder (tokembed prepare) or a text file"
        )
    if path.is_dir():
        return _folder_data(path, max_val_tokens, tokenizer)
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
    what = f"the last {val_fraction:.0%} of {path}"
    validation = [ValidationSource(str(path), 1.0, val, what)] if len(val) else []
    return TrainingData(tokens[:cut], validation, desc, cut, tokenizer_identity(enc))


def _folder_data(path: Path | str, max_val_tokens: int | None, tokenizer: TokenizerLike | None) -> TrainingData:
    """A shard folder or Megatron prefix (a local `Path`), or the URL of a remote folder read through the cache: its
    train split for the loader, its val split read."""
    if isinstance(path, Path) and not (_is_shard_folder(path) or _is_megatron(path)):
        raise ValueError(
            f"{path} is a directory without manifest.json: give a shard folder written by `tokembed prepare`, or a text file"
        )
    from tokembed.shards.reader import open_shards

    train_split = open_shards(path, split="train", tokenizer=tokenizer)
    validation = []
    try:
        val_split = open_shards(path, split="val")
    except ValueError:
        val_split = None
    if val_split is not None and val_split.n_tokens:
        n = val_split.n_tokens if max_val_tokens is None else min(val_split.n_tokens, max_val_tokens)
        tokens = np.asarray(val_split.read(0, n), dtype=np.int64)
        validation.append(ValidationSource(str(path), 1.0, tokens, f"the validation split of {path}"))
    read = sum(len(v.tokens) for v in validation)
    desc = f"shard folder {path}: train split {train_split.n_tokens} tokens, val split {read} tokens read"
    return TrainingData(str(path), validation, desc, int(train_split.n_tokens), train_split.tokenizer)


def check_same_tokenizer(saved: dict, tok: TokenizerIdentity, out: Path) -> None:
    """Raise when a checkpoint was trained on ids of another tokenizer than the data's (names both)."""
    from tokembed.tokenizer import identity_from_manifest

    recorded = identity_from_manifest(saved.get("tokenizer_record") or saved.get("tokenizer"))
    if not recorded.same_ids(tok):
        raise ValueError(
            f"the checkpoint in {out} was trained on ids of {recorded.describe()}, but the data was made with "
            f"{tok.describe()}; resume on data of the same tokenizer, or train into a new --out"
        )


def data_identity(data: str | Path | dict) -> dict[str, Any]:
    """What ``data`` is, wherever it lies: a resumed run must read the same data, not the same path.

    A shard folder: its manifest's hash (the manifest lists every shard's sha256); a Megatron prefix: the
    sha256 its export recorded for the ``.bin`` (else that of the ``.idx``); a text file: its sha256; a
    mixture's spec: each source's, in order (a phased mixture's: every phase's sources, numbered as it
    numbers them).
    """
    if isinstance(data, dict):
        from tokembed.data.phases import spec_paths

        return {"sources": [data_identity(p) for p in spec_paths(data)]}
    if _remote(data):
        from tokembed.shards.remote import read_remote_manifest
        from tokembed.shards.schema import manifest_digest

        return {"manifest_sha256": manifest_digest(read_remote_manifest(str(data)))}
    path = Path(data)
    if _is_shard_folder(path):
        from tokembed.shards.format import read_manifest
        from tokembed.shards.schema import manifest_digest

        return {"manifest_sha256": manifest_digest(read_manifest(path))}
    from tokembed.shards import megatron
    from tokembed.shards.format import sha256_file

    if megatron.is_megatron_prefix(path):
        from tokembed.shards.reader import open_megatron

        return {"megatron_sha256": open_megatron(path).shards[0].sha256}
    return {"sha256": sha256_file(path)}


def describe_identity(identity: dict[str, Any]) -> str:
    """``manifest sha256 0123456789ab`` (the kind of hash and its first 12 digits), for messages."""
    if "sources" in identity:
        return "; ".join(describe_identity(i) for i in identity["sources"])
    kind, digest = next(iter(identity.items()))
    return f"{kind.replace('_sha256', ' sha256').replace('_', ' ')} {str(digest).removeprefix('idx:')[:12]}"
