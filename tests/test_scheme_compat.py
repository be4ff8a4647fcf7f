"""What tokembed 0.1 wrote still loads: configs and checkpoints with the scheme's options flat on the model config.

The checkpoints under fixtures/tokembed-0.1/ were written by the code at tag round18-base (see its README),
with the logits that code computed from them: today's code must compute the same. The other 0.1 configs are
written here by hand, in the layout 0.1's ``GPTConfig.to_dict()`` had. The command-line spellings of 0.1
(``--rope-base``, ``--t5-buckets``, ...) keep working, and so, with a DeprecationWarning, do 0.1's keyword
arguments (``GPTConfig(rope_base=...)``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tokembed
from tokembed import GPT, GPTConfig
from tokembed.cli import build_parser, main
from tokembed.cli.train import scheme_options
from tokembed.embeddings import RopeOptions, ShawOptions, SinusoidalOptions, T5Options
from tokembed.embeddings.names import NoOptions
from tokembed.model.checkpoint import load_checkpoint, model_state_for_disk

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tokembed-0.1"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
OLD_OPTIONS = {  # what make_fixture.py passed on 0.1's command line, as today's options
    "rope": RopeOptions(base=500.0, fraction=0.5),
    "t5": T5Options(num_buckets=8, max_distance=20),
    "shaw": ShawOptions(max_distance=4),
}


def old_model_dict(positional: str, **flat) -> dict:
    """A model config as tokembed 0.1 wrote it: every scheme's options flat, at 0.1's defaults unless given."""
    d = dict(vocab_size=257, context_length=16, dim=8, n_layers=2, n_heads=2, dropout=0.0, positional=positional)
    d.update(tie_embeddings=True, bias=True, rope_base=10000.0, rope_scaling=None, rope_factor=1.0, rope_fraction=1.0)
    d.update(t5_num_buckets=32, t5_max_distance=128, shaw_max_distance=16, document_mask=False, eot_token=256)
    return {**d, **flat}


@pytest.mark.parametrize("scheme", sorted(OLD_OPTIONS))
def test_a_checkpoint_written_by_0_1_computes_what_0_1_computed(scheme):
    model, config = load_checkpoint(FIXTURES / scheme)
    assert "positional_options" not in config["model"]  # the file is 0.1's; it was read, not rewritten
    assert model.config.positional == scheme and model.config.positional_options == OLD_OPTIONS[scheme]
    ids = torch.tensor([EXPECTED["ids"]])
    with torch.no_grad():
        logits = model(ids)
        loss = model.loss(ids[:, :-1], ids[:, 1:])
    expected = EXPECTED["expected"][scheme]
    torch.testing.assert_close(logits[0, :, :4], torch.tensor(expected["logits[0, :, :4]"]), atol=2e-6, rtol=0)
    assert loss.item() == pytest.approx(expected["loss"], abs=2e-6)


@pytest.mark.parametrize("scheme", sorted(OLD_OPTIONS))
def test_state_dict_names_are_0_1s(scheme):
    old = json.loads((FIXTURES / scheme / "config.json").read_text())["model"]
    fresh = GPT(GPTConfig.from_dict(old))
    assert set(model_state_for_disk(fresh)) == set(load_file(str(FIXTURES / scheme / "model.safetensors")))


def test_every_built_in_schemes_weights_keep_their_names():
    base = {k for k in GPT(GPTConfig.from_dict(old_model_dict("none"))).state_dict()}
    extra = {
        "learned": {"embed.position.weight"},
        "sinusoidal": set(),
        "rope": set(),
        "alibi": set(),
        "t5": {"positional.bias.weight"},
        "shaw": {f"blocks.{i}.attn.positional.{t}" for i in (0, 1) for t in ("key", "value")},
        "none": set(),
    }
    for scheme, names in extra.items():
        assert set(GPT(GPTConfig.from_dict(old_model_dict(scheme))).state_dict()) == base | names, scheme


@pytest.mark.parametrize(
    "positional, flat, options",
    [
        ("learned", {}, NoOptions()),
        ("sinusoidal", {}, SinusoidalOptions()),
        ("rope", {"rope_scaling": "yarn", "rope_factor": 4.0}, RopeOptions(scaling="yarn", factor=4.0)),
        ("alibi", {"rope_base": 500.0, "t5_num_buckets": 8}, NoOptions()),  # another scheme's: ignored, as in 0.1
        ("t5", {"t5_max_distance": 64}, T5Options(max_distance=64)),
        ("shaw", {"shaw_max_distance": 2}, ShawOptions(max_distance=2)),
        ("none", {}, NoOptions()),
    ],
)
def test_a_0_1_config_json_reads_its_schemes_options(positional, flat, options):
    config = GPTConfig.from_dict(old_model_dict(positional, **flat))
    assert config.positional_options == options
    assert config.to_dict()["positional_options"] == {k: getattr(options, k) for k in options.__dataclass_fields__}
    assert not {"rope_base", "t5_num_buckets", "shaw_max_distance"} & set(config.to_dict())


def test_a_0_1_config_with_a_bad_or_unknown_field_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"rope_scaling must be None or one of linear, ntk, yarn, llama3, got 'x'"):
        GPTConfig.from_dict(old_model_dict("learned", rope_scaling="x"))  # 0.1 refused it too
    with pytest.raises(ValueError, match=r"unknown GPTConfig fields \['rope_theta'\]"):
        GPTConfig.from_dict(old_model_dict("rope", rope_theta=1.0))


def copy_resumable(scheme: str, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of a fixture whose config names a copy of its data (and whose checksums say so)."""
    ckpt, data = tmp_path / scheme, tmp_path / "data.txt"
    shutil.copytree(FIXTURES / scheme, ckpt)
    shutil.copy(FIXTURES / "data.txt", data)
    config = json.loads((ckpt / "config.json").read_text())
    config["train"]["data"] = str(data)
    (ckpt / "config.json").write_text(json.dumps(config, indent=1))
    sums = json.loads((ckpt / "sha256.json").read_text())
    sums["config.json"] = hashlib.sha256((ckpt / "config.json").read_bytes()).hexdigest()
    (ckpt / "sha256.json").write_text(json.dumps(sums))
    return ckpt, data


def test_a_0_1_checkpoint_resumes_and_is_then_written_in_todays_layout(tmp_path, capsys):
    ckpt, data = copy_resumable("t5", tmp_path)
    assert main(["train", str(data), "--out", str(ckpt), "--resume", "--steps", "5", "--quiet"]) == 0
    config = json.loads((ckpt / "config.json").read_text())
    assert config["step"] == 5 and config["model"]["positional_options"] == {"num_buckets": 8, "max_distance": 20}
    assert "t5_num_buckets" not in config["model"]
    model, _ = load_checkpoint(ckpt)
    assert model.positional.bias.weight.shape == (8, 2)


def test_a_0_1_checkpoint_is_inspected_evaluated_and_reported(tmp_path, capsys):
    assert main(["inspect", str(FIXTURES / "shaw"), "positions", "--json"]) == 0
    (picture,) = json.loads(capsys.readouterr().out)["pictures"]
    shaw = load_file(str(FIXTURES / "shaw" / "model.safetensors"))
    assert picture["curves"][0]["y"] == pytest.approx(shaw["blocks.0.attn.positional.key"].norm(dim=1).tolist())
    assert main(["eval", str(FIXTURES / "rope"), "--data", str(FIXTURES / "data.txt"), "--lengths", "16,32"]) == 0
    data = str(FIXTURES / "data.txt")
    with pytest.raises(ValueError, match=r"rope scaling must be one of linear, ntk, yarn, llama3 or None, got 'dyn'"):
        tokembed.evaluate(FIXTURES / "rope", lengths=[16], data=data, rope_scaling="dyn")  # the scheme's scalings
    with pytest.raises(ValueError, match=r"rope_scaling applies to rope models; this one uses 't5' positions"):
        tokembed.evaluate(FIXTURES / "t5", lengths=[16], data=data, rope_scaling="linear")
    out = tmp_path / "r.html"
    assert main(["report", str(FIXTURES / "t5"), "-o", str(out), "--no-tsne", "--points", "100"]) == 0
    html = out.read_text(encoding="utf-8")
    assert "T5RelativeBias(n_heads=2, num_buckets=8, max_distance=20" in html and "t5_num_buckets" not in html


@pytest.mark.parametrize(
    "argv, positional, options",
    [
        (["--rope-base", "500", "--rope-fraction", "0.5"], "rope", {"base": 500.0, "fraction": 0.5}),
        (["--rope-scaling", "yarn", "--rope-factor", "4"], "rope", {"scaling": "yarn", "factor": 4.0}),
        (["--t5-buckets", "8", "--t5-max-distance", "20"], "t5", {"num_buckets": 8, "max_distance": 20}),
        (["--t5-num-buckets", "8"], "t5", {"num_buckets": 8}),
        (["--shaw-max-distance", "4"], "shaw", {"max_distance": 4}),
        (["--sinusoidal-base", "100"], "sinusoidal", {"base": 100.0}),
        ([], "alibi", {}),
    ],
)
def test_the_command_lines_spellings_of_each_option(argv, positional, options):
    args = build_parser().parse_args(["train", "data.txt", "--out", "x", "--positional", positional, *argv])
    assert scheme_options(args, positional) == options


def test_the_help_lists_every_schemes_options_from_the_registry(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in tokembed.scheme_names():
        for spec in tokembed.embeddings.positional_scheme(name).option_specs():
            assert spec.flags[0] in text and spec.help in text, spec
    assert "--t5-num-buckets INT, --t5-buckets INT" in text
    assert "--rope-scaling {linear,ntk,yarn,llama3}" in text


def test_0_1_keyword_arguments_still_work_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"GPTConfig\(rope_base=, rope_fraction=\) is deprecated"):
        old = GPTConfig(dim=32, n_heads=2, positional="rope", rope_base=500, rope_fraction=0.5)
    assert old == GPTConfig(
        dim=32, n_heads=2, positional="rope", positional_options=RopeOptions(base=500, fraction=0.5)
    )
    with pytest.warns(DeprecationWarning):
        assert GPTConfig(shaw_max_distance=3).positional_options == NoOptions()  # learned: ignored, as in 0.1
    with pytest.raises(TypeError, match=r"GPTConfig got unexpected keyword arguments \['rope_theta'\]"):
        GPTConfig(rope_theta=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"rope_factor must be >= 1, got 0.5"):
            GPTConfig(positional="rope", rope_factor=0.5)  # validated before the warning
    with pytest.warns(DeprecationWarning, match=r"attention_positional\(t5_num_buckets=\) is deprecated"):
        t5 = tokembed.embeddings.attention_positional("t5", n_heads=2, head_dim=4, t5_num_buckets=8)
    assert t5.num_buckets == 8


def test_resuming_with_other_scheme_options_names_them(tmp_path):
    ckpt, _ = copy_resumable("t5", tmp_path)
    saved = json.loads((ckpt / "config.json").read_text())
    train = tokembed.TrainConfig.from_dict({**saved["train"], "out": str(ckpt), "max_steps": 5})
    model = GPTConfig.from_dict({**saved["model"], "t5_num_buckets": 16})
    with pytest.raises(ValueError, match=r"has another model \(positional_options: \{'num_buckets': 8, 'max_distance'"):
        tokembed.train(train, model, resume=True, progress=False)
