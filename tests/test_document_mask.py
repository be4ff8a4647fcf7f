"""Packed documents kept apart (``GPTConfig(document_mask=True)``).

The reference is the definition: with the mask, every document in a packed window is computed exactly as
if it were run alone (its own positions from 0, nothing of its neighbours). So the two paths, packed and
one document at a time, must agree for every positional scheme.
"""

from __future__ import annotations

import pytest
import torch

from tokembed.embeddings.registry import POSITIONAL_NAMES
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT, document_ids, document_positions

EOT = 96
SMALL = dict(vocab_size=97, context_length=32, dim=16, n_layers=2, n_heads=2, eot_token=EOT)


def model(positional: str, document_mask: bool = True, **kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**SMALL, "positional": positional, "document_mask": document_mask, **kw})).eval()


def test_document_ids_and_positions_from_the_separator():
    ids = torch.tensor([[5, 6, EOT, 7, EOT, EOT, 8, 9], [1, 2, 3, 4, 5, 6, 7, EOT]])
    assert document_ids(ids, EOT).tolist() == [[0, 0, 0, 1, 1, 2, 3, 3], [0] * 8]
    assert document_positions(document_ids(ids, EOT)).tolist() == [[0, 1, 2, 0, 1, 0, 0, 1], list(range(8))]


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_each_packed_document_is_computed_as_if_it_were_alone(positional):
    m = model(positional)
    a, b, c = [11, 12, 13, 14, EOT], [21, 22, 23, EOT], [31, 32, 33, 34, 35]  # c: cut off by the window's end
    packed = torch.tensor([a + b + c, b + a + c])  # (2, 14)
    with torch.no_grad():
        got = m(packed)  # (2,14,V)
        alone = {name: m(torch.tensor([d]))[0] for name, d in (("a", a), ("b", b), ("c", c))}
    spans = [[("a", 0), ("b", 5), ("c", 9)], [("b", 0), ("a", 4), ("c", 9)]]
    for row, parts in enumerate(spans):
        for name, start in parts:
            ref = alone[name]
            torch.testing.assert_close(got[row, start : start + len(ref)], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_without_the_mask_a_document_sees_its_neighbour(positional):
    m = model(positional, document_mask=False)
    a, b = [11, 12, 13, EOT], [21, 22, 23]
    with torch.no_grad():
        packed = m(torch.tensor([a + b]))[0, len(a) :]
        alone = m(torch.tensor([b]))[0]
    assert (packed - alone).abs().max() > 1e-3


def test_loss_of_a_packed_window_is_the_sum_of_each_documents_loss():
    m = model("rope")
    a, b = [11, 12, 13, 14, EOT], [21, 22, 23, 24, EOT]
    stream = torch.tensor(a + b + [31])  # targets run one past the window, as the loaders give them
    ids, targets = stream[:-1][None], stream[1:][None]
    with torch.no_grad():
        packed = m.loss(ids, targets, reduction="sum")
        # Each document alone, with the same targets: the separator still predicts the next document's first token.
        first = m.loss(torch.tensor([a]), torch.tensor([a[1:] + [b[0]]]), reduction="sum")
        second = m.loss(torch.tensor([b]), torch.tensor([b[1:] + [31]]), reduction="sum")
    torch.testing.assert_close(packed, first + second, rtol=1e-5, atol=1e-4)


def test_training_step_gradients_flow_and_generate_works():
    m = model("learned")
    m.train()
    ids = torch.randint(0, 96, (4, 16))
    ids[:, 7] = EOT
    m.loss(ids, torch.randint(0, 97, (4, 16))).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    out = m.generate(torch.tensor([[11, 12, EOT, 21]]), 5, temperature=0)
    greedy = torch.tensor([[11, 12, EOT, 21]])
    with torch.no_grad():
        for _ in range(5):  # the definition: argmax of the last position, the whole window recomputed
            greedy = torch.cat((greedy, m(greedy)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert out.tolist() == greedy.tolist()


def test_document_mask_errors():
    with pytest.raises(
        ValueError,
        match=r"eot_token 50256 is outside the vocabulary \(size 97\); document_mask needs the id that ends documents",
    ):
        GPTConfig(vocab_size=97, document_mask=True)
    with pytest.raises(
        TypeError, match=r"tie_embeddings, bias and document_mask must be True or False, got True, True and 1"
    ):
        GPTConfig(document_mask=1)
    m = model("rope")
    with pytest.raises(
        ValueError,
        match=r"a model with document_mask=True reads whole windows: no KVCache or offset \(got a cache\); pass the whole sequence",
    ):
        m(torch.tensor([[1, 2]]), cache=m.new_cache())
    assert (
        GPTConfig.from_dict(
            {k: v for k, v in GPTConfig().to_dict().items() if k not in ("document_mask", "eot_token")}
        ).document_mask
        is False
    )  # older checkpoints
