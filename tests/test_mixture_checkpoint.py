"""Every command that reads a checkpoint's data record handles a mixture (issue 24 item 8).

Was: ``report`` on any mixture-trained checkpoint crashed after 25 s of work ("expected str, bytes or os.PathLike
object, not dict"): the data record of a mixture is its spec ``{"sources": [[path, weight], ...], "seed"}``.
"""

from __future__ import annotations

import json
import re

import pytest

import tokembed
from tokembed.cli import main


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, story, spec_texts):
    """A checkpoint trained on a mixture of two prepared sources (each with a val split)."""
    root = tmp_path_factory.mktemp("mixed")
    sources = []
    for i, text in enumerate([story, spec_texts[0]]):
        paras = [p for p in text.split("\n\n") if p.strip()]
        (root / f"c{i}.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in paras), encoding="utf-8")
        # bytes (257 ids): the data record is what is tested, and a small table trains and reports much faster
        tokembed.prepare_corpus(
            [root / f"c{i}.jsonl"], root / f"s{i}", val_fraction=0.2, workers=1, progress=False, tokenizer="bytes"
        )
        sources.append(root / f"s{i}")
    mixture = tokembed.Mixture({sources[0]: 0.7, sources[1]: 0.3})
    config = tokembed.TrainConfig(
        data=mixture, out=str(root / "run"), max_length=16, batch_size=4, max_steps=4, eval_interval=2, eval_batches=2
    )
    tokembed.train(config, {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}, progress=False)
    return root / "run", sources


def test_report_on_a_mixture_checkpoint(mixed, tmp_path, capsys):
    run, sources = mixed
    out = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(out), "--no-tsne", "--points", "50"]) == 0, capsys.readouterr().err
    page = out.read_text(encoding="utf-8")
    # the text tabled is the start of the mixture's first source, and the settings name every source and weight
    assert re.search(rf"the start of the training data {re.escape(str(sources[0]))}", page)
    for path, weight in ((sources[0], 0.7), (sources[1], 0.3)):
        assert str(path) in page and f"{weight}" in page


def test_eval_inspect_and_resume_on_a_mixture_checkpoint(mixed, capsys):
    run, sources = mixed
    assert main(["eval", str(run), "--lengths", "16", "--max-windows", "4", "--json"]) == 0, capsys.readouterr().err
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["length"] == 16 and rows[0]["loss"] is not None
    assert main(["inspect", str(run), "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["inspect", str(run), "tokens", "the story"]) == 0
    capsys.readouterr()
    source_args = ["--source", f"{sources[0]}:0.7", "--source", f"{sources[1]}:0.3"]
    assert main(["train", *source_args, "--out", str(run), "--resume", "--steps", "5", "--quiet"]) == 0
    assert tokembed.load_checkpoint(run)[1]["step"] == 5
