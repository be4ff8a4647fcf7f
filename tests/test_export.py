"""Exports: TensorBoard projector TSV, word2vec text (read back by gensim), .npy, safetensors."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inspect_helpers import V, planted_table, write_checkpoint
from tokembed import EmbeddingTable, export_table, get_tokenizer, load_table
from tokembed.cli import main
from tokembed.inspection import export as export_mod


@pytest.fixture(scope="module")
def table():
    return EmbeddingTable(
        planted_table(8),
        "gpt2",
        positions=torch.randn(16, 8, generator=torch.Generator().manual_seed(2)),
        source="test",
    )


def test_projector_files_have_the_exact_format(table, tmp_path):
    ids = [5822, 198, 220, 50256, 0, 16599]
    tensors, metadata = export_table(table, tmp_path / "proj", format="projector", ids=ids)
    lines = tensors.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == len(ids) + 1  # one vector per line, each ended by "\n", no header
    values = np.array([[np.float32(x) for x in line.split("\t")] for line in lines[:-1]])
    assert values.shape == (len(ids), 8)
    assert np.array_equal(values, table.tokens.numpy()[ids])  # 9 significant digits: the same float32
    labels = metadata.read_text(encoding="utf-8").split("\n")
    assert labels == [
        "Ġking",
        "Ċ",
        "Ġ",
        "<|endoftext|>",
        "!",
        "Ġqueen",
        "",
    ]  # one label per line, no header (one column)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=3, max_size=3))
def test_projector_text_reads_back_every_float32_exactly(tmp_path_factory, values):
    t = EmbeddingTable(torch.tensor([values], dtype=torch.float32), labels=["x"])
    out = tmp_path_factory.mktemp("p")
    tensors, _ = export_table(t, out, format="projector")
    back = np.array([np.float32(x) for x in tensors.read_text().strip("\n").split("\t")])
    assert np.array_equal(back, np.array(values, dtype=np.float32))


def test_word2vec_is_read_by_gensim_and_agrees_on_neighbours(table, tmp_path):
    from gensim.models import KeyedVectors

    path = export_table(table, tmp_path / "vectors.txt", format="word2vec")
    kv = KeyedVectors.load_word2vec_format(str(path), binary=False)
    assert len(kv) == V and kv.vector_size == 8
    assert kv.index_to_key[5822] == "Ġking" and kv.index_to_key[50256] == "<|endoftext|>"
    assert np.array_equal(kv.vectors, table.tokens.numpy())
    for query in (" king", " the", "!"):
        ours = table.neighbours(query, topn=10)
        theirs = kv.most_similar(table.key(table.ids(query)[0]), topn=10)
        assert [table.key(n.id) for n in ours] == [k for k, _ in theirs]
        np.testing.assert_allclose([n.score for n in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)
    theirs = kv.most_similar(positive=["Ġking", "Ġwoman"], negative=["Ġman"], topn=1)
    assert theirs[0][0] == "Ġqueen"


def test_npy_and_safetensors_round_trip(table, tmp_path):
    npy = export_table(table, tmp_path / "t.npy", format="npy")
    arr = np.load(npy)
    assert arr.dtype == np.float32 and np.array_equal(arr, table.tokens.numpy())
    st_path = export_table(table, tmp_path / "t.safetensors", format="safetensors")
    back = load_table(st_path)
    assert torch.equal(back.tokens, table.tokens) and torch.equal(back.positions, table.positions)
    assert back.tokenizer.name == "gpt2" and back.positional == "learned"
    from safetensors import safe_open

    with safe_open(str(st_path), framework="pt") as f:
        assert f.metadata()["format"] == "tokembed-embeddings"
    assert [n.id for n in back.neighbours(" king")] == [n.id for n in table.neighbours(" king")]
    with pytest.raises(ValueError, match="keeps the whole table"):
        export_table(table, tmp_path / "sub.safetensors", format="safetensors", ids=[1, 2])


def test_positions_export(table, tmp_path):
    path = export_table(table, tmp_path / "pos.txt", format="word2vec", which="positions")
    lines = path.read_text().splitlines()
    assert lines[0] == "16 8" and lines[1].split(" ")[0] == "pos_0" and len(lines) == 17
    assert np.array_equal(
        np.load(export_table(table, tmp_path / "pos.npy", format="npy", which="positions")), table.positions.numpy()
    )
    bare = EmbeddingTable(torch.randn(4, 2), labels=list("abcd"))
    with pytest.raises(ValueError, match="no absolute position vectors"):
        export_table(bare, tmp_path / "x.npy", format="npy", which="positions")


def test_existing_files_are_kept_unless_overwrite(table, tmp_path):
    target = tmp_path / "t.npy"
    target.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match=r"t.npy already exists; .*overwrite=True \(--overwrite\)"):
        export_table(table, target, format="npy")
    assert target.read_bytes() == b"precious"
    export_table(table, target, format="npy", overwrite=True)
    assert np.array_equal(np.load(target), table.tokens.numpy())


def test_an_interrupted_export_leaves_nothing_half_written(table, tmp_path, monkeypatch):
    target = tmp_path / "v.txt"
    target.write_text("the previous export\n")

    def explode(f, rows, sep, labels=None):
        f.write("1 2 3\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(export_mod, "_write_matrix", explode)
    with pytest.raises(KeyboardInterrupt):
        export_table(table, target, format="word2vec", overwrite=True)
    assert target.read_text() == "the previous export\n"
    assert os.listdir(tmp_path) == ["v.txt"]  # the temporary file is gone


def test_labels_that_text_formats_cannot_hold(tmp_path):
    spaced = EmbeddingTable(torch.randn(2, 2), labels=["new york", "paris"])
    with pytest.raises(ValueError, match="label 'new york' of row 0 cannot be written in word2vec format"):
        export_table(spaced, tmp_path / "a.txt", format="word2vec")
    export_table(spaced, tmp_path / "proj", format="projector")  # a space is fine in metadata.tsv
    twice = EmbeddingTable(torch.randn(2, 2), labels=["a", "a"])
    with pytest.raises(ValueError, match="rows 0 and 1 have the same label 'a'"):
        export_table(twice, tmp_path / "b.txt", format="word2vec")
    with pytest.raises(ValueError, match="unknown export format 'csv'"):
        export_table(spaced, tmp_path / "c.csv", format="csv")
    with pytest.raises(ValueError, match="token id 7 is outside"):
        export_table(spaced, tmp_path / "d.npy", format="npy", ids=[7])


def test_cli_export_guesses_the_format_and_keeps_the_most_frequent(tmp_path, story, capsys):
    ck = write_checkpoint(tmp_path / "ck", planted_table(8))
    corpus = tmp_path / "story.txt"
    corpus.write_text(story, encoding="utf-8")
    assert main(["export", str(ck), str(tmp_path / "proj"), "--top", "25", "--corpus", str(corpus)]) == 0
    top = [
        i for i, _ in Counter(get_tokenizer("gpt2").encode(story, allowed_special={"<|endoftext|>"})).most_common(25)
    ]
    labels = (tmp_path / "proj" / "metadata.tsv").read_text(encoding="utf-8").splitlines()
    table = load_table(ck)
    assert sorted(labels) == sorted(table.key(i) for i in top)  # ties may come in another order
    assert main(["export", str(ck), str(tmp_path / "t.npy")]) == 0
    assert np.load(tmp_path / "t.npy").shape == (V, 8)
    assert main(["export", str(ck), str(tmp_path / "t.npy")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["export", str(ck), str(tmp_path / "t.npy"), "--force", "--top", "3"]) == 0
    assert np.load(tmp_path / "t.npy").shape == (3, 8)
    assert main(["export", str(ck), str(tmp_path / "t.csv")]) == 2
    assert "cannot tell the export format" in capsys.readouterr().err


def test_exported_safetensors_is_inspectable_from_the_cli(tmp_path, capsys):
    ck = write_checkpoint(tmp_path / "ck", planted_table(8))
    assert main(["export", str(ck), str(tmp_path / "t.safetensors")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "t.safetensors"), "neighbours", " king", "--json"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(ck), "neighbours", " king", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == from_file


def test_a_table_without_tokenizer_is_labelled_by_id(tmp_path, capsys):
    arr = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    np.save(tmp_path / "t.npy", arr)
    bare = load_table(tmp_path / "t.npy", tokenizer="none")
    assert bare.tokenizer is None and bare.label(4) == "<id 4>"
    path = export_table(bare, tmp_path / "t.txt", format="word2vec")
    assert path.read_text().splitlines()[1].split(" ")[0] == "<id_0>"
    assert (
        main(["inspect", str(tmp_path / "t.npy"), "neighbours", "--tokenizer", "none", "--ids", "0", "--topn", "4"])
        == 0
    )
    assert "'<id " in capsys.readouterr().out
