"""Position pictures come from the model's own positional modules and show the published values."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import STORY
from inspect_helpers import SCHEMES, tiny_run
from tokembed.cli import main
from tokembed.embeddings import ALiBi, RotaryEmbedding, ShawRelativePositions, T5RelativeBias
from tokembed.inspection.positions import attention_modules, position_pictures


def test_rope_frequencies_and_similarity_decay_are_the_papers():
    rope = RotaryEmbedding(16)
    freq, decay = position_pictures([rope], length=64)
    # Su et al. 2021, eq. 15: theta_i = 10000^(-2i/d)
    assert freq.curves[0].y == pytest.approx([10000 ** (-2 * i / 16) for i in range(8)], rel=1e-12)
    # a vector of equal pairs rotated by m: <R(m)x, x> / |x|^2 = mean_i cos(m theta_i)
    expected = [sum(math.cos(m * 10000 ** (-2 * i / 16)) for i in range(8)) / 8 for m in range(64)]
    assert decay.curves[0].y == pytest.approx(expected, abs=1e-6) and decay.curves[0].y[0] == pytest.approx(1.0)


def test_alibi_bias_is_minus_the_published_slope_times_distance():
    (pic,) = position_pictures([ALiBi(8)], length=20)
    for h, curve in enumerate(pic.curves):  # Press et al. 2022: 8 heads, slopes 1/2 ... 1/256
        assert curve.x == tuple(float(d) for d in range(20))
        assert curve.y == pytest.approx([-d / 2 ** (h + 1) for d in range(20)], abs=1e-6)


def test_t5_bias_follows_the_published_bucket_boundaries():
    t5 = T5RelativeBias(3)
    torch.nn.init.normal_(t5.bias.weight)
    (pic,) = position_pictures([t5], length=130)
    starts = [16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113]  # Raffel et al., 32 buckets, 128
    bucket = list(range(16)) + [16 + sum(d >= s for s in starts[1:]) for d in range(16, 128)] + [31, 31]
    for h, curve in enumerate(pic.curves):
        assert curve.y == pytest.approx([float(t5.bias.weight.detach()[bucket[d], h]) for d in range(130)], abs=1e-6)


def test_shaw_picture_shows_every_layers_vectors():
    layers = [ShawRelativePositions(8, max_distance=4) for _ in range(2)]
    (pic,) = position_pictures(layers, length=16)
    assert [c.label for c in pic.curves] == [f"layer {i} {t} vectors" for i in (0, 1) for t in ("key", "value")]
    assert pic.curves[2].x == tuple(float(d) for d in range(-4, 5))
    assert pic.curves[3].y == pytest.approx(layers[1].value.norm(dim=1).tolist(), rel=1e-6)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("schemes")
    return {s: tiny_run(root / s, s, str(STORY)) for s in SCHEMES}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", SCHEMES)
def test_inspect_positions_answers_for_every_scheme(runs, scheme, capsys, tmp_path):
    assert main(["inspect", str(runs[scheme]), "positions", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["positional"] == scheme
    if scheme in ("rope", "alibi", "t5", "shaw"):
        from tokembed.model.checkpoint import load_checkpoint

        model, _ = load_checkpoint(runs[scheme])
        expected = position_pictures(attention_modules(model), length=16)  # the trained modules themselves
        assert [p["curves"][0]["y"] for p in out["pictures"]] == [list(p.curves[0].y) for p in expected]
    elif scheme == "none":
        assert out["pictures"] == [] and "causal mask" in out["about"]
    else:
        assert out["positions"] == 16
    if scheme != "none":
        assert main(["inspect", str(runs[scheme]), "plot", "positions", "-o", str(tmp_path / "p.png")]) == 0
