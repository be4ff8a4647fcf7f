"""Adversarial checks of the model's document masks and positions (review11), each against a reference
written from the definition."""

from __future__ import annotations

import pytest
import torch

from tokembed.embeddings.names import scheme_names
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT

V, EOT = 97, 96


def model(positional: str, **kw) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=V, context_length=300, dim=16, n_layers=2, n_heads=2, eot_token=EOT, positional=positional, **kw
    )
    return GPT(config).eval()


@pytest.mark.parametrize("positional", scheme_names())
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.uint16])
def test_position_ids_of_any_integer_dtype_give_the_int64_logits(positional, dtype):
    # The shards' uint16 ids are taken as they are; position ids of a narrow or unsigned dtype must mean the same
    # positions too. Unsigned ones must not wrap in `key - query` (ALiBi, T5, Shaw read distances from them).
    m = model(positional)
    ids = torch.randint(0, EOT, (2, 40), generator=torch.Generator().manual_seed(1))
    pos = torch.cat((torch.arange(25), torch.arange(15))).expand(2, 40)  # (B,T): a document restarts at 25
    with torch.no_grad():
        want = m(ids, position_ids=pos)
        got = m(ids, position_ids=pos.to(dtype))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if dtype is torch.int32:  # once: a complex tensor is no more an integer one than a float tensor is
        with pytest.raises(TypeError, match=r"position_ids must be an integer tensor, got torch.complex64"):
            m(ids, position_ids=pos.to(torch.complex64))
