"""Token and positional embeddings against the chapter's printed numbers and torch's own layers."""

from __future__ import annotations

import pytest
import torch

import tokembed

# The chapter's table: torch.manual_seed(123); torch.nn.Embedding(6, 3).weight
CHAPTER_TABLE = [
    [0.3374, -0.1778, -0.1690],
    [0.9178, 1.5810, 1.3010],
    [1.2753, -0.2010, -0.1606],
    [-0.4015, 0.9666, -1.1481],
    [-1.1589, 0.3255, -0.6315],
    [-2.8400, -0.7849, -1.4096],
]


def test_the_chapters_seed_123_table():
    torch.manual_seed(123)
    layer = tokembed.TokenEmbedding(6, 3)
    torch.testing.assert_close(layer.weight.detach(), torch.tensor(CHAPTER_TABLE), atol=5e-5, rtol=0)
    assert layer.weight.requires_grad
    looked_up = layer(torch.tensor([3]))
    torch.testing.assert_close(looked_up.detach(), torch.tensor([[-0.4015, 0.9666, -1.1481]]), atol=5e-5, rtol=0)


def test_initialised_exactly_like_nn_embedding():
    torch.manual_seed(5)
    ours = tokembed.TokenEmbedding(100, 16)
    torch.manual_seed(5)
    theirs = torch.nn.Embedding(100, 16)
    assert torch.equal(ours.weight, theirs.weight)


def test_gpt2_init_is_normal_with_std_0_02():
    torch.manual_seed(0)
    w = tokembed.TokenEmbedding(50257, 64, init="gpt2").weight.detach()
    assert abs(w.mean().item()) < 1e-3
    assert w.std().item() == pytest.approx(0.02, rel=0.01)


def test_the_chapters_example_shapes(story):
    # vocab 50257 x 256, batch 8 x max_length 4 from the story -> (8, 4, 256)
    loader = tokembed.create_dataloader_v1(story, batch_size=8, max_length=4, stride=4, shuffle=False)
    inputs, _ = next(iter(loader))
    embed = tokembed.InputEmbedding(50257, 256, context_length=4)
    assert embed.token(inputs).shape == (8, 4, 256)
    assert embed.position(torch.arange(4)).shape == (4, 256)
    assert embed(inputs).shape == (8, 4, 256)


def test_input_embedding_is_the_chapters_sum():
    # The chapter: token_embedding_layer then pos_embedding_layer, both nn.Embedding, summed.
    ids = torch.tensor([[40, 367, 2885, 1464], [1807, 3619, 402, 271]])
    torch.manual_seed(11)
    embed = tokembed.InputEmbedding(50257, 32, context_length=4)
    torch.manual_seed(11)
    tok_layer = torch.nn.Embedding(50257, 32)
    pos_layer = torch.nn.Embedding(4, 32)
    expected = tok_layer(ids) + pos_layer(torch.arange(4))
    torch.testing.assert_close(embed(ids), expected, rtol=0, atol=0)


def test_worked_example_addition():
    # [0.5, -0.2, 0.1] + [0.1, 0.3, -0.1] = [0.6, 0.1, 0.0]
    embed = tokembed.InputEmbedding(1, 3, context_length=1)
    with torch.no_grad():
        embed.token.weight.copy_(torch.tensor([[0.5, -0.2, 0.1]]))
        embed.position.weight.copy_(torch.tensor([[0.1, 0.3, -0.1]]))
    torch.testing.assert_close(embed(torch.tensor([[0]])), torch.tensor([[[0.6, 0.1, 0.0]]]))


def test_both_tables_train():
    embed = tokembed.InputEmbedding(10, 4, context_length=3)
    embed(torch.tensor([[1, 2, 3]])).sum().backward()
    assert embed.token.weight.grad[1:4].abs().sum() > 0 and embed.token.weight.grad[0].abs().sum() == 0
    assert embed.position.weight.grad.abs().sum() > 0


def test_shorter_sequences_use_the_first_positions():
    embed = tokembed.InputEmbedding(10, 4, context_length=8)
    ids = torch.tensor([[1, 2, 3]])
    expected = embed.token.weight[ids] + embed.position.weight[:3]
    torch.testing.assert_close(embed(ids), expected)


@pytest.mark.parametrize("bad", [-1, 50257, 70000])
def test_token_id_out_of_range_names_it(bad):
    layer = tokembed.TokenEmbedding(50257, 4)
    with pytest.raises(
        ValueError, match=rf"token id {bad} is outside the vocabulary \(size 50257\): valid values are 0..50256"
    ):
        layer(torch.tensor([[1, bad, 2]]))
    with pytest.raises(ValueError, match=rf"token id {bad} is outside the vocabulary \(size 50257\)"):
        tokembed.InputEmbedding(50257, 4, context_length=4)(torch.tensor([[1, bad]]))


def test_sequence_longer_than_context_names_both():
    embed = tokembed.InputEmbedding(100, 4, context_length=4)
    with pytest.raises(ValueError, match=r"sequence length 5 exceeds context_length 4"):
        embed(torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"position 4 is outside the context length \(this table holds 4 positions"):
        embed.position(torch.arange(5))


@pytest.mark.parametrize(
    "ids, msg",
    [
        (
            torch.tensor([[1.0, 2.0]]),
            r"token ids must be an integer tensor \(torch.long\), got dtype torch.float32; convert with .long\(\)",
        ),
        (torch.tensor([[True]]), r"got dtype torch.bool"),
        ([[1, 2]], r"token ids must be a torch.Tensor of integers, got list; wrap them with torch.tensor"),
    ],
)
def test_ids_not_an_integer_tensor(ids, msg):
    with pytest.raises(TypeError, match=msg):
        tokembed.InputEmbedding(10, 4, context_length=4)(ids)


def test_ids_without_batch_dimension():
    with pytest.raises(
        ValueError, match=r"ids must have shape \(batch, seq_len\), got shape \(3,\); add a batch dimension"
    ):
        tokembed.InputEmbedding(10, 4, context_length=4)(torch.tensor([1, 2, 3]))


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(vocab_size=0, dim=3), r"vocab_size must be >= 1, got 0"),
        (dict(vocab_size=6, dim=-2), r"dim must be >= 1, got -2"),
        (dict(vocab_size=6, dim=3, init="xavier"), r"init must be one of normal, gpt2, got 'xavier'"),
    ],
)
def test_bad_table_sizes(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        tokembed.TokenEmbedding(**kwargs)


def test_bad_dropout_and_context():
    with pytest.raises(ValueError, match=r"dropout must be a float in \[0, 1\), got 1.5"):
        tokembed.InputEmbedding(10, 4, context_length=4, dropout=1.5)
    with pytest.raises(ValueError, match=r"context_length must be >= 1, got 0"):
        tokembed.InputEmbedding(10, 4, context_length=0)
