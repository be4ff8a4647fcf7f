"""Exports for other trainers, read back by the other projects' own readers.

- Megatron-LM's indexed dataset: written by `tokembed export --format megatron`, read by megatron-core's
  ``IndexedDataset``; and written by megatron-core's ``IndexedDatasetBuilder``, read by tokembed.
- nanoGPT's ``train.bin``/``val.bin``: read with nanoGPT's own ``get_batch`` (copied from its train.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import EOT, counting_docs, write_cut_stream, write_shards
from tokembed.cli import main as cli
from tokembed.shards.export import export_megatron, export_nanogpt

with warnings.catch_warnings():  # megatron-core (the dev extra) warns that Apex and Transformer Engine are absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets import indexed_dataset as megatron_indexed


def with_val(root: Path, train: list, val: list) -> tuple[np.ndarray, np.ndarray]:
    """A folder with a train and a val split (hand-written, see handmade_shards)."""
    a = write_shards(root, train)
    b = write_shards(root.with_name(root.name + "-val"), val, split="val")
    shutil.move(root.with_name(root.name + "-val") / "val", root / "val")
    manifest = json.loads((root / "manifest.json").read_text())
    other = json.loads((root.with_name(root.name + "-val") / "manifest.json").read_text())
    manifest["splits"]["val"] = other["splits"]["val"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    return a, b


def as_uint32(root: Path, big: int) -> None:
    """Rewrite a hand-written uint16 folder as uint32 with a 100k vocabulary, and put id ``big`` first."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["dtype"] = "uint32"
    manifest["tokenizer"] = {"name": "cl100k_base", "n_vocab": 100277, "eot_token": EOT, "hash": "cd" * 32}
    for split in manifest["splits"].values():
        for s in split["shards"]:
            toks = np.fromfile(root / s["tokens"], dtype="<u2").astype("<u4")
            if s is split["shards"][0]:
                toks[0] = big
            (root / s["tokens"]).write_bytes(toks.tobytes())
            s["bytes"], s["sha256"] = toks.nbytes, hashlib.sha256(toks.tobytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))


def documents_of(stream: np.ndarray) -> list[list[int]]:
    """Each document with its separator, cut from a stream by definition."""
    ends = np.flatnonzero(stream == EOT) + 1
    return [stream[a:b].tolist() for a, b in zip(np.concatenate([[0], ends[:-1]]), ends)]


# ----------------------------------------------------------------------------------- Megatron


def test_megatron_core_reads_every_document_of_an_export(tmp_path):
    # Documents that straddle shards (format version 2) come out whole.
    docs = [list(range(1, 40)), [7] * 3, list(range(100, 180)), [5]]
    stream, _ = write_cut_stream(tmp_path / "s", docs, cuts=[10, 50, 51, 90])
    rc = cli(["export", str(tmp_path / "s"), "--format", "megatron", str(tmp_path / "out" / "corpus")])
    assert rc == 0
    ds = megatron_indexed.IndexedDataset(str(tmp_path / "out" / "corpus"))
    assert len(ds) == 4 and ds.index.dtype == np.uint16
    assert [ds[i].tolist() for i in range(len(ds))] == documents_of(stream)  # tokens and end-of-document
    assert ds.document_indices.tolist() == [0, 1, 2, 3, 4]  # one sequence per document (--append-eod)


def test_tokembed_reads_what_megatron_core_builds(tmp_path):
    rng = np.random.default_rng(0)
    docs = [np.append(rng.integers(0, 50000, n), EOT) for n in (5, 40, 1, 17, 33)]
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16)
    for d in docs:
        builder.add_item(torch.from_numpy(d.astype(np.int64)))
        builder.end_document()
    builder.finalize(str(tmp_path / "m.idx"))
    ss = tokembed.open_shards(tmp_path / "m")
    assert ss.n_documents == 5 and ss.n_tokens == sum(map(len, docs))
    assert [d.tolist() for d in ss.documents()] == [d[:-1].tolist() for d in docs]
    # Every loader reads it: the windows of each document, by the chapter's definition.
    wds = tokembed.SlidingWindowDataset(str(tmp_path / "m"), max_length=4, stride=2, within_documents=True)
    expected = [d[i : i + 5] for d in docs for i in range(0, len(d) - 4, 2)]
    x, y = wds.gather(range(len(wds)))
    assert len(wds) == len(expected)
    assert torch.equal(torch.cat([x, y[:, -1:]], 1), torch.from_numpy(np.stack(expected).astype(np.int64)))
    loader = tokembed.create_dataloader(str(tmp_path / "m"), batch_size=2, max_length=4)
    assert len(loader) == (ss.n_tokens - 4 + 3) // 4 // 2


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # inside megatron-core
def test_megatron_sentences_of_one_document_are_one_document(tmp_path):
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.int32)
    builder.add_document(torch.tensor([1, 2, 3, 4, 5]), lengths=[2, 3])  # two sentences, one document
    builder.add_document(torch.tensor([9, EOT]), lengths=[2])
    builder.finalize(str(tmp_path / "m.idx"))
    ss = tokembed.open_shards(str(tmp_path / "m"))
    assert ss.doc_starts().tolist() == [0, 5] and ss.dtype == np.dtype("<i4")


def test_a_wide_vocabulary_is_exported_as_int32_and_round_trips(tmp_path):
    stream = write_shards(tmp_path / "s", counting_docs([[20, 3], [9]]))
    as_uint32(tmp_path / "s", 99_999)
    export_megatron(tmp_path / "s", tmp_path / "w")
    ds = megatron_indexed.IndexedDataset(str(tmp_path / "w"))
    assert ds.index.dtype == np.int32
    stream[0] = 99_999
    assert np.concatenate([ds[i] for i in range(len(ds))]).tolist() == stream.tolist()
    assert tokembed.open_shards(tmp_path / "w").manifest["tokenizer"]["name"] == "cl100k_base"  # kept beside it


def test_a_damaged_megatron_pair_is_refused(tmp_path):
    write_shards(tmp_path / "s", counting_docs([[20, 3]]))
    export_megatron(tmp_path / "s", tmp_path / "m")
    (tmp_path / "m.bin").write_bytes((tmp_path / "m.bin").read_bytes()[:-2])
    with pytest.raises(ValueError, match=r"m.bin has 48 bytes, its index m.idx says 50"):
        tokembed.open_shards(tmp_path / "m")
    (tmp_path / "m.idx").write_bytes(b"NOTMEGATRON" * 4)
    with pytest.raises(ValueError, match=r"does not start with Megatron's"):
        tokembed.open_shards(tmp_path / "m")
    with pytest.raises(ValueError, match=r"a Megatron dataset has no splits"):
        tokembed.open_shards(tmp_path / "m", split="val")


# ----------------------------------------------------------------------------------- nanoGPT


def nanogpt_get_batch(data_dir: Path, split: str, block_size: int, batch_size: int):
    # nanoGPT's train.py get_batch (karpathy/nanoGPT), with the device lines dropped.
    if split == "train":
        data = np.memmap(data_dir / "train.bin", dtype=np.uint16, mode="r")
    else:
        data = np.memmap(data_dir / "val.bin", dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix])
    return x, y, ix


def test_nanogpt_reads_the_windows_tokembed_reads(tmp_path):
    train, val = with_val(tmp_path / "s", counting_docs([[300, 41], [250]]), counting_docs([[60, 7]]))
    rc = cli(["export", str(tmp_path / "s"), "--format", "nanogpt", str(tmp_path / "nano")])
    assert rc == 0
    for split, stream in (("train", train), ("val", val)):
        # prepare.py's layout: every document's tokens, then the end-of-text token, concatenated.
        assert np.fromfile(tmp_path / "nano" / f"{split}.bin", dtype=np.uint16).tolist() == stream.tolist()
        ours = tokembed.SlidingWindowDataset(tmp_path / "s", max_length=16, stride=1, split=split)
        torch.manual_seed(0)
        x, y, ix = nanogpt_get_batch(tmp_path / "nano", split, block_size=16, batch_size=12)
        ox, oy = ours.gather(ix.numpy())
        assert torch.equal(x, ox) and torch.equal(y, oy)


def test_ids_that_do_not_fit_are_refused_and_nothing_is_written(tmp_path):
    write_shards(tmp_path / "s", counting_docs([[20, 3]]))
    as_uint32(tmp_path / "s", 70_000)
    (tmp_path / "nano").mkdir()
    (tmp_path / "nano" / "train.bin").write_bytes(b"old")
    with pytest.raises(
        ValueError, match=r"token id 70000 at offset 0 of split 'train' .* does not fit nanoGPT's uint16"
    ):
        export_nanogpt(tmp_path / "s", tmp_path / "nano", split="train", overwrite=True)
    assert (tmp_path / "nano" / "train.bin").read_bytes() == b"old"  # the old file stays whole
    assert sorted(p.name for p in (tmp_path / "nano").iterdir()) == ["train.bin"]  # no temporary left
    write_shards(tmp_path / "s2", counting_docs([[20, 3]]))
    as_uint32(tmp_path / "s2", 2**31 + 5)
    with pytest.raises(ValueError, match=r"token id 2147483653 .* does not fit Megatron's int32"):
        export_megatron(tmp_path / "s2", tmp_path / "m")
    assert not list(tmp_path.glob("m*")) and not list(tmp_path.glob(".m*"))


def test_exports_refuse_to_overwrite_without_force(tmp_path, capsys):
    write_shards(tmp_path / "s", counting_docs([[20, 3]]))
    assert cli(["export", str(tmp_path / "s"), "--format", "megatron", str(tmp_path / "m")]) == 0
    assert cli(["export", str(tmp_path / "s"), "--format", "megatron", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "m.idx already exists" in err and "(--overwrite)" in err  # the flag's name now, not 0.1's --force
    assert cli(["export", str(tmp_path / "s"), "--format", "megatron", str(tmp_path / "m"), "--force"]) == 0


@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")  # inside megatron-core
def test_a_negative_id_of_a_signed_megatron_dataset_is_refused(tmp_path):
    builder = megatron_indexed.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.int32)
    builder.add_document(torch.tensor([1, -3, EOT]), lengths=[3])
    builder.finalize(str(tmp_path / "m.idx"))
    with pytest.raises(ValueError, match=r"token id -3 at offset 1 of split 'train' .* \(ids 0 to 65535\)"):
        export_nanogpt(tmp_path / "m", tmp_path / "nano", split="train")
    assert not (tmp_path / "nano").exists() or not list((tmp_path / "nano").iterdir())
