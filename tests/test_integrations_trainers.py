"""Trainers' own code on tokembed's data: litgpt's pretrain loop, nanoGPT's unmodified train.py, and
megatron-core's GPTDataset through BlendedMegatronDatasetBuilder.

nanoGPT ships on no package index: its train.py, model.py and configurator.py are vendored unmodified
under tests/nanogpt/ (MIT, with its license) and run in a subprocess on ``tokembed export --format nanogpt``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import EOT, write_cut_stream

NANOGPT = Path(__file__).resolve().parent / "nanogpt"


def corpus(root: Path, seed: int, n_docs: int, *, cuts=(), low=0) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(low, low + 3000, n).tolist() for n in rng.integers(3, 90, n_docs)]
    stream, starts = write_cut_stream(root, docs, cuts=list(cuts))
    return stream, starts, docs


# ----------------------------------------------------------------------------------------------- litgpt


@pytest.mark.slow
def test_litgpt_pretrain_trains_on_a_shard_folder_and_resumes_the_loader(tmp_path, monkeypatch):
    litgpt = pytest.importorskip("litgpt")
    # litgpt writes hyperparameters.yaml by parsing sys.argv as its CLI would (parser_config.save_hyperparameters)
    monkeypatch.setattr(sys, "argv", ["litgpt", "tiny"])
    from litgpt.args import EvalArgs, TrainArgs
    from litgpt.pretrain import setup

    from tokembed.integrations.litgpt import LitDataModule

    corpus(tmp_path / "train", 1, 300)
    corpus(tmp_path / "val", 2, 40)
    config = litgpt.Config(
        name="tiny", block_size=32, n_layer=1, n_head=2, n_embd=16, vocab_size=50257, padded_vocab_size=50304
    )

    def run(max_iters, out, resume=False):
        data = LitDataModule(tmp_path / "train", val_source=tmp_path / "val", seed=3)
        train = TrainArgs(
            save_interval=2,
            log_interval=1,
            global_batch_size=4,
            micro_batch_size=4,
            max_tokens=max_iters * 4 * 32,
            lr_warmup_steps=1,
            max_seq_length=32,
            min_lr=1e-2,  # = the learning rate: a constant schedule, whatever the run's length
            max_norm=1.0,
            tie_embeddings=False,
        )
        setup(
            model_name="tiny",
            model_config=config,
            out_dir=out,
            precision="32-true",
            data=data,
            train=train,
            eval=EvalArgs(interval=1000, max_iters=1, final_validation=False),
            devices=1,
            logger_name="csv",
            resume=resume,
            optimizer={"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-2}},
        )

    run(8, tmp_path / "full")
    metrics = (next((tmp_path / "full").rglob("metrics.csv"))).read_text().splitlines()
    head = metrics[0].split(",")
    losses = [float(r.split(",")[head.index("loss")]) for r in metrics[1:] if r.split(",")[head.index("loss")]]
    assert len(losses) == 8 and losses[-1] < losses[0]  # litgpt's own loop trains on tokembed's rows
    saved = torch.load(tmp_path / "full" / "step-00000002" / "lit_model.pth", weights_only=False)
    assert saved["train_dataloader"]["batches_done"] == 2 and saved["train_dataloader"]["epoch"] == 0
    # Interrupted after 4 iterations, resumed to 8: litgpt restores the loader's state and the run ends
    # where the uninterrupted one did, batch for batch.
    run(4, tmp_path / "cut")
    run(8, tmp_path / "cut", resume=True)
    full = torch.load(tmp_path / "full" / "step-00000008" / "lit_model.pth", weights_only=False)
    cut = torch.load(tmp_path / "cut" / "step-00000008" / "lit_model.pth", weights_only=False)
    assert cut["train_dataloader"] == full["train_dataloader"]
    for k, v in full["model"].items():  # the same batches at a constant learning rate: the same weights
        # (up to the float noise of threaded CPU kernels; another batch moves weights by ~lr = 1e-2)
        torch.testing.assert_close(cut["model"][k], v, rtol=0, atol=1e-3)


def test_litgpt_data_module_gives_rows_in_tokembeds_order(tmp_path):
    pytest.importorskip("litgpt")
    from tokembed.integrations.litgpt import LitDataModule

    corpus(tmp_path / "train", 1, 100)
    data = LitDataModule(tmp_path / "train", seed=3)
    with pytest.raises(RuntimeError, match=r"call connect\(batch_size=..., max_seq_length=...\) before"):
        data.train_dataloader()
    data.connect(batch_size=4, max_seq_length=16)
    dl = data.train_dataloader()
    assert isinstance(dl, torch.utils.data.DataLoader)
    ref = tokembed.create_dataloader(tmp_path / "train", batch_size=4, max_length=16, seed=3)
    for rows, (x, y) in zip(dl, ref, strict=True):
        assert torch.equal(rows[:, :16], x) and torch.equal(rows[:, 1:], y)
    # litgpt's pretrain always asks for validation windows: the error says what to give it
    with pytest.raises(
        ValueError,
        match=r"split 'val' is not in .*; it has 'train'\. .* pass LitDataModule\(source, val_source=\.\.\.\)",
    ):
        data.val_dataloader()


def with_val_split(root: Path, seed: int, low: int) -> np.ndarray:
    """A folder with a train split (tokens from 5000 on) and a val split of tokens in [low, low + 1000); its val stream."""
    corpus(root, seed, 40, low=5000)
    train = json.loads((root / "manifest.json").read_text())["splits"]
    rng = np.random.default_rng(seed + 1)
    val, _ = write_cut_stream(
        root, [rng.integers(low, low + 1000, n).tolist() for n in rng.integers(3, 60, 30)], [], split="val"
    )
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"].update(train)
    (root / "manifest.json").write_text(json.dumps(manifest))
    return val


def test_litgpt_validates_a_mixture_on_its_components_val_splits(tmp_path):
    pytest.importorskip("litgpt")
    from tokembed.integrations.litgpt import LitDataModule

    streams = [with_val_split(tmp_path / name, i, low=1000 * i) for i, name in enumerate("ab")]
    data = LitDataModule(tokembed.Mixture({tmp_path / "a": 0.5, tmp_path / "b": 0.5}))
    data.connect(batch_size=4, max_seq_length=16)
    rows = torch.cat(list(data.val_dataloader()))
    assert rows.shape[1] == 17
    sources = set()
    for row in rows.numpy():
        words = row[row != EOT]
        (i,) = set(words // 1000)  # tokens of one component's val split only (never a train split's)
        assert row.astype(np.int64).tobytes() in streams[i].astype(np.int64).tobytes()  # a contiguous slice of it
        sources.add(int(i))
    assert sources == {0, 1}

    corpus(tmp_path / "c", 3, 40)  # a component without a val split
    data = LitDataModule(tokembed.Mixture({tmp_path / "a": 0.5, tmp_path / "c": 0.5}))
    data.connect(batch_size=4, max_seq_length=16)
    with pytest.raises(ValueError, match=r"split 'val' is not in .*c; it has 'train'\. .*val_source="):
        data.val_dataloader()
    data = LitDataModule(tokembed.Mixture({tmp_path / "a": 0.5, tmp_path / "c": 0.5}), val_source=tmp_path / "b")
    data.connect(batch_size=4, max_seq_length=16)
    assert len(data.val_dataloader()) > 0


# ----------------------------------------------------------------------------------------------- nanoGPT


def nanogpt_losses(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"^iter \d+: loss ([\d.]+)", out, flags=re.M)]


@pytest.mark.slow
def test_nanogpts_unmodified_train_py_trains_on_the_export(tmp_path, story):
    out = tmp_path / "shards"
    # The story's paragraphs as documents, a fifth of them held out: nanoGPT estimates its loss on val.bin.
    paragraphs = [p for p in story.split("\n\n") if p.strip()] * 3
    lines = [json.dumps({"text": p}) for p in paragraphs]
    (tmp_path / "story.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    from tokembed.cli import main

    assert main(["prepare", str(tmp_path / "story.jsonl"), "--out", str(out), "--val-fraction", "0.2", "-q"]) == 0
    work = tmp_path / "nanogpt"
    shutil.copytree(NANOGPT, work)
    data = work / "data" / "tokembed"
    assert main(["export", str(out), "--format", "nanogpt", str(data)]) == 0
    assert (data / "train.bin").stat().st_size and (data / "val.bin").stat().st_size
    args = [
        "--device=cpu", "--compile=False", "--dtype=float32", "--dataset=tokembed", "--batch_size=8",
        "--gradient_accumulation_steps=1", "--block_size=64", "--n_layer=1", "--n_head=2", "--n_embd=32",
        "--max_iters=40", "--lr_decay_iters=40",
        "--eval_interval=1000", "--eval_iters=2", "--log_interval=1", "--dropout=0.0", "--learning_rate=3e-3",
        "--warmup_iters=2", "--always_save_checkpoint=False", f"--out_dir={work / 'out'}",
    ]  # fmt: skip
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=work, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    losses = nanogpt_losses(proc.stdout)
    assert len(losses) >= 40
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3, losses  # the loss falls on the story
    meta = data / "meta.pkl"
    if meta.exists():  # h24safe's export writes nanoGPT's vocabulary record: train.py reads it
        assert "found vocab_size = 50257" in proc.stdout


# ----------------------------------------------------------------------------------------------- Megatron


def megatron_build(prefixes, weights, tmp_path, *, sizes, seq=32, tokenizer=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    from tokembed.integrations.megatron import megatron_tokenizer

    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=seq,
        blend=([str(p) for p in prefixes], weights),
        split="90,10,0",
        tokenizer=tokenizer or megatron_tokenizer(prefixes[0]),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=None if weights else str(tmp_path / "cache"),  # a blend's cache wants torch.distributed
    )
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def pieces(sample: list[int]) -> list[list[int]]:
    """A sample cut after each end-of-document token."""
    out, cur = [], []
    for v in sample:
        cur.append(v)
        if v == EOT:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


def assert_slices_of_documents(sample: list[int], docs: list[list[int]]):
    """Every piece of the sample is a contiguous slice of one source document (with its end-of-text): the
    first may start inside a document, the last may stop inside one, the others are whole documents."""
    whole = {tuple(d + [EOT]) for d in docs}
    parts = pieces(sample)
    for i, part in enumerate(parts):
        t = tuple(part)
        if 0 < i < len(parts) - 1:
            assert t in whole, "a middle piece is a whole document"
        elif i == 0 and len(parts) > 1:
            assert any(d[len(d) - len(t) :] == t for d in whole), "the first piece ends a document"
        elif i == len(parts) - 1 and len(parts) > 1:
            assert any(d[: len(t)] == t for d in whole), "the last piece begins a document"
        else:
            assert any(t == d[j : j + len(t)] for d in whole for j in range(len(d) - len(t) + 1))


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning")
def test_megatron_gpt_dataset_reads_the_export_as_slices_of_its_documents(tmp_path):
    pytest.importorskip("megatron.core")
    from tokembed.cli import main

    _, _, docs_a = corpus(tmp_path / "a", 4, 150, cuts=[1000])
    _, _, docs_b = corpus(tmp_path / "b", 5, 150, low=10000)
    for name in ("a", "b"):
        assert main(["export", str(tmp_path / name), "--format", "megatron", str(tmp_path / "m" / name)]) == 0
    from tokembed.integrations.megatron import megatron_tokenizer

    tok = megatron_tokenizer(tmp_path / "m" / "a")
    assert (tok.vocab_size, tok.eod) == (50257, EOT)  # NullTokenizer(n_vocab - 1): exact for GPT-2
    train, valid, _ = megatron_build([tmp_path / "m" / "a"], None, tmp_path, sizes=[60, 6, None])
    for ds in (train, valid):
        for i in range(len(ds)):
            s = ds[i]
            sample = s["tokens"].tolist() + s["labels"][-1:].tolist()  # T+1 tokens: labels are tokens shifted
            assert s["labels"][:-1].tolist() == s["tokens"][1:].tolist()
            assert_slices_of_documents(sample, docs_a)
    # A blend of two exports: each sample comes whole from one of them, in about the weights' proportion.
    blend, _, _ = megatron_build(
        [tmp_path / "m" / "a", tmp_path / "m" / "b"], [0.3, 0.7], tmp_path / "blend", sizes=[200, 10, 0]
    )
    from_a = 0
    for i in range(len(blend)):
        s = blend[i]
        sample = s["tokens"].tolist() + s["labels"][-1:].tolist()
        source = docs_a if max(v for v in sample if v != EOT) < 10000 else docs_b
        assert_slices_of_documents(sample, source)
        from_a += source is docs_a
    assert abs(from_a / len(blend) - 0.3) < 0.03  # Megatron's blend follows the weights


def test_megatron_tokenizer_errors(tmp_path):
    pytest.importorskip("megatron.core")
    from tokembed.integrations.megatron import megatron_tokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import indexed_dataset

    builder = indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=np.uint16)
    builder.add_document(torch.tensor([1, 2, 3]), [3])
    builder.finalize(str(tmp_path / "m.idx"))
    with pytest.raises(ValueError, match=r"records no tokenizer \(a Megatron dataset made outside tokembed\)"):
        megatron_tokenizer(tmp_path / "m")
