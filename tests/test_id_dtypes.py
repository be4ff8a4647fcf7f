"""Token ids of every integer dtype reach the embeddings and the model (issue 16, item 10).

Was: uint8/int8/int16/uint16 ids gave raw torch errors (``"aminmax_cpu" not implemented for 'UInt16'``),
uint16 being the shards' own dtype.
"""

from __future__ import annotations

import pytest
import torch

from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT

INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64, torch.uint64]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=200, context_length=8, dim=16, n_heads=2, n_layers=1, dropout=0.0)).eval()


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_every_integer_dtype_gives_the_int64_result(model, dtype):
    ids = torch.tensor([[1, 5, 100, 127], [0, 3, 9, 126]])
    ref_logits, ref_loss = model(ids), model.loss(ids, ids.roll(-1, 1))
    narrow = ids.to(dtype)
    assert torch.equal(model.embed(narrow), model.embed(ids))
    assert torch.equal(model(narrow), ref_logits)
    assert torch.equal(model.loss(narrow, ids.roll(-1, 1).to(dtype)), ref_loss)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_out_of_range_ids_of_every_dtype_are_named(model, dtype):
    bad = -6 if dtype == torch.int8 else 250  # int8 cannot hold 250
    with pytest.raises(ValueError, match=rf"token id {bad} is outside the vocabulary \(size 200\)"):
        model(torch.tensor([[1, bad]]).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.complex64], ids=str)
def test_other_dtypes_are_refused_with_the_fix(model, dtype):
    with pytest.raises(TypeError, match=r"token ids must be an integer tensor \(torch.long\), got dtype .*\.long\(\)"):
        model.embed.token(torch.ones(1, 3, dtype=dtype))
