"""Under-trained tokens: marked in every answer, listed with Magikarp's indicators (Land & Bartolo 2024)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from inspect_helpers import V
from tokembed import EmbeddingTable
from tokembed.cli import main
from tokembed.inspection.table import gpt2_byte_spelling
from tokembed.inspection.undertrained import indicators, known_unused_ids, undertrained_tokens
from tokembed.tokenizer import gpt2_files

NEVER_IN_UTF8 = [0xC0, 0xC1, *range(0xF5, 0x100)]  # RFC 3629, section 1


@pytest.fixture(scope="module")
def planted():
    """A table whose unused rows follow a known rule: ids = 3 mod 11 and the never-in-UTF-8 byte tokens.

    Unused rows are what training does to tokens it never reads with tied embeddings: all pushed the same
    way (a shared direction) plus their small random start. Read rows are random, counted >= 10, and spread
    most along one axis (the first principal component, which Magikarp removes before comparing directions).
    """
    g = torch.Generator().manual_seed(7)
    D = 24
    tokens = torch.randn(V, D, generator=g)
    tokens[:, 0] *= 6.0
    ids = torch.arange(V)
    reference = known_unused_ids(_gpt2(), V)
    unused = (ids % 11 == 3) | torch.isin(ids, torch.tensor(reference))
    drift = torch.randn(D, generator=g)
    drift[0] = 0.0
    tokens[unused] = drift + 0.05 * torch.randn(int(unused.sum()), D, generator=g)
    counts = torch.where(unused, 0, 10 + torch.randint(0, 1000, (V,), generator=g))
    return EmbeddingTable(tokens, "gpt2", counts=counts, counts_source="a rule", min_count=1), unused


def _gpt2():
    from tokembed import get_tokenizer

    return get_tokenizer("gpt2")


def test_known_unused_ids_are_the_bytes_utf8_never_holds():
    # GPT-2's encoder.json spells each byte token; the ids of the 13 bytes RFC 3629 rules out of UTF-8.
    encoder = json.loads(gpt2_files()[1].read_text(encoding="utf-8"))
    expected = [encoder[gpt2_byte_spelling(bytes([b]))] for b in NEVER_IN_UTF8]
    assert known_unused_ids(_gpt2(), V) == expected == [124, 125, *range(177, 188)]
    assert known_unused_ids(None, V) == []
    from tokembed import get_tokenizer

    raw = get_tokenizer("bytes")  # no encode_single_token: found by decoding each row; id = byte value there
    assert known_unused_ids(raw, raw.n_vocab) == NEVER_IN_UTF8


def test_undertrained_list_is_the_rows_never_read_and_the_indicator_ranks_them_first(planted):
    table, unused = planted
    result = undertrained_tokens(table)
    found, reference = result.detection, result.reference
    assert {r.id for r in result.tokens} == set(torch.nonzero(unused).flatten().tolist())
    assert result.total == int(unused.sum()) and len(undertrained_tokens(table, limit=5).tokens) == 5
    cosines = [r.cosine for r in result.tokens]  # all read 0 times: ordered by the indicator
    assert cosines == sorted(cosines)
    cosine = indicators(table.tokens, reference)["cosine"]
    first = torch.argsort(cosine, stable=True)[: int(unused.sum())]
    assert bool(unused[first].all())  # Magikarp's cosine indicator puts every unused row before every read one
    d = found["cosine"]
    assert (d.precision, d.average_precision) == (1.0, 1.0) and d.unseen == int(unused.sum())
    # flagged: rows at most as far as the farthest of the 13 reference rows: those and some of the others
    assert d.hits == d.flagged and 13 <= d.flagged <= d.unseen and d.recall == d.flagged / d.unseen
    assert d.base_rate == pytest.approx(int(unused.sum()) / V)


def test_cosine_indicator_agrees_with_magikarps_code_written_with_scikit_learn(planted):
    from sklearn.decomposition import PCA

    table, _ = planted
    reference = known_unused_ids(table.tokenizer, V)
    mat = table.tokens.numpy().astype(np.float64)
    # cohere-ai/magikarp, utils.embedding_distance_metrics: first PC of the (centred) fit, removed from the raw rows
    pc = PCA(n_components=1).fit(mat).components_[0]
    without = mat - np.outer(mat @ pc, pc)
    mean = without[reference].mean(axis=0)
    theirs = 1 - without @ mean / (np.linalg.norm(without, axis=1) * np.linalg.norm(mean)).clip(min=1e-6)
    ours = indicators(table.tokens, reference)
    np.testing.assert_allclose(ours["cosine"].numpy(), theirs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours["norm"].numpy(), np.linalg.norm(mat, axis=1), rtol=1e-12)


def test_every_answer_marks_undertrained_tokens(planted):
    table, unused = planted
    q = int(torch.nonzero(~unused)[0])
    for n in table.neighbours(q, topn=50) + table.most_similar(positive=[q, q + 1], topn=20):
        assert n.count == int(table.counts[n.id]) and n.undertrained == bool(unused[n.id])
    rows = table.token_table("the king\xf5")  # a replacement character: a three-byte token, read
    assert all(r.undertrained == bool(unused[r.id]) and r.count == int(table.counts[r.id]) for r in rows)
    assert table.with_min_count(10**9).is_undertrained(q) and not table.is_undertrained(q)
    with pytest.raises(ValueError, match=r"min_count must be an integer >= 0, got -2"):
        table.with_min_count(-2)
    bare = EmbeddingTable(table.tokens, "gpt2")
    assert bare.neighbours(q, topn=1)[0].undertrained is None and bare.is_undertrained(q) is None


def test_cli_warns_about_an_undertrained_query_and_lists_them(planted, tmp_path, capsys):
    from tokembed.inspection.export import export_table

    table, unused = planted
    export_table(table, tmp_path / "t.safetensors", format="safetensors")
    word = table.label(int(torch.nonzero(unused)[1]))
    assert (
        main(["inspect", str(tmp_path / "t.safetensors"), "neighbours", "--ids", str(int(torch.nonzero(unused)[1]))])
        == 0
    )
    captured = capsys.readouterr()
    assert f"warning: {word!r}" in captured.err and "read 0 times" in captured.err
    assert "under-trained" in captured.out
    assert main(["inspect", str(tmp_path / "t.safetensors"), "undertrained", "--min-count", "1", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {t["id"] for t in listed["tokens"]} == set(torch.nonzero(unused).flatten().tolist())
    assert listed["detection"]["cosine"]["average_precision"] == 1.0
    assert main(["inspect", str(tmp_path / "t.safetensors"), "undertrained", "--min-count", "1"]) == 0
    assert "cosine  flags" in capsys.readouterr().out
