"""Positional schemes against published facts, definitions written here, and independent implementations.

Independent implementations (test-only, in the ``dev`` extra): ``rotary-embedding-torch`` (RoPE,
interleaved pairs, position interpolation) and ``x-transformers`` (ALiBi slopes, T5's bucket
function as ported from Hugging Face/Mesh TensorFlow, NTK-aware RoPE base).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed.embeddings.bias import ALiBi, ShawRelativePositions, T5RelativeBias, alibi_slopes, t5_relative_bucket
from tokembed.embeddings.registry import POSITIONAL_NAMES, attention_positional, input_positional, positional_scheme
from tokembed.embeddings.rotary import RotaryEmbedding, rope_inv_freq
from tokembed.embeddings.sinusoidal import SinusoidalPositionalEmbedding, sinusoidal_table
from tokembed.model.attention import CausalSelfAttention

# ----------------------------------------------------------------------------------- sinusoidal


def test_sinusoid_at_position_0_is_0_1_0_1():
    assert sinusoidal_table(1, 8).tolist() == [[0.0, 1.0] * 4]


def test_sinusoid_matches_the_papers_formula():
    # PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)), Vaswani et al. 2017, 3.5
    d = 16
    expected = [
        [(math.sin if j % 2 == 0 else math.cos)(p / 10000 ** ((j - j % 2) / d)) for j in range(d)] for p in range(50)
    ]
    torch.testing.assert_close(sinusoidal_table(50, d), torch.tensor(expected), atol=1e-6, rtol=0)


@given(p=st.integers(0, 2000), k=st.integers(0, 50))
@settings(max_examples=30, deadline=None)
def test_sinusoid_shift_is_a_linear_map(p, k):
    # The paper's reason for sinusoids: PE(p + k) is a fixed linear function (rotations) of PE(p).
    d = 8
    pe = SinusoidalPositionalEmbedding(d)
    freq = 1 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    x, y = pe(torch.tensor([p])).double()[0].view(-1, 2), pe(torch.tensor([p + k])).double()[0].view(-1, 2)
    c, s = torch.cos(k * freq), torch.sin(k * freq)
    rotated = torch.stack((x[:, 0] * c + x[:, 1] * s, x[:, 1] * c - x[:, 0] * s), dim=-1)  # sin(a+b), cos(a+b)
    torch.testing.assert_close(rotated, y, atol=1e-5, rtol=0)


def test_sinusoid_odd_dim_is_refused():
    with pytest.raises(ValueError, match=r"dim must be even for sinusoidal positions .* got 7"):
        SinusoidalPositionalEmbedding(7)


# ----------------------------------------------------------------------------------- input schemes, two paths


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_position_ids_arange_equals_default_path(positional):
    torch.manual_seed(0)
    embed = tokembed.InputEmbedding(100, 8, 16, positional=positional)
    ids = torch.randint(0, 100, (3, 10))
    default = embed(ids)
    torch.testing.assert_close(embed(ids, position_ids=torch.arange(10)), default, rtol=0, atol=0)
    torch.testing.assert_close(embed(ids, position_ids=torch.arange(10).expand(3, 10)), default, rtol=0, atol=0)
    # an offset is the same as explicit ids starting there
    torch.testing.assert_close(
        embed(ids[:, :4], offset=5), embed(ids[:, :4], position_ids=torch.arange(5, 9)), rtol=0, atol=0
    )
    # and adds the table's rows offset..offset+T-1
    table = embed.position(torch.arange(16))
    torch.testing.assert_close(embed(ids[:, :4], offset=5), embed.token(ids[:, :4]) + table[5:9], rtol=0, atol=0)


def test_position_ids_restart_at_document_boundaries():
    embed = tokembed.InputEmbedding(100, 8, 16, positional="learned")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    pos = torch.tensor([0, 1, 2, 0, 1])  # a document of 3 tokens, then one of 2
    expected = embed.token(ids) + embed.position.weight[pos]
    torch.testing.assert_close(embed(ids, position_ids=pos), expected)


def test_input_embedding_default_is_learned_and_attention_schemes_add_nothing():
    assert tokembed.InputEmbedding(10, 4, 4).positional == "learned"
    embed = tokembed.InputEmbedding(10, 4, 4, positional="rope")
    assert embed.position is None
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])  # longer than context_length: rope has no table to run off
    torch.testing.assert_close(embed(ids), embed.token(ids))


def test_learned_offset_past_the_table_is_refused():
    embed = tokembed.InputEmbedding(10, 4, 8)
    with pytest.raises(
        ValueError, match=r"positions 6..9 exceed context_length 8 of the learned position table; crop the context"
    ):
        embed(torch.zeros(1, 4, dtype=torch.long), offset=6)


@pytest.mark.parametrize(
    "pos, exc, msg",
    [
        (torch.arange(4), ValueError, r"position_ids must have shape \(3,\) or \(2, 3\)"),
        (torch.tensor([0.0, 1.0, 2.0]), TypeError, r"position_ids must be an integer tensor"),
        (torch.tensor([0, -1, 2]), ValueError, r"position ids must be >= 0, got -1"),
    ],
)
def test_bad_position_ids(pos, exc, msg):
    with pytest.raises(exc, match=msg):
        tokembed.InputEmbedding(10, 4, 8)(torch.zeros(2, 3, dtype=torch.long), position_ids=pos)


# ----------------------------------------------------------------------------------- RoPE


def test_rope_layout_is_interleaved_pairs():
    # e_0 at position p becomes (cos p, sin p, 0, ...): pair (x0, x1) turns by p * theta_0 = p radians.
    rope = RotaryEmbedding(8)
    x = torch.zeros(1, 1, 3, 8)
    x[..., 0] = 1.0
    out = rope(x, torch.tensor([0, 1, 2]))[0, 0]
    expected = torch.zeros(3, 8)
    expected[:, 0], expected[:, 1] = torch.cos(torch.arange(3.0)), torch.sin(torch.arange(3.0))
    torch.testing.assert_close(out, expected)
    # the last pair turns slowest: theta_{d/2-1} = 10000^(-(d-2)/d)
    x = torch.zeros(1, 1, 1, 8)
    x[..., 6] = 1.0
    angle = 5 * 10000 ** (-6 / 8)
    torch.testing.assert_close(
        rope(x, torch.tensor([5]))[0, 0, 0, 6:], torch.tensor([math.cos(angle), math.sin(angle)])
    )


@given(seed=st.integers(0, 2**31 - 1), p=st.integers(0, 5000))
@settings(max_examples=25, deadline=None)
def test_rope_keeps_norms(seed, p):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 4, 16, generator=g)
    out = RotaryEmbedding(16)(x, torch.arange(p, p + 4))
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-5)


@given(seed=st.integers(0, 2**31 - 1), m=st.integers(0, 3000), n=st.integers(0, 3000), shift=st.integers(0, 3000))
@settings(max_examples=25, deadline=None)
def test_rope_score_depends_only_on_distance(seed, m, n, shift):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(1, 1, 1, 16, generator=g).double(), torch.randn(1, 1, 1, 16, generator=g).double()
    rope = RotaryEmbedding(16)
    score = lambda a, b: (rope(q, torch.tensor([a])) * rope(k, torch.tensor([b]))).sum().item()  # noqa: E731
    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-6)


def test_rope_agrees_with_rotary_embedding_torch():
    ret = pytest.importorskip("rotary_embedding_torch")
    torch.manual_seed(0)
    x = torch.randn(2, 4, 33, 32)
    for factor in (1.0, 4.0):
        theirs = ret.RotaryEmbedding(32, interpolate_factor=factor).rotate_queries_or_keys(x)
        ours = RotaryEmbedding(32, scaling="linear" if factor > 1 else None, factor=factor)(x, torch.arange(33))
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)


def test_rope_ntk_scaling_agrees_with_x_transformers():
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.manual_seed(0)
    x = torch.randn(1, 2, 40, 16)
    freqs, _ = xt.RotaryEmbedding(16, base_rescale_factor=8.0).forward_from_seq_len(40)
    theirs = xt.apply_rotary_pos_emb(x, freqs)
    ours = RotaryEmbedding(16, scaling="ntk", factor=8.0)(x, torch.arange(40))
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-5)


def test_rope_scalings_from_their_definitions():
    # Position interpolation (Chen et al. 2023): theta_i / s. NTK-aware (bloc97): base * s^(d/(d-2)).
    d, s = 16, 4.0
    plain = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    torch.testing.assert_close(rope_inv_freq(d, scaling="linear", factor=s), plain / s)
    ntk = (10000.0 * s ** (d / (d - 2))) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    torch.testing.assert_close(rope_inv_freq(d, scaling="ntk", factor=s), ntk)
    # NTK keeps the fastest pair as trained and slows the slowest one by exactly s
    assert ntk[0] == plain[0] and ntk[-1].item() == pytest.approx(plain[-1].item() / s)


def test_rope_batched_position_ids_equal_shared_ones():
    rope = RotaryEmbedding(8)
    x = torch.randn(3, 2, 5, 8)
    torch.testing.assert_close(rope(x, torch.arange(5).expand(3, 5)), rope(x, torch.arange(5)))


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(head_dim=7), r"head_dim must be even"),
        (
            dict(head_dim=8, scaling="dynamic"),
            r"rope scaling must be one of linear, ntk, yarn, llama3 or None, got 'dynamic'",
        ),
        (dict(head_dim=8, scaling="yarn", factor=2.0), r"rope scaling 'yarn' needs original_length"),
        (dict(head_dim=8, fraction=1.5), r"rope fraction must be in \(0, 1\]"),
        (dict(head_dim=8, scaling="ntk", factor=0.5), r"rope scaling factor must be a number >= 1"),
    ],
)
def test_rope_bad_options(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        RotaryEmbedding(**kwargs)


# ----------------------------------------------------------------------------------- ALiBi


def test_alibi_slopes_for_8_heads_are_half_to_1_over_256():
    assert alibi_slopes(8).tolist() == [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256]


def test_alibi_slopes_for_12_heads_follow_the_papers_recipe():
    # Press et al. 2022, 3: the 8 slopes of 8 heads, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...).
    expected = [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 32])
def test_alibi_slopes_agree_with_x_transformers(n):
    xt = pytest.importorskip("x_transformers.x_transformers")
    torch.testing.assert_close(
        alibi_slopes(n), torch.tensor(xt.AlibiPositionalBias._get_slopes(n), dtype=torch.float32)
    )


def test_alibi_bias_is_minus_slope_times_distance():
    bias = ALiBi(2).score_bias(torch.zeros(1, 2, 4, 8), torch.arange(4), torch.arange(4))  # (1,2,4,4)
    expected = -torch.tensor([[abs(i - j) for j in range(4)] for i in range(4)], dtype=torch.float32)
    torch.testing.assert_close(bias[0, 0], expected * 0.0625)  # 2 heads: 2^-4, 2^-8
    torch.testing.assert_close(bias[0, 1], expected * 2.0**-8)


# ----------------------------------------------------------------------------------- T5


def t5_bucket_reference(n: int, num_buckets: int = 32, max_distance: int = 128) -> int:
    """Causal bucket of a key n >= 0 tokens back, from the definition (Raffel et al.; mesh_tensorflow)."""
    exact = num_buckets // 2
    if n < exact:
        return n
    return min(
        num_buckets - 1, exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    )


def test_t5_buckets_32_by_128_at_the_published_boundaries():
    # 16 exact buckets for distances 0..15, then 16 log-spaced buckets: bucket 16 + k starts at 16 * 8^(k/16).
    dist = torch.arange(0, 400)
    buckets = t5_relative_bucket(-dist, num_buckets=32, max_distance=128)
    assert buckets[:16].tolist() == list(range(16))
    starts = {b: int(torch.nonzero(buckets == b)[0]) for b in range(16, 32)}
    assert starts == {16 + k: math.ceil(16 * 8 ** (k / 16)) for k in range(16)}
    assert list(starts.values()) == [16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113]
    assert buckets[127].item() == 31 and buckets[128:].unique().tolist() == [
        31
    ]  # max_distance and beyond share the last
    assert buckets.tolist() == [t5_bucket_reference(n) for n in range(400)]
    assert t5_relative_bucket(torch.arange(1, 50)).unique().tolist() == [0]  # causal: keys after the query -> 0


def test_t5_bidirectional_buckets():
    rel = torch.arange(-200, 201)  # key - query
    b = t5_relative_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    back, ahead = b[rel <= 0], b[rel > 0]
    assert back.max().item() <= 15 and ahead.min().item() >= 16  # half the buckets for each direction
    assert [t5_relative_bucket(torch.tensor(r), bidirectional=True).item() for r in (0, -1, -7, -8, 1, 7, 8)] == [
        0,
        1,
        7,
        8,
        17,
        23,
        24,
    ]


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20)])
def test_t5_buckets_agree_with_x_transformers(bidirectional, num_buckets, max_distance):
    xt = pytest.importorskip("x_transformers.x_transformers")
    rel = torch.arange(-500, 500)
    theirs = xt.RelativePositionBias._relative_position_bucket(
        rel, causal=not bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    assert torch.equal(
        t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance), theirs
    )


def test_t5_bias_looks_up_one_scalar_per_bucket_and_head():
    t5 = T5RelativeBias(3)
    bias = t5.score_bias(torch.zeros(1, 3, 5, 4), torch.arange(5), torch.arange(5))  # (1,3,5,5)
    for i in range(5):
        for j in range(5):
            torch.testing.assert_close(bias[0, :, i, j], t5.bias.weight[t5_bucket_reference(max(i - j, 0))])


def test_t5_bad_buckets():
    with pytest.raises(ValueError, match=r"num_buckets=1 and max_distance=128 leave no room for logarithmic buckets"):
        T5RelativeBias(2, num_buckets=1)
    with pytest.raises(ValueError, match=r"num_buckets=32 and max_distance=8 leave no room"):
        T5RelativeBias(2, max_distance=8)


# ----------------------------------------------------------------------------------- attention with each scheme


def reference_attention(x, attn, *, bias_fn=None, shaw=None):
    """Causal attention from the definitions, one query at a time (no SDPA, no vectorised masks)."""
    B, T, D = x.shape
    H, d = attn.n_heads, attn.head_dim
    q, k, v = attn.qkv(x).split(D, dim=-1)
    q, k, v = (t.view(B, T, H, d) for t in (q, k, v))
    out = torch.zeros(B, T, H, d)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                scores = []
                for j in range(i + 1):
                    kj = k[b, j, h] + (
                        shaw.key[min(max(j - i, -shaw.max_distance), shaw.max_distance) + shaw.max_distance]
                        if shaw
                        else 0
                    )
                    s = (q[b, i, h] @ kj) / math.sqrt(d)
                    scores.append(s + (bias_fn(h, i, j) if bias_fn else 0))
                w = torch.softmax(torch.stack(scores), dim=0)
                for j in range(i + 1):
                    vj = v[b, j, h] + (
                        shaw.value[min(max(j - i, -shaw.max_distance), shaw.max_distance) + shaw.max_distance]
                        if shaw
                        else 0
                    )
                    out[b, i, h] += w[j] * vj
    return attn.proj(out.reshape(B, T, D))


def test_alibi_attention_equals_the_definition():
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 4, positional=ALiBi(4))
    x = torch.randn(2, 6, 16)
    slopes = alibi_slopes(4)
    expected = reference_attention(x, attn, bias_fn=lambda h, i, j: -slopes[h] * (i - j))
    torch.testing.assert_close(attn(x, torch.arange(6)), expected, atol=1e-5, rtol=1e-4)


def test_t5_attention_equals_the_definition():
    torch.manual_seed(0)
    t5 = T5RelativeBias(2, num_buckets=8, max_distance=10)
    attn = CausalSelfAttention(8, 2, positional=t5)
    x = torch.randn(1, 12, 8)
    expected = reference_attention(
        x, attn, bias_fn=lambda h, i, j: t5.bias.weight[t5_bucket_reference(i - j, 8, 10), h]
    )
    torch.testing.assert_close(attn(x, torch.arange(12)), expected, atol=1e-5, rtol=1e-4)


def test_shaw_attention_equals_the_papers_equations():
    torch.manual_seed(0)
    shaw = ShawRelativePositions(4, max_distance=2)
    with torch.no_grad():  # larger than the N(0, 0.02) init so that the terms matter
        shaw.key.normal_()
        shaw.value.normal_()
    attn = CausalSelfAttention(8, 2, positional=shaw)
    x = torch.randn(2, 7, 8)
    torch.testing.assert_close(attn(x, torch.arange(7)), reference_attention(x, attn, shaw=shaw), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "shaw", "none"])
def test_relative_schemes_ignore_where_the_sequence_starts(name):
    # Only distances matter: shifting every position by 1000 leaves the output unchanged.
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 4, positional=attention_positional(name, n_heads=4, head_dim=4))
    x = torch.randn(2, 9, 16)
    torch.testing.assert_close(attn(x, torch.arange(9) + 1000), attn(x, torch.arange(9)), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["t5", "shaw"])
def test_learned_relative_terms_get_gradients(name):
    pos = attention_positional(name, n_heads=2, head_dim=4)
    attn = CausalSelfAttention(8, 2, positional=pos)
    attn(torch.randn(2, 5, 8), torch.arange(5)).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pos.parameters())


# ----------------------------------------------------------------------------------- registry


def test_every_name_builds_and_unknown_names_are_listed():
    assert POSITIONAL_NAMES == ("learned", "sinusoidal", "rope", "alibi", "t5", "shaw", "none")
    acts = {n: positional_scheme(n).acts for n in POSITIONAL_NAMES}
    assert acts == {
        "learned": "input",
        "sinusoidal": "input",
        "rope": "rotate",
        "alibi": "score",
        "t5": "score",
        "shaw": "score",
        "none": "none",
    }
    for n in POSITIONAL_NAMES:
        inp, att = input_positional(n, context_length=8, dim=8), attention_positional(n, n_heads=2, head_dim=4)
        assert (inp is not None) == (acts[n] == "input") and (att is not None) == (acts[n] in ("rotate", "score"))
    with pytest.raises(
        ValueError,
        match=r"unknown positional scheme 'xpos'; choose one of learned, sinusoidal, rope, alibi, t5, shaw, none",
    ):
        tokembed.InputEmbedding(10, 4, 4, positional="xpos")


# ------------------------------------------------------- the RoPE family against Hugging Face transformers


def hf_rope(kind: str, *, head_dim: int, factor: float, original: int, base: float, fraction: float = 1.0):
    """(inv_freq, attention_factor) from transformers' own ROPE_INIT_FUNCTIONS (an independent implementation)."""
    pytest.importorskip("transformers", reason="the dev extra installs transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": kind, "rope_theta": base, "factor": factor, "partial_rotary_factor": fraction}
    if kind in ("yarn", "llama3"):
        params["original_max_position_embeddings"] = original
    if kind == "llama3":
        params.update(low_freq_factor=1.0, high_freq_factor=4.0)
    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=int(original * factor),
        rope_parameters=params,
    )
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    return inv_freq.double(), attention_factor


@pytest.mark.parametrize("kind", ["linear", "yarn", "llama3"])
@pytest.mark.parametrize(
    "head_dim, factor, original, base",
    [(16, 4.0, 32, 10000.0), (64, 8.0, 2048, 10000.0), (128, 8.0, 8192, 500000.0), (128, 2.5, 4096, 1e6)],
)
def test_rope_scalings_equal_transformers(kind, head_dim, factor, original, base):
    theirs, their_factor = hf_rope(kind, head_dim=head_dim, factor=factor, original=original, base=base)
    ours = rope_inv_freq(head_dim, base=base, scaling=kind, factor=factor, original_length=original)
    torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=0)  # transformers computes in float32
    rope = RotaryEmbedding(head_dim, base=base, scaling=kind, factor=factor, original_length=original)
    assert rope.attention_factor == pytest.approx(their_factor, rel=1e-12)


@pytest.mark.parametrize("kind", ["yarn", "llama3"])
def test_partial_rope_frequencies_equal_transformers(kind):
    theirs, their_factor = hf_rope(kind, head_dim=64, factor=4.0, original=256, base=10000.0, fraction=0.5)
    rope = RotaryEmbedding(64, scaling=kind, factor=4.0, original_length=256, fraction=0.5)
    assert rope.rotary_dim == 32
    torch.testing.assert_close(rope.inv_freq, theirs, rtol=2e-6, atol=0)
    assert rope.attention_factor == pytest.approx(their_factor, rel=1e-12)


def test_yarn_temperature_scales_the_logits_by_its_square():
    # YaRN (Peng et al. 2023, eq. 22): softmax(q.k / (t sqrt(d))) with sqrt(1/t) = 0.1 ln(s) + 1, applied to q and k
    rope = RotaryEmbedding(16, scaling="yarn", factor=8.0, original_length=32)
    plain = RotaryEmbedding(16)
    plain.inv_freq.copy_(rope.inv_freq)  # the same angles, without the temperature
    q, k, pos = torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16), torch.arange(10)
    scaled = (lambda a, b: a @ b.transpose(-1, -2))(*rope.rotate(q, k, pos))
    unscaled = (lambda a, b: a @ b.transpose(-1, -2))(*plain.rotate(q, k, pos))
    torch.testing.assert_close(scaled, unscaled * (0.1 * math.log(8.0) + 1) ** 2, rtol=1e-5, atol=1e-5)


@given(fraction=st.sampled_from([0.25, 0.5, 0.75]), t=st.integers(1, 12))
@settings(max_examples=12)
def test_partial_rope_rotates_the_first_part_and_passes_the_rest(fraction, t):
    x, pos = torch.randn(2, 3, t, 16), torch.arange(t)
    partial = RotaryEmbedding(16, fraction=fraction)
    r = partial.rotary_dim
    out = partial(x, pos)
    torch.testing.assert_close(out[..., r:], x[..., r:], rtol=0, atol=0)  # no position in the rest
    torch.testing.assert_close(out[..., :r], RotaryEmbedding(r)(x[..., :r], pos))  # full RoPE of width r
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))  # still a rotation


def test_a_gpt_with_partial_rope_and_yarn_runs_past_its_length():
    model = tokembed.GPT(
        tokembed.GPTConfig(
            vocab_size=50, context_length=8, dim=32, n_heads=2, positional="rope", positional_options={"fraction": 0.5}
        )
    )
    rope = model.positional
    assert rope.rotary_dim == 8 and rope.original_length == 8
    ids = torch.randint(0, 50, (1, 32))
    from tokembed.training.evaluation import rope_scaled

    with rope_scaled(model, "yarn", 4.0):
        assert rope.scaling == "yarn" and rope.attention_factor > 1
        assert torch.isfinite(model(ids)).all()
    assert rope.scaling is None and rope.attention_factor == 1.0  # restored


def test_the_torch_free_names_list_every_rope_scaling():
    from tokembed.embeddings.names import ROPE_SCALINGS as cli_names
    from tokembed.embeddings.rotary import ROPE_SCALINGS

    assert cli_names == ROPE_SCALINGS
