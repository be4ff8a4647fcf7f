"""tokembed.GPT: configuration errors, GPT-2 initialisation, tying, loss, caching and generation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed import GPT, GPTConfig
from tokembed.embeddings.registry import POSITIONAL_NAMES
from tokembed.model.loss import linear_cross_entropy

SMALL = dict(vocab_size=97, context_length=16, dim=16, n_layers=2, n_heads=2)


def small(positional="learned", **kw):
    torch.manual_seed(0)
    return GPT(GPTConfig(**{**SMALL, "positional": positional, **kw}))


@pytest.mark.parametrize(
    "kwargs, exc, msg",
    [
        (
            dict(dim=64, n_heads=5),
            ValueError,
            r"n_heads=5 does not divide dim=64; choose n_heads among the divisors of dim",
        ),
        (
            dict(positional="rotary"),
            ValueError,
            r"unknown positional scheme 'rotary'; choose one of learned, sinusoidal, rope, alibi, t5, shaw, none",
        ),
        (
            dict(positional="rope", dim=12, n_heads=4),
            ValueError,
            r"rope needs an even head width, got dim/n_heads = 12/4 = 3",
        ),
        (dict(context_length=0), ValueError, r"context_length must be >= 1, got 0"),
        (dict(dropout=1.0), ValueError, r"dropout must be a float in \[0, 1\), got 1.0"),
        (
            dict(positional="rope", positional_options={"scaling": "dynamic"}),
            ValueError,
            r"rope_scaling must be None or one of linear, ntk, yarn, llama3, got 'dynamic'",
        ),
        (
            dict(positional="rope", positional_options={"fraction": 0.1}),
            ValueError,
            r"fraction 0.1 of head_dim 16 gives 1 rotated",
        ),
        (dict(n_layers=2.5), TypeError, r"n_layers must be an integer >= 1, got 2.5"),
    ],
)
def test_bad_configs_are_named(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        GPTConfig(**kwargs)


def test_gpt_needs_a_config_and_the_loss_names_bad_inputs():
    with pytest.raises(TypeError, match=r"config must be a GPTConfig, got dict"):
        GPT({"dim": 16})
    h, w = torch.randn(4, 8), torch.randn(10, 8)
    with pytest.raises(
        ValueError, match=r"expected h \(N, D\), weight \(V, D\), targets \(N,\), got \(4, 8\), \(10, 8\), \(3,\)"
    ):
        linear_cross_entropy(h, w, torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"reduction must be 'mean' or 'sum', got 'none'"):
        linear_cross_entropy(h, w, torch.zeros(4, dtype=torch.long), reduction="none")


def test_config_round_trips_and_names_unknown_fields():
    c = GPTConfig(positional="alibi", dim=32)
    assert GPTConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match=r"unknown GPTConfig fields \['d_model'\]"):
        GPTConfig.from_dict({**c.to_dict(), "d_model": 3})


def test_tied_embeddings_are_one_tensor():
    m = small()
    assert m.head.weight is m.embed.token.weight
    assert m.num_parameters() == sum(p.numel() for n, p in m.named_parameters())  # counted once
    untied = small(tie_embeddings=False)
    assert untied.head.weight is not untied.embed.token.weight
    assert untied.num_parameters() == m.num_parameters() + 97 * 16
    # a gradient step through the head moves the input table too
    m.loss(torch.tensor([[1, 2, 3]]), torch.tensor([[4, 5, 6]])).backward()
    assert m.embed.token.weight.grad[[4, 5, 6]].abs().sum() > 0


def test_state_dict_keys_follow_the_checkpoint_contract():
    keys = set(small().state_dict())
    assert {"embed.token.weight", "embed.position.weight", "head.weight"} <= keys
    assert "embed.position.weight" not in small("sinusoidal").state_dict()  # computed, not stored
    assert "embed.position.weight" not in small("rope").state_dict()


def test_gpt2_initialisation():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=5000, context_length=64, dim=128, n_layers=8, n_heads=4))
    assert m.embed.token.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert m.embed.position.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert m.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert m.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.03)
    scaled = 0.02 / math.sqrt(2 * 8)  # residual projections: 1/sqrt(2 x layers)
    assert m.blocks[3].attn.proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert m.blocks[3].mlp.proj.weight.std().item() == pytest.approx(scaled, rel=0.03)
    assert m.blocks[0].attn.qkv.bias.abs().sum() == 0


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_loss_equals_cross_entropy_of_the_logits(positional):
    m = small(positional, dropout=0.0)
    ids, targets = torch.randint(0, 97, (3, 11)), torch.randint(0, 97, (3, 11))
    expected = F.cross_entropy(m(ids).flatten(0, 1), targets.flatten())
    expected.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    loss = m.loss(ids, targets)
    loss.backward()
    torch.testing.assert_close(loss, expected)
    for n, p in m.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-6, rtol=1e-4, msg=n)


@given(n=st.integers(1, 200), chunk=st.integers(1, 70), seed=st.integers(0, 1000))
@settings(max_examples=20, deadline=None)
def test_chunked_linear_cross_entropy_matches_torch(n, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, 8, generator=g, requires_grad=True)
    w = torch.randn(300, 8, generator=g, requires_grad=True)
    t = torch.randint(0, 300, (n,), generator=g)
    ref = F.cross_entropy(h @ w.T, t)
    gh, gw = torch.autograd.grad(ref, (h, w))
    ours = linear_cross_entropy(h, w, t, chunk=chunk)
    oh, ow = torch.autograd.grad(ours, (h, w))
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(oh, gh, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(ow, gw, atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(
        linear_cross_entropy(h, w, t, reduction="sum", chunk=chunk), F.cross_entropy(h @ w.T, t, reduction="sum")
    )


def test_loss_names_bad_targets():
    m = small()
    with pytest.raises(ValueError, match=r"targets must have the shape of ids \(1, 3\), got \(1, 2\)"):
        m.loss(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=r"target id 97 is outside the vocabulary \(size 97\)"):
        m.loss(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 97]]))


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_model_is_causal(positional):
    m = small(positional).eval()
    ids = torch.randint(0, 97, (2, 12))
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 97
    torch.testing.assert_close(m(ids)[:, :8], m(changed)[:, :8], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(m(ids)[:, 8:], m(changed)[:, 8:])


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_cached_forward_equals_full_forward(positional):
    m = small(positional).eval()
    ids = torch.randint(0, 97, (2, 14))
    cache = m.new_cache()
    parts = [m(ids[:, :6], cache=cache), m(ids[:, 6:7], cache=cache), m(ids[:, 7:], cache=cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), m(ids), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_batched_position_ids_equal_the_default(positional):
    m = small(positional).eval()
    ids = torch.randint(0, 97, (2, 10))
    torch.testing.assert_close(m(ids, position_ids=torch.arange(10).expand(2, 10)), m(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", POSITIONAL_NAMES)
def test_generate_with_and_without_cache_agree(positional):
    m = small(positional)
    prompt = torch.randint(0, 97, (2, 5))
    greedy = m.generate(prompt, 30, temperature=0)  # 35 tokens: past context_length 16
    assert greedy.shape == (2, 35) and torch.equal(greedy[:, :5], prompt)
    assert torch.equal(greedy, m.generate(prompt, 30, temperature=0, use_cache=False))
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(
        m.generate(prompt, 12, top_k=5, generator=g1), m.generate(prompt, 12, top_k=5, generator=g2, use_cache=False)
    )
    assert m.training  # generate restores the mode


def test_learned_positions_crop_the_context_when_generating():
    m = small("learned").eval()
    out = m.generate(torch.randint(0, 97, (1, 20)), 3, temperature=0)  # prompt longer than the table
    # each new token is the argmax given the last 16 tokens only
    ctx = out[:, :20]
    for i in range(3):
        nxt = m(ctx[:, -16:])[:, -1].argmax(-1)
        assert nxt.item() == out[0, 20 + i].item()
        ctx = torch.cat((ctx, nxt[:, None]), dim=1)
    assert m.max_length == 16 and small("alibi").max_length is None


def test_top_k_1_is_greedy_and_generate_names_bad_options():
    m = small()
    prompt = torch.randint(0, 97, (1, 4))
    assert torch.equal(m.generate(prompt, 6, top_k=1), m.generate(prompt, 6, temperature=0))
    with pytest.raises(ValueError, match=r"temperature must be >= 0 \(0 = greedy\), got -1"):
        m.generate(prompt, 2, temperature=-1)
    with pytest.raises(ValueError, match=r"top_k must be an integer >= 1 or None, got 0"):
        m.generate(prompt, 2, top_k=0)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an integer >= 0, got -3"):
        m.generate(prompt, -3)


def test_learned_model_refuses_sequences_past_its_table():
    with pytest.raises(ValueError, match=r"sequence length 17 exceeds context_length 16"):
        small()(torch.zeros(1, 17, dtype=torch.long))
    assert small("rope")(torch.zeros(1, 40, dtype=torch.long)).shape == (1, 40, 97)


def test_public_api():  # and `import tokembed` stays light: tests/test_offline.py
    for name in (
        "GPT",
        "GPTConfig",
        "TrainConfig",
        "train",
        "evaluate",
        "load_checkpoint",
        "RotaryEmbedding",
        "ALiBi",
        "T5RelativeBias",
        "ShawRelativePositions",
        "SinusoidalPositionalEmbedding",
        "run_positions_experiment",
    ):
        assert name in tokembed.__all__ and hasattr(tokembed, name)


def test_t5_table_is_shared_by_all_layers_and_stored_once():
    m = small("t5", n_layers=3)
    assert all(b.attn.positional is m.positional for b in m.blocks)
    keys = [k for k in m.state_dict() if "bias.weight" in k and "positional" in k]
    assert keys == ["positional.bias.weight"]
    shaw = small("shaw", n_layers=2)
    assert shaw.blocks[0].attn.positional is not shaw.blocks[1].attn.positional  # Shaw: per layer
    assert {"blocks.0.attn.positional.key", "blocks.1.attn.positional.value"} <= set(shaw.state_dict())
