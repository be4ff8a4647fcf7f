"""An empty split is said loudly, and the exports never write a split their trainer cannot read (issue 24 item 10,
issue 22 item 4's export bullets).

Was: a text file is one document, so ``--val-fraction 0.05`` on one large file gave an empty val split with only
"val: 0 documents" in the summary; ``export --format nanogpt`` then wrote an empty ``val.bin`` and nanoGPT's own
train.py died ("cannot mmap an empty file"); the Megatron export could not write the validation split.
"""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest

import tokembed
from conftest import STORY
from tokembed.cli import main
from tokembed.shards.export import export_shards

with warnings.catch_warnings():  # megatron-core warns that Apex and Transformer Engine are absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets import indexed_dataset as megatron_indexed


@pytest.fixture(scope="module")
def one_file(tmp_path_factory):
    """The story as one text file with --val-fraction 0.01: one document, in train."""
    root = tmp_path_factory.mktemp("onefile")
    with pytest.warns(UserWarning, match=r"split 'val' of .* is empty \(0 of 1 documents with --val-fraction 0.01\)"):
        tokembed.prepare_corpus([STORY], root / "s", val_fraction=0.01, workers=1, progress=False)
    return root / "s"


@pytest.fixture(scope="module")
def with_val(tmp_path_factory, story):
    """The story's paragraphs as JSON Lines with --val-fraction 0.2: both splits have documents."""
    root = tmp_path_factory.mktemp("withval")
    paras = [p for p in story.split("\n\n") if p.strip()]
    (root / "c.jsonl").write_text("".join(json.dumps({"text": p}) + "\n" for p in paras), encoding="utf-8")
    tokembed.prepare_corpus([root / "c.jsonl"], root / "s", val_fraction=0.2, workers=1, progress=False)
    return root / "s"


def test_prepare_says_loudly_why_a_split_is_empty_and_what_to_do(tmp_path, capsys):
    rc = main(["prepare", str(STORY), "--out", str(tmp_path / "s"), "--val-fraction", "0.01", "--workers", "1", "-q"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "tokembed prepare: warning: split 'val' of" in err
    assert "a text file is one document" in err and "give the text as more documents" in err
    # the hash may as well send the one document to val: then train is the empty one, said as loudly
    rc = main(["prepare", str(STORY), "--out", str(tmp_path / "v"), "--val-fraction", "0.05", "--workers", "1"])
    assert rc == 0
    assert "warning: split 'train' of" in capsys.readouterr().err
    assert main(["prepare", str(STORY), "--out", str(tmp_path / "t"), "--workers", "1", "-q"]) == 0
    assert "warning" not in capsys.readouterr().err  # no val split asked for: nothing to say


def test_the_nanogpt_export_refuses_an_empty_split_by_name_and_leaves_no_folder(one_file, tmp_path, capsys):
    out = tmp_path / "nano"
    assert main(["export", str(one_file), "--format", "nanogpt", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"split 'val' of {one_file} is empty" in err and "--split train" in err
    assert not out.exists()
    assert main(["export", str(one_file), "--format", "nanogpt", str(out), "--split", "train"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["meta.pkl", "train.bin"]
    ids = tokembed.get_tokenizer("gpt2").encode_ordinary(STORY.read_text(encoding="utf-8"))
    assert np.fromfile(out / "train.bin", dtype=np.uint16).tolist() == [*ids, 50256]
    with open(out / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == 50257  # GPT-2's vocabulary, as the chapter prints it


def test_nanogpt_meta_has_the_vocabulary_of_the_tokenizer(tmp_path):
    tokembed.prepare_corpus([STORY], tmp_path / "b", tokenizer="bytes", workers=1, progress=False)
    export_shards(tmp_path / "b", tmp_path / "nano", format="nanogpt", split="train")
    with open(tmp_path / "nano" / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == 257  # 256 bytes and <|endoftext|>
    assert int(np.fromfile(tmp_path / "nano" / "train.bin", dtype=np.uint16).max()) < 257


def test_the_megatron_export_writes_the_validation_split(with_val, tmp_path):
    for split in ("train", "val"):
        ss = tokembed.open_shards(with_val, split=split)
        expected = [[*d.tolist(), ss.eot_token] for d in ss.documents()]
        assert main(["export", str(with_val), "--format", "megatron", str(tmp_path / split), "--split", split]) == 0
        assert main(["export", str(with_val), "--format", "megatron", str(tmp_path / "both"), "--split", "all"]) in (
            0,
            2,  # the second time: it exists
        )
        for prefix in (tmp_path / split, tmp_path / f"both_{split}"):
            ds = megatron_indexed.IndexedDataset(str(prefix))
            assert [ds[i].tolist() for i in range(len(ds))] == expected
    assert json.loads((tmp_path / "both_val.tokembed.json").read_text())["split"] == "val"


def test_a_megatron_export_of_an_empty_split_is_refused(one_file, tmp_path, capsys):
    assert main(["export", str(one_file), "--format", "megatron", str(tmp_path / "m"), "--split", "val"]) == 2
    assert f"split 'val' of {one_file} is empty" in capsys.readouterr().err
    assert main(["export", str(one_file), "--format", "megatron", str(tmp_path / "m"), "--split", "all"]) == 2
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


def test_a_split_nanogpt_cannot_sample_from_is_exported_with_a_warning_naming_the_block_size(
    with_val, tmp_path, capsys
):
    """nanoGPT's get_batch draws starts from ``len(data) - block_size``: a split of at most block_size tokens is
    written (it is data) with a warning that says which --block_size it needs."""
    import re
    from pathlib import Path

    from tokembed.shards.export import NANOGPT_BLOCK_SIZE

    train_py = (Path(__file__).resolve().parent / "nanogpt" / "train.py").read_text(encoding="utf-8")
    assert int(re.search(r"^block_size = (\d+)", train_py, re.M).group(1)) == NANOGPT_BLOCK_SIZE  # nanoGPT's own
    assert "torch.randint(len(data) - block_size" in train_py
    val = tokembed.open_shards(with_val, split="val").n_tokens
    train = tokembed.open_shards(with_val, split="train").n_tokens
    assert val <= NANOGPT_BLOCK_SIZE < train  # the story's paragraphs: about 1,000 tokens go to val
    assert main(["export", str(with_val), "--format", "nanogpt", str(tmp_path / "nano")]) == 0
    err = capsys.readouterr().err
    assert f"tokembed export: warning: val.bin holds {val:,} tokens" in err
    assert f"--block_size={val - 1} or less" in err and "train.bin" not in err
    assert np.fromfile(tmp_path / "nano" / "val.bin", dtype=np.uint16).size == val  # written all the same
    with pytest.warns(UserWarning, match=r"val.bin holds .* tokens: nanoGPT's train.py draws windows"):
        export_shards(with_val, tmp_path / "nano2", format="nanogpt")
