"""Megatron-core: the tokenizer object its ``GPTDataset`` needs for a ``tokembed export --format megatron``.

Megatron's datasets read token ids, not text; ``GPTDatasetConfig`` still wants a tokenizer for two
numbers: ``vocab_size`` and the end-of-document id ``eod`` (it also names the tokenizer in the cache's
hash). Megatron-core's ``NullTokenizer(n)`` has ``vocab_size = n + 1`` and ``eod = n``: for GPT-2
(50,257 ids, ``<|endoftext|>`` = 50256, the last) ``NullTokenizer(n_vocab - 1)`` is exact.
`megatron_tokenizer` reads the export's record of its tokenizer and builds that, or, for a tokenizer
whose end-of-text is not its last id, the same object with that ``eod``::

    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    config = GPTDatasetConfig(random_seed=0, sequence_length=1024, blend=(["out/corpus"], None),
                              split="99,1,0", tokenizer=megatron_tokenizer("out/corpus"), ...)
    train, valid, test = BlendedMegatronDatasetBuilder(GPTDataset, [1000, 10, None], lambda: True, config).build()
"""

from __future__ import annotations

import os
from typing import Any

from tokembed.shards.reader import open_shards

__all__ = ["megatron_tokenizer"]


def megatron_tokenizer(source: str | os.PathLike) -> Any:
    """Megatron-core's ``NullTokenizer`` for the ids of ``source`` (a Megatron prefix tokembed exported, or a
    shard folder): ``vocab_size`` = the tokenizer's ``n_vocab``, ``eod`` = its end-of-text id.

    Raises:
        ValueError: ``source`` records no tokenizer (a Megatron dataset made elsewhere): build
            ``NullTokenizer(n_vocab - 1)`` yourself with its vocabulary size.
    """
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    ss = open_shards(source)
    if not ss.manifest.get("tokenizer"):
        raise ValueError(
            f"{source} records no tokenizer (a Megatron dataset made outside tokembed); build "
            "NullTokenizer(n_vocab - 1) from megatron.core.tokenizers.text.libraries.null_tokenizer yourself"
        )
    n_vocab, eot = ss.n_vocab, ss.eot_token
    tok = NullTokenizer(n_vocab - 1)
    if eot is not None and eot != n_vocab - 1:  # NullTokenizer's eod is its last id: give it this tokenizer's
        tok._eod_id = eot
    return tok
