"""A corpus prepared with o200k_base goes through every stage: uint32 shards that decode back to every
document and pass check, a GPT whose embedding has o200k's 200,019 rows, and inspection labels from o200k.
Data of one tokenizer opened as another is an error that names both."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import tokembed
from tokembed.inspection.load import load_table
from tokembed.model.config import GPTConfig
from tokembed.shards.check import check_shards
from tokembed.shards.prepare import prepare_corpus
from tokembed.shards.reader import open_shards
from tokembed.training.config import TrainConfig
from tokembed.training.loop import train

TOKEMBED = [sys.executable, "-m", "tokembed"]


@pytest.fixture(scope="module")
def o200k_folder(tmp_path_factory, story, spec_texts):
    tmp = tmp_path_factory.mktemp("o200k")
    docs = [story, *spec_texts, "naïve café 東京 🤖 <|endoftext|> is text here"]
    src = tmp / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    prepare_corpus([src], tmp / "shards", tokenizer="o200k_base", workers=1, val_fraction=0.2)
    return tmp / "shards", docs


def test_o200k_shards_are_uint32_and_decode_back(o200k_folder):
    out, docs = o200k_folder
    enc = tokembed.get_tokenizer("o200k_base")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dtype"] == "uint32"
    assert manifest["tokenizer"]["name"] == "o200k_base" and manifest["tokenizer"]["n_vocab"] == 200019
    assert manifest["tokenizer"]["eot_token"] == 199999
    decoded = []
    for split in ("train", "val"):
        shards = open_shards(out, split=split)
        assert shards.dtype == np.dtype("<u4") and shards.n_vocab == 200019 and shards.eot_token == 199999
        decoded += [enc.decode(d.tolist()) for d in shards.documents()]
        assert int(shards.read(0, shards.n_tokens).max()) > 65535  # ids beyond uint16 are there
    assert sorted(decoded) == sorted(docs)
    assert check_shards(out) == []


@pytest.mark.slow
def test_a_gpt_trained_on_o200k_data_has_its_vocabulary_and_inspect_labels_it(o200k_folder, tmp_path):
    out, _ = o200k_folder
    config = TrainConfig(
        data=str(out), out=str(tmp_path / "run"), max_length=8, batch_size=2, max_steps=2, warmup_steps=1
    )
    train(config, progress=False)
    table = load_table(tmp_path / "run")
    enc = tokembed.get_tokenizer("o200k_base")
    assert tuple(table.tokens.shape) == (200019, GPTConfig().dim)
    assert table.tokenizer.name == "o200k_base"
    word = enc.encode_ordinary(" embeddings")[0]
    assert table.label(word) == enc.decode_single_token_bytes(word).decode() == " embeddings"
    assert table.label(199999) == "<|endoftext|>"


def test_an_in_memory_o200k_model_is_labelled_by_o200k(o200k_folder, tmp_path):
    # Issue 24 item 7: EmbeddingTable.from_model assumed GPT-2 (" the" had the neighbours of GPT-2's id 262).
    out, _ = o200k_folder
    config = TrainConfig(data=str(out), out=str(tmp_path / "run"), max_length=8, batch_size=2, max_steps=1)
    train(
        config,
        GPTConfig(vocab_size=200019, eot_token=199999, context_length=8, dim=8, n_layers=1, n_heads=2),
        progress=False,
    )
    model, _ = tokembed.load_checkpoint(tmp_path / "run")
    enc = tokembed.get_tokenizer("o200k_base")
    table = tokembed.EmbeddingTable.from_model(model)
    assert table.tokenizer.name == "o200k_base" and table.ids(" the") == enc.encode_ordinary(" the")
    assert table.label(enc.encode_ordinary(" embeddings")[0]) == " embeddings"
    with pytest.raises(ValueError, match=r"trained on ids of o200k_base .* but tokenizer=gpt2 .* was given"):
        tokembed.EmbeddingTable.from_model(model, tokenizer="gpt2")
    model.tokenizer_record = None  # a model that records nothing, and whose vocabulary is not GPT-2's
    with pytest.raises(
        ValueError, match=r"GPT has 200,019 token rows and end-of-text id 199999, not GPT-2's .*Pass tokenizer="
    ):
        tokembed.EmbeddingTable.from_model(model)
    assert tokembed.EmbeddingTable.from_model(model, tokenizer="o200k_base").tokenizer.name == "o200k_base"


def test_opening_data_of_another_tokenizer_names_both(o200k_folder, tmp_path):
    out, _ = o200k_folder
    with pytest.raises(
        ValueError, match=r"was prepared with o200k_base \(200,019 ids.*but gpt2 \(50,257 ids.*was asked for"
    ):
        open_shards(out, tokenizer="gpt2")
    assert open_shards(out, tokenizer="o200k_base").n_vocab == 200019
    config = TrainConfig(data=str(out), out=str(tmp_path / "r"), max_steps=1, tokenizer="cl100k_base")
    with pytest.raises(ValueError, match=r"o200k_base .* but cl100k_base .* was asked for"):
        train(config, progress=False)
    small = GPTConfig(context_length=64, dim=16, n_layers=1, n_heads=2)  # GPT-2's 50,257 rows
    with pytest.raises(
        ValueError, match=r"the model's vocabulary has 50,257 ids, but the data was made with o200k_base"
    ):
        train(TrainConfig(data=str(out), out=str(tmp_path / "s"), max_steps=1), small, progress=False)


@pytest.mark.slow
def test_resuming_on_data_of_another_tokenizer_is_refused(o200k_folder, tmp_path, story):
    out, _ = o200k_folder
    text = tmp_path / "story.txt"
    text.write_text(story)
    run = tmp_path / "run"
    train(
        TrainConfig(data=str(text), out=str(run), max_length=8, batch_size=2, max_steps=2, warmup_steps=1),
        progress=False,
    )
    ckpt = json.loads((run / "config.json").read_text())
    ckpt["train"]["data"] = str(out)  # the same run pointed at o200k data, by hand: so no longer the sealed one
    (run / "config.json").write_text(json.dumps(ckpt))
    (run / "sha256.json").unlink()
    cfg = TrainConfig(data=str(out), out=str(run), max_length=8, batch_size=2, max_steps=4, warmup_steps=1)
    with (
        pytest.raises(ValueError, match=r"trained on ids of gpt2 .* but the data was made with o200k_base"),
        pytest.warns(UserWarning, match="loaded without verification"),
    ):
        train(cfg, resume=True, progress=False, allow_unverified=True)


def test_cli_lists_tokenizers_and_prepares_with_one(tmp_path, story):
    out = subprocess.run([*TOKEMBED, "tokenizers", "--json"], capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == tokembed.available_tokenizers()
    assert all(r["problem"] is None for r in rows)
    (tmp_path / "s.txt").write_text(story)
    r = subprocess.run(
        [*TOKEMBED, "prepare", str(tmp_path / "s.txt"), "--out", str(tmp_path / "b"), "--tokenizer", "bytes", "-q"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    shards = open_shards(tmp_path / "b")
    assert shards.n_vocab == 257 and shards.read(0, shards.n_tokens).tolist() == [*story.encode(), 256]
    r = subprocess.run(
        [*TOKEMBED, "prepare", str(tmp_path / "s.txt"), "--out", str(tmp_path / "c"), "--tokenizer", "gpt5"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "tokenizer 'gpt5' is not available offline; available: gpt2, r50k_base" in r.stderr


def test_inspection_labels_and_looks_up_with_any_tokenizer(tmp_path):
    import torch

    from tokembed.inspection.counts import token_counts
    from tokembed.inspection.table import EmbeddingTable

    table = EmbeddingTable(torch.randn(257, 4), "bytes")
    assert table.label(104) == "h" and table.label(256) == "<|endoftext|>"
    assert table.ids("hé") == [104, 195, 169] and table.ids("<|endoftext|>") == [256]
    (tmp_path / "t.txt").write_text("abba<|endoftext|>")
    counts = token_counts(tmp_path / "t.txt", tokenizer="bytes")
    assert counts[97].item() == 2 and counts[98].item() == 2 and counts[256].item() == 1


def test_counting_shards_of_another_tokenizer_names_both(o200k_folder):
    from tokembed.inspection.counts import token_counts

    out, _ = o200k_folder
    with pytest.raises(ValueError, match=r"was prepared with o200k_base .* but gpt2 .* was asked for"):
        token_counts(out, tokenizer="gpt2")
    assert token_counts(out, tokenizer="o200k_base").sum().item() > 0
