"""Where inspection's token frequencies come from: one rule for every command.

1. ``--corpus`` (``token_counts(corpus)``), when given: it overrides everything else.
2. Otherwise the counts that travel with the table: ``token_counts.safetensors`` in a checkpoint
   (the ids ``tokembed train`` read) or ``token_counts`` in an exported ``.safetensors``.
3. Otherwise none: rankings by frequency and under-trained marks are refused or left out, and say
   how to get counts. Nothing guesses frequencies from token ids or reads the training data behind
   the user's back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tokembed.inspection.table import EmbeddingTable, resolve_tokenizer
from tokembed.tokenizer.base import TokenizerLike, TokenizerMismatch

__all__ = ["table_with_counts", "token_counts"]


def table_with_counts(table: EmbeddingTable, *, corpus=None, min_count: int | None = None) -> EmbeddingTable:
    """``table`` with the counts of ``corpus`` when one is given (else its own), and ``min_count`` if given."""
    if corpus is None:
        return table if min_count is None else table.with_min_count(min_count)
    try:
        counts = token_counts(corpus, tokenizer=table.tokenizer, vocab_size=table.vocab_size)
    except TokenizerMismatch as e:  # the table's tokenizer is its own (a checkpoint's): the corpus must change
        raise e.with_advice(
            f"the table ({table.source or 'in memory'}) holds ids of {e.asked.source}: count a corpus prepared with it "
            f"(tokembed prepare TEXT --out DIR --tokenizer {e.asked.source}), or the text it was trained on"
        ) from None
    return table.with_counts(counts, f"corpus {corpus}", min_count=min_count)


def token_counts(
    corpus: str | Path,
    *,
    tokenizer: TokenizerLike | None = "gpt2",
    vocab_size: int | None = None,
    progress: bool = False,
) -> torch.Tensor:
    """(V,) how many times each token id occurs in a corpus.

    Args:
        corpus: a ``tokembed prepare`` shard folder (its ``train`` split: the counts its manifest
            records, else the shards are counted; no re-tokenizing), a UTF-8 text file, or a folder
            whose ``*.txt`` files (recursively) are read.
        tokenizer: the tokenizer the table was trained with (for text).
        vocab_size: length of the result (default: the tokenizer's vocabulary).
        progress: a progress bar over the shards or files.
    """
    from tqdm.auto import tqdm

    enc = resolve_tokenizer(tokenizer)
    path = Path(corpus)
    V = vocab_size or (enc.n_vocab if enc is not None else None)
    if V is None:
        raise ValueError("token_counts needs a tokenizer or a vocab_size")
    counts = torch.zeros(V, dtype=torch.int64)
    if path.is_dir() and (path / "manifest.json").is_file():
        from tokembed.shards.counts import manifest_token_counts
        from tokembed.shards.reader import open_shards

        shards = open_shards(path, split="train", tokenizer=enc)  # ids of another tokenizer would be noise
        recorded = manifest_token_counts(shards.manifest, "train", V)
        if recorded is not None:  # counted by prepare: no need to read the shards again
            return torch.from_numpy(recorded)
        for i in tqdm(range(len(shards.shards)), desc="counting tokens", unit="shard", disable=not progress):
            ids = torch.from_numpy(np.asarray(shards.tokens(i), dtype=np.int64))  # (n,) uint16/32 on disk
            counts += torch.bincount(ids[ids < V], minlength=V)
        return counts
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise ValueError(
                f"corpus folder {path} holds no *.txt files and no shard manifest; pass a text file, a folder of text files or a `tokembed prepare` folder"
            )
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"corpus {path} does not exist; pass the text the table was trained on")
    if enc is None:
        raise ValueError(f"counting the tokens of text needs the table's tokenizer; corpus {path} is text")
    for f in tqdm(files, desc="counting tokens", unit="file", disable=not progress):
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"corpus file {f} is not UTF-8 text ({e}); pass the text the table was trained on") from e
        ids = torch.tensor(enc.encode(text, allowed_special=set(enc.special_tokens)), dtype=torch.int64)
        counts += torch.bincount(ids[ids < V], minlength=V)
    return counts
