"""Two positional schemes written in this file alone (no edit under src/): registered, then trained, saved,
loaded, inspected and reported like the built-in seven.

* ``slopes`` acts on attention scores: head h adds ``-slope_h * |i - j|``, with the slopes *learned*
  (ALiBi whose slopes train). Its options: the slopes' starting value, and whether they train.
* ``scaledsin`` acts on the input: the sinusoidal table times a factor (its one option).

The numbers are checked against definitions written here (the slopes read from the checkpoint file itself,
the sinusoid from its formula), never against the scheme's own module. Registering is what a user does:
``register_scheme`` from their code, or ``TOKEMBED_PLUGINS=module:function`` / an entry point of the group
``tokembed.plugins`` for the ``tokembed`` command (the last tests run it as a separate process).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import tokembed
from conftest import STORY
from tokembed.cli import main
from tokembed.embeddings import (
    AttentionPositional,
    ModelShape,
    NoOptions,
    PositionalScheme,
    option,
    register_scheme,
    score_bias_picture,
    unregister_scheme,
)
from tokembed.embeddings.interface import relative_positions

TESTS = Path(__file__).resolve().parent

# --------------------------------------------------------------------------- the schemes, as a user writes them


@dataclass(frozen=True)
class SlopesOptions:
    init_slope: float = option(0.5, "slopes: each head's slope at the start")
    trainable: bool = option(True, "slopes: learn the slopes (false: keep them)")

    def __post_init__(self) -> None:
        if not self.init_slope > 0:
            raise ValueError(f"slopes_init_slope must be > 0, got {self.init_slope!r}")


class LearnedSlopes(AttentionPositional):
    """Adds ``-slope_h * |k_pos - q_pos|`` to head h's scores; the (n_heads,) slopes are a parameter."""

    def __init__(self, n_heads: int, *, init_slope: float, trainable: bool) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.full((n_heads,), float(init_slope)), requires_grad=trainable)

    @classmethod
    def from_options(cls, options: SlopesOptions, shape: ModelShape) -> LearnedSlopes:
        return cls(shape.n_heads, init_slope=options.init_slope, trainable=options.trainable)

    def score_bias(self, q, q_pos, k_pos):
        dist = relative_positions(q_pos, k_pos).abs().to(q.dtype)  # (B,Tq,Tk)
        return -dist.unsqueeze(1) * self.slope.to(q.dtype).view(1, -1, 1, 1)  # (B,H,Tq,Tk)

    @classmethod
    def pictures(cls, modules, *, length):
        m = modules[0]
        title = "slopes: learned slope times distance, per head"
        return [score_bias_picture(m, length, title, n_heads=m.slope.numel())]

    def extra_repr(self) -> str:
        return f"n_heads={self.slope.numel()}"


@dataclass(frozen=True)
class ScaleOptions:
    scale: float = option(1.0, "scaledsin: the factor on the sinusoidal table")


class ScaledSinusoid(nn.Module):
    """Position ids (*) -> scale * the sinusoidal vectors (*, dim)."""

    def __init__(self, dim: int, scale: float) -> None:
        super().__init__()
        self.dim, self.scale = dim, scale

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return self.scale * tokembed.embeddings.sinusoidal_table(int(position_ids.max()) + 1, self.dim)[position_ids]


SLOPES = PositionalScheme(
    "slopes",
    "score",
    LearnedSlopes.from_options,
    options=SlopesOptions,
    reference="a test of tokembed",
    summary="a learned slope per head times the distance, added to attention scores",
)
SCALEDSIN = PositionalScheme(
    "scaledsin",
    "input",
    lambda options, shape: ScaledSinusoid(shape.dim, options.scale),
    options=ScaleOptions,
    vectors="formula",
    even="dim",
    summary="sines and cosines times a factor, added to the input",
)


def register() -> None:
    """What a plugin's entry point (or TOKEMBED_PLUGINS=test_toy_scheme:register) calls."""
    register_scheme(SLOPES)
    register_scheme(SCALEDSIN)


# --------------------------------------------------------------------------- in this process


@pytest.fixture(scope="module")
def registered():
    register()
    yield
    for name in ("slopes", "scaledsin"):
        unregister_scheme(name)


SMALL = dict(context_length=16, dim=16, n_layers=2, n_heads=2)


@pytest.fixture(scope="module")
def run(registered, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("slopes") / "run"
    config = tokembed.TrainConfig(data=str(STORY), out=str(out), max_length=16, batch_size=4, max_steps=3)
    model = tokembed.GPTConfig(**SMALL, positional="slopes", positional_options={"init_slope": 0.25})
    tokembed.train(config, model, progress=False)
    return out


def saved_slopes(run: Path) -> list[float]:
    """The slopes as the checkpoint file holds them (read with safetensors, not through tokembed)."""
    return load_file(str(run / "model.safetensors"))["positional.slope"].tolist()


def test_the_scheme_is_saved_with_its_options_and_weights(run):
    model = json.loads((run / "config.json").read_text())["model"]
    assert (model["positional"], model["positional_options"]) == ("slopes", {"init_slope": 0.25, "trainable": True})
    keys = load_file(str(run / "model.safetensors")).keys()
    assert "positional.slope" in keys  # one module for all layers, stored once
    assert not any(".attn.positional." in k for k in keys)
    assert all(s != 0.25 for s in saved_slopes(run))  # three steps of training moved them


def test_the_checkpoint_loads_into_the_scheme(run):
    model, config = tokembed.load_checkpoint(run)
    assert isinstance(model.positional, LearnedSlopes)
    assert all(b.attn.positional is model.positional for b in model.blocks)
    assert model.positional.slope.tolist() == saved_slopes(run)
    assert model.config.positional_options == SlopesOptions(init_slope=0.25)
    assert model.max_length is None  # not bounded: reads past its training length
    assert torch.isfinite(model(torch.randint(0, 100, (1, 40)))).all()


def assert_bias_curves(curves: list, run: Path, length: int) -> None:
    """Head h's curve is -slope_h * distance, for distances 0..length-1, with the slopes of the file."""
    slopes = saved_slopes(run)
    assert len(curves) == len(slopes)
    for y, s in zip(curves, slopes):
        assert list(y) == pytest.approx([-s * d for d in range(length)], abs=1e-6)


def test_inspect_positions_through_the_cli_and_the_library(run, capsys, tmp_path):
    assert main(["inspect", str(run), "positions", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["positional"] == "slopes" and "slopes positions act inside attention" in out["about"]
    (picture,) = out["pictures"]
    assert_bias_curves([c["y"] for c in picture["curves"]], run, 16)
    from tokembed.inspection.positions import checkpoint_position_pictures

    (pic,) = checkpoint_position_pictures(run)
    assert_bias_curves([c.y for c in pic.curves], run, 16)
    assert tokembed.load_table(run).positions is None  # no vector per position to show
    assert main(["inspect", str(run), "plot", "positions", "-o", str(tmp_path / "p.png")]) == 0


def test_report_draws_the_scheme_and_names_its_module(run, tmp_path):
    from test_report import sections_of

    out = tmp_path / "r.html"
    assert main(["report", str(run), "-o", str(out), "--no-tsne", "--points", "200"]) == 0
    found = sections_of(out)
    assert found["Position embeddings"]["images"] == 1
    assert "slopes positions act inside attention" in found["Position embeddings"]["text"]
    settings = found["Settings"]["text"]
    assert "LearnedSlopes(n_heads=2)" in settings and "init_slope" in settings


def test_the_cli_offers_its_options_and_trains_resumes_and_refuses_with_them(registered, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "--toy" not in text and "--slopes-init-slope" in text and "--slopes-trainable" in text
    assert "slopes: each head's slope at the start (default 0.5)" in " ".join(text.split())
    assert "--scaledsin-scale" in text and "slopes," in text  # in --positional's choices
    out = tmp_path / "ck"
    base = ["train", str(STORY), "--out", str(out), "--dim", "16", "--layers", "1", "--heads", "2"]
    base += ["--max-length", "16", "--batch-size", "2", "--eval-batches", "1", "--quiet"]
    kept = ["--positional", "slopes", "--slopes-init-slope", "0.75", "--slopes-trainable", "false"]
    assert main([*base, *kept, "--steps", "2"]) == 0
    assert json.loads((out / "config.json").read_text())["model"]["positional_options"] == {
        "init_slope": 0.75,
        "trainable": False,
    }
    assert saved_slopes(out) == [0.75, 0.75]  # not trained: as given
    assert main(["train", str(STORY), "--out", str(out), "--resume", "--steps", "3", "--quiet"]) == 0
    assert json.loads((out / "config.json").read_text())["step"] == 3
    capsys.readouterr()
    assert main([*base[:3], str(tmp_path / "x"), "--positional", "slopes", "--slopes-init-slope", "-1"]) == 2
    assert "tokembed train: error: slopes_init_slope must be > 0, got -1.0" in capsys.readouterr().err
    assert main([*base[:3], str(tmp_path / "y"), "--positional", "rope", "--slopes-init-slope", "1"]) == 2
    assert (
        "--slopes-init-slope is an option of --positional slopes, but this model uses rope" in capsys.readouterr().err
    )


def test_the_positions_experiment_runs_it_with_each_schemes_options(registered, tmp_path, capsys):
    out = tmp_path / "exp"
    args = [
        "experiment",
        "positions",
        str(STORY),
        "--out",
        str(out),
        "--quick",
        "--quiet",
        "--tokenizer",
        "bytes",
    ]
    options = ["--rope-fraction", "0.5", "--slopes-init-slope", "0.3", "--slopes-trainable", "false"]
    assert main([*args, "--schemes", "rope,slopes", *options]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert set(doc["results"]) == {"rope", "rope+pi", "rope+ntk", "rope+yarn", "rope+llama3", "slopes"}
    assert doc["config"]["positional_options"] == {
        "rope": {"fraction": 0.5},
        "slopes": {"init_slope": 0.3, "trainable": False},
    }
    assert json.loads((out / "rope" / "config.json").read_text())["model"]["positional_options"]["fraction"] == 0.5
    assert saved_slopes(out / "slopes") == pytest.approx([0.3, 0.3], rel=1e-7)  # float32, untrained
    assert main([*args, "--schemes", "alibi", "--rope-fraction", "0.5"]) == 2
    assert "positional_options are given for 'rope', which schemes leaves out (alibi)" in capsys.readouterr().err


def sinusoid(n: int, dim: int) -> torch.Tensor:
    """Vaswani et al.'s table from its definition: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...)."""
    pe = torch.zeros(n, dim, dtype=torch.float64)
    for p in range(n):
        for i in range(dim // 2):
            pe[p, 2 * i] = math.sin(p / 10000 ** (2 * i / dim))
            pe[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / dim))
    return pe.float()


def test_an_input_scheme_is_added_and_its_vectors_are_inspected(registered, tmp_path):
    out = tmp_path / "run"
    config = tokembed.TrainConfig(data=str(STORY), out=str(out), max_length=16, batch_size=4, max_steps=2)
    model_config = tokembed.GPTConfig(**SMALL, positional="scaledsin", positional_options={"scale": 0.5})
    tokembed.train(config, model_config, progress=False)
    table = tokembed.load_table(out)  # computed by the scheme: nothing of it is stored
    torch.testing.assert_close(table.positions, 0.5 * sinusoid(16, 16), atol=1e-6, rtol=0)
    assert "embed.position" not in " ".join(load_file(str(out / "model.safetensors")))
    model, _ = tokembed.load_checkpoint(out)
    ids = torch.randint(0, 1000, (1, 5))
    with torch.no_grad():  # the model's input: token vectors + the scheme's vectors at positions 0..4
        expected = model.embed.token(ids) + 0.5 * sinusoid(5, 16)
        torch.testing.assert_close(model.embed(ids), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"scaledsin positions need an even dim, got 15"):
        tokembed.GPTConfig(dim=15, n_heads=1, positional="scaledsin")


@pytest.mark.parametrize("positional", ["slopes", "scaledsin"])
def test_positions_restart_in_each_packed_document(registered, positional):
    # The model computes position ids once (0 again after each <|endoftext|>) and hands them to any scheme.
    eot = 96
    torch.manual_seed(0)
    config = tokembed.GPTConfig(vocab_size=97, **SMALL, positional=positional, document_mask=True, eot_token=eot)
    model = tokembed.GPT(config).eval()
    a, b = [11, 12, 13, eot], [21, 22, 23, 24]
    with torch.no_grad():
        packed = model(torch.tensor([a + b]))[0, len(a) :]
        alone = model(torch.tensor([b]))[0]
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)


def test_registration_errors_name_the_problem(registered):
    with pytest.raises(ValueError, match=r"a positional scheme named 'slopes' is registered already"):
        register_scheme(PositionalScheme("slopes", "none"))
    with pytest.raises(ValueError, match=r"scheme name 'My-Scheme' must be lower-case letters and digits"):
        PositionalScheme("My-Scheme", "none")
    with pytest.raises(ValueError, match=r"scheme 'x': acts must be one of 'input', 'rotate', 'score', 'none'"):
        PositionalScheme("x", "added", lambda o, s: None)
    with pytest.raises(ValueError, match=r"scheme 'x' acts 'score': give build\(options, shape\)"):
        PositionalScheme("x", "score")

    @dataclass
    class Mutable:
        k: int = 1

    with pytest.raises(TypeError, match=r"scheme 'x': options must be a frozen dataclass class"):
        PositionalScheme("x", "score", lambda o, s: None, options=Mutable)

    @dataclass(frozen=True)
    class NoDefault:
        k: int

    with pytest.raises(TypeError, match=r"scheme 'x': every option needs a default, \['k'\] have none"):
        PositionalScheme("x", "score", lambda o, s: None, options=NoDefault)
    with pytest.raises(ValueError, match=r"unknown options \['slope'\] for the slopes scheme; its options are"):
        tokembed.GPTConfig(positional="slopes", positional_options={"slope": 1.0})
    with pytest.raises(TypeError, match=r"positional_options of the slopes scheme must be None, a dict or SlopesOpt"):
        tokembed.GPTConfig(positional="slopes", positional_options=ScaleOptions())
    assert SLOPES.make_options(NoOptions()) == SlopesOptions()  # a scheme without options: the defaults
    with pytest.raises(ImportError, match=r"cannot load 'no_such_module:build'"):
        PositionalScheme("x", "score", "no_such_module:build").module(None, ModelShape(dim=4))


def test_after_unregistering_the_name_is_unknown_again():
    register_scheme(PositionalScheme("gone", "none"))
    assert "gone" in tokembed.scheme_names()
    unregister_scheme("gone")
    with pytest.raises(ValueError, match=r"unknown positional scheme 'gone'; choose one of learned, sinusoidal"):
        tokembed.GPTConfig(positional="gone")


# --------------------------------------------------------------------------- the `tokembed` command, as a plugin


def tokembed_process(*argv: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m tokembed ARGV`` in a new interpreter that finds this test file on its path (PYTHONPATH)."""
    path = os.pathsep.join([str(TESTS), *filter(None, [env.pop("PYTHONPATH", None)])])
    full = {**os.environ, "PYTHONPATH": path, **env}
    return subprocess.run(
        [sys.executable, "-m", "tokembed", *argv], capture_output=True, text=True, timeout=300, env=full, cwd=cwd
    )


def test_an_entry_point_registers_the_schemes_for_the_command(tmp_path):
    # An installed package declares [project.entry-points."tokembed.plugins"]; here its .dist-info alone.
    info = tmp_path / "site" / "toy_schemes-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-schemes\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tokembed.plugins]\ntoy = test_toy_scheme:register\n")
    proc = tokembed_process("train", "--help", env={"PYTHONPATH": str(tmp_path / "site")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--slopes-init-slope" in proc.stdout and "--scaledsin-scale" in proc.stdout
    bad = tokembed_process("train", "--help", env={"TOKEMBED_PLUGINS": "no_such_plugin"}, cwd=tmp_path)
    assert bad.returncode != 0
    assert (
        "tokembed plugin 'no_such_plugin' (from TOKEMBED_PLUGINS) failed to import: ModuleNotFoundError" in bad.stderr
    )


@pytest.mark.slow
def test_tokembed_plugins_names_the_schemes_for_train_inspect_and_report(tmp_path):
    env = {"TOKEMBED_PLUGINS": "test_toy_scheme:register"}
    run = tmp_path / "run"
    train = ["train", str(STORY), "--out", str(run), "--positional", "slopes", "--slopes-init-slope", "0.3"]
    train += ["--dim", "16", "--layers", "1", "--heads", "2", "--max-length", "16", "--batch-size", "2"]
    proc = tokembed_process(*train, "--steps", "2", "--eval-batches", "1", "--quiet", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = tokembed_process("inspect", str(run), "positions", "--json", env=dict(env), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (picture,) = json.loads(proc.stdout)["pictures"]
    assert_bias_curves([c["y"] for c in picture["curves"]], run, 16)
    report = ["report", str(run), "-o", str(tmp_path / "r.html"), "--no-tsne", "--points", "100"]
    assert tokembed_process(*report, env=dict(env), cwd=tmp_path).returncode == 0
    forgot = tokembed_process("inspect", str(run), "positions", env={}, cwd=tmp_path)  # without the plugin
    assert forgot.returncode == 2 and "unknown positional scheme 'slopes'" in forgot.stderr
