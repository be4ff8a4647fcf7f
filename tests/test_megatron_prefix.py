"""``check`` and ``stats`` accept the Megatron prefix every loader accepts, and ``verify=True`` checks it (issue 24
items 13 and 21).

Was: ``check PREFIX`` and ``stats PREFIX`` refused a prefix that ``train``, ``create_dataloader`` and ``Mixture``
read; ``open_shards(prefix, verify=True)`` ignored ``verify`` although tokembed's own export records the ``.bin``'s
sha256.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import EOT, counting_docs, write_shards
from tokembed.cli import main

with warnings.catch_warnings():  # megatron-core warns that Apex and Transformer Engine are absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets import indexed_dataset as megatron_indexed


@pytest.fixture
def exported(tmp_path):
    stream = write_shards(tmp_path / "s", counting_docs([[20, 3], [7, 11]]))
    assert main(["export", str(tmp_path / "s"), "--format", "megatron", str(tmp_path / "m")]) == 0
    return tmp_path / "m", stream


def test_check_and_stats_read_a_megatron_prefix(exported, capsys):
    prefix, stream = exported
    capsys.readouterr()
    assert main(["check", str(prefix)]) == 0
    out = capsys.readouterr()
    assert f"{prefix}: OK (train: 1 shards, {len(stream):,} tokens)" in out.out and "note:" not in out.err
    assert main(["stats", str(prefix), "--max-length", "4", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["format"] == "megatron" and st["splits"]["train"]["tokens"] == len(stream)
    assert st["splits"]["train"]["documents"] == 4 and st["tokenizer"] == "gpt2"
    assert st["splits"]["train"]["plan"]["windows"] == (len(stream) - 1) // 4  # the plan's arithmetic
    assert main(["stats", str(prefix)]) == 0
    assert "a Megatron dataset (.bin/.idx), tokenizer gpt2" in capsys.readouterr().out


def test_a_megatron_dataset_made_elsewhere_is_checked_too(tmp_path, capsys):
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16)
    for d in ([5, 6, EOT], [7, EOT]):
        builder.add_item(torch.tensor(d))
        builder.end_document()
    builder.finalize(str(tmp_path / "m.idx"))
    assert main(["check", str(tmp_path / "m")]) == 0
    assert main(["stats", str(tmp_path / "m")]) == 0
    assert "tokenizer not recorded (read as GPT-2 ids)" in capsys.readouterr().out
    (tmp_path / "m.bin").write_bytes((tmp_path / "m.bin").read_bytes()[:-2])  # truncated
    assert main(["check", str(tmp_path / "m")]) == 1
    assert "m.bin has 8 bytes, its index m.idx says 10" in capsys.readouterr().out


def test_check_and_verify_find_a_changed_token(exported, capsys):
    prefix, _ = exported
    raw = bytearray(prefix.with_suffix(".bin").read_bytes())
    raw[6] ^= 1  # one id changed, the sizes all right
    prefix.with_suffix(".bin").write_bytes(bytes(raw))
    tokembed.open_shards(prefix)  # without verify: sizes only (cheap)
    with pytest.raises(ValueError, match=r"Megatron dataset .*m is damaged: .*m.bin: sha256 mismatch"):
        tokembed.open_shards(prefix, verify=True)
    assert main(["check", str(prefix)]) == 1
    assert "m.bin: sha256 mismatch with the one tokembed's export recorded" in capsys.readouterr().out


def test_check_finds_what_a_sha256_cannot_vouch_for(exported, capsys):
    """A record rewritten with the damage (or a dataset whose record was edited): the ids and ends still count."""
    prefix, stream = exported
    side = prefix.with_name("m.tokembed.json")
    toks = np.fromfile(prefix.with_suffix(".bin"), dtype="<u2")
    toks[len(stream) - 1] = 3  # the last document's end-of-text
    prefix.with_suffix(".bin").write_bytes(toks.tobytes())
    meta = json.loads(side.read_text())
    import hashlib

    meta["bin_sha256"] = hashlib.sha256(toks.tobytes()).hexdigest()
    side.write_text(json.dumps(meta))
    assert main(["check", str(prefix)]) == 1
    assert "1 document(s) do not end with the end-of-text id 50256 (the first: document 3)" in capsys.readouterr().out


def test_train_reads_a_megatron_prefix_as_data_as_it_reads_the_folder_it_came_from(exported, tmp_path, capsys):
    """``tokembed train PREFIX`` (as ``--source PREFIX:1`` did already): the same windows, so the same losses, as
    training on the shard folder it was exported from; the run resumes on it."""
    prefix, _ = exported
    small = ["--dim", "8", "--layers", "1", "--heads", "2", "--max-length", "4", "--batch-size", "2", "--quiet"]
    assert main(["train", str(tmp_path / "s"), "--out", str(tmp_path / "a"), *small, "--steps", "3"]) == 0
    assert main(["train", str(prefix), "--out", str(tmp_path / "b"), *small, "--steps", "2"]) == 0
    assert main(["train", "--out", str(tmp_path / "b"), "--resume", "--steps", "3", "--quiet"]) == 0
    losses = [[r["loss"] for r in json.loads((tmp_path / run / "log.json").read_text())["train"]] for run in ("a", "b")]
    assert len(losses[0]) == 3 and losses[1] == losses[0]
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert config["train"]["data"] == str(prefix.resolve()) and config["model"]["vocab_size"] == 50257
