"""Isotropy of an embedding table: IsoScore against the `isoscore` package, the definitions, and the run's log."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from conftest import STORY, TINY
from tokembed import TrainConfig, train
from tokembed.cli import main
from tokembed.embeddings.isotropy import isoscore, isotropy, isotropy_of_table


@pytest.mark.parametrize(("n", "d", "seed"), [(500, 8, 0), (2000, 64, 1), (300, 16, 2), (40, 5, 3)])
def test_isoscore_agrees_with_the_isoscore_package(n, d, seed):
    from IsoScore.IsoScore import IsoScore

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + rng.standard_normal(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package calls torch.tensor on a tensor
        theirs = float(IsoScore(x))
    assert isoscore(x) == pytest.approx(theirs, abs=1e-6)


def test_isoscore_is_one_when_isotropic_and_zero_on_a_line():
    d = 16
    cross = np.concatenate([np.eye(d), -np.eye(d)]) * 3.0  # covariance exactly proportional to the identity
    assert isoscore(cross) == pytest.approx(1.0, abs=1e-12)
    gaussian = np.random.default_rng(0).standard_normal((100_000, d))
    assert isoscore(gaussian) == pytest.approx(1.0, abs=1e-3)
    line = np.random.default_rng(1).standard_normal((1000, 1)) * np.random.default_rng(2).standard_normal(d)
    assert isoscore(line) == pytest.approx(0.0, abs=1e-9)


def test_mean_cosine_and_component_shares_match_their_definitions():
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 12)) @ rng.standard_normal((12, 12)) + 2.0
    iso = isotropy(x)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    pairs = unit @ unit.T
    assert iso.mean_cosine == pytest.approx((pairs.sum() - np.trace(pairs)) / (200 * 199), abs=1e-12)
    ratios = PCA().fit(x).explained_variance_ratio_
    assert iso.top_pc_share == pytest.approx(ratios[0], abs=1e-10)
    assert iso.top10_pc_share == pytest.approx(ratios[:10].sum(), abs=1e-10)
    assert iso.rows == 200 and iso.isoscore == pytest.approx(isoscore(x))


def test_trained_rows_are_those_read_min_count_times():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    counts = torch.arange(50)
    both = isotropy_of_table(x, counts, min_count=30)
    assert both["trained"] == isotropy(x[30:]) and both["all"] == isotropy(x)
    assert isotropy_of_table(x)["trained"] is None and isotropy_of_table(x, counts, min_count=49)["trained"] is None
    with pytest.raises(ValueError, match=r"at least 2 rows, got shape \(1, 6\)"):
        isotropy(x[:1])


@pytest.mark.slow
def test_training_logs_isotropy_at_every_checkpoint_and_inspect_prints_it(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = TrainConfig(data=str(STORY), out=str(out), max_length=16, batch_size=4, max_steps=6, checkpoint_interval=2)
    train(cfg, TINY, progress=False)
    history = json.loads((out / "log.json").read_text())["isotropy"]
    assert [r["step"] for r in history] == [2, 4, 6]
    from tokembed import load_table

    table = load_table(out)
    last = isotropy_of_table(table.tokens, table.counts, min_count=10)
    assert history[-1]["all"] == last["all"].to_dict() and history[-1]["trained"] == last["trained"].to_dict()
    assert main(["inspect", str(out), "isotropy", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["history"] == history and shown["now"]["all"]["isoscore"] == pytest.approx(last["all"].isoscore)
    assert main(["inspect", str(out), "isotropy"]) == 0
    assert "over the run's checkpoints" in capsys.readouterr().out
    assert main(["inspect", str(out), "plot", "isotropy", "-o", str(tmp_path / "iso.png")]) == 0
    assert (tmp_path / "iso.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
