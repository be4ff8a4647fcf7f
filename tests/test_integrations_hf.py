"""Hugging Face: `HFWindows` and `LoaderStateCallback` run through transformers' real ``Trainer`` and
``GPT2LMHeadModel`` (CPU, a tiny model).

The references: HF's own loss (its internal label shift) against the cross-entropy of tokembed's targets
written out; tokembed's own loader for the order; the uninterrupted Trainer run for the resumed one.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tokembed
from handmade_shards import write_cut_stream

transformers = pytest.importorskip("transformers")
from tokembed.integrations.hf import STATE_FILE, HFWindows, LoaderStateCallback, hf_labels  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 1000, n).tolist() for n in rng.integers(3, 40, 60)]
    write_cut_stream(tmp_path / "shards", docs, cuts=[500])
    return tmp_path / "shards"


def tiny_gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=50257, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def test_labels_avoid_the_shift_trap(folder):
    ds = HFWindows(folder, max_length=16, seed=1)
    items = ds.__getitems__(range(4))
    x = torch.stack([it["input_ids"] for it in items])
    loader = tokembed.create_dataloader(folder, batch_size=4, max_length=16, seed=1)
    ref_x, ref_y = next(iter(loader))
    assert torch.equal(x, ref_x)  # tokembed's order: the loader's first batch
    labels = torch.stack([it["labels"] for it in items])
    assert torch.equal(labels[:, 1:], ref_x[:, 1:])  # plain windows: the labels are the inputs (HF shifts)
    model = tiny_gpt2().eval()
    with torch.no_grad():
        out = model(input_ids=x, labels=labels)
        logits = model(input_ids=x).logits
    # What training must minimise: each position's prediction of tokembed's target (all but the last,
    # which HF's shift cannot score).
    want = F.cross_entropy(logits[:, :-1].flatten(0, 1), ref_y[:, :-1].flatten())
    torch.testing.assert_close(out.loss, want)
    trap = F.cross_entropy(logits[:, :-1].flatten(0, 1), ref_y[:, 1:].flatten())  # targets passed as labels
    with torch.no_grad():
        wrong = model(input_ids=x, labels=ref_y).loss
    torch.testing.assert_close(wrong, trap)  # ...trains on the token two ahead
    assert hf_labels(ref_y)[:, 0].eq(-100).all()


def test_packed_items_carry_position_ids_and_mask_document_ends(folder):
    ds = HFWindows(folder, max_length=16, packing="best-fit", seed=0)
    b = tokembed.create_dataloader(
        folder, batch_size=len(ds), max_length=16, packing="best-fit", seed=0, return_documents=True
    )
    batch = next(iter(b))
    items = ds.__getitems__(range(len(ds)))
    assert torch.equal(torch.stack([it["position_ids"] for it in items]), batch.position_ids)
    labels = torch.stack([it["labels"] for it in items])
    assert torch.equal(labels[:, 1:], batch.targets[:, :-1]) and (labels[:, 0] == -100).all()
    # every -100 label sits where a document starts (nothing before it in the row predicts it) or in padding
    starts = batch.position_ids[:, 1:] == 0
    assert ((labels[:, 1:] == -100) >= starts).all()


def run_trainer(ds, out, *, max_steps, resume=None, seen):
    def collate(items):
        batch = transformers.default_data_collator(items)
        seen.append(batch["input_ids"].clone())
        return batch

    args = transformers.TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=max_steps,
        save_steps=3,
        save_strategy="steps",
        logging_steps=1,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        train_sampling_strategy="sequential",
        dataloader_drop_last=True,
        seed=0,
    )
    trainer = transformers.Trainer(
        model=tiny_gpt2(), args=args, train_dataset=ds, data_collator=collate, callbacks=[LoaderStateCallback(ds)]
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.mark.slow
def test_trainer_stopped_and_resumed_sees_the_uninterrupted_batches(folder, tmp_path):
    # 10 windows of 32 tokens: two steps of 4 per epoch (the last 2 dropped), so 7 steps cross epochs
    # 0..3, each in its own order.
    tokens = np.arange(330) % 997
    ds = HFWindows(tokens, max_length=32, seed=4)
    assert len(ds) == 10
    full: list[torch.Tensor] = []
    trainer = run_trainer(ds, tmp_path / "full", max_steps=7, seen=full)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    # accelerate collates one batch ahead (to see the end coming): the 8th was read, never trained on.
    assert len(full) == 8 and len(losses) == 7 and losses[-1] < losses[0]  # it trains
    full = full[:7]
    # The batches are tokembed's order, epoch after epoch.
    windows = [ds.windows(range(8), epoch=e) for e in range(4)]
    want = [ds.dataset.gather(w[i : i + 4])[0] for w in windows for i in (0, 4)]
    assert all(torch.equal(a, b) for a, b in zip(full, want))

    first: list[torch.Tensor] = []
    run_trainer(HFWindows(tokens, max_length=32, seed=4), tmp_path / "cut", max_steps=3, seen=first)
    saved = json.loads((tmp_path / "cut" / "checkpoint-3" / STATE_FILE).read_text())
    assert (saved["epoch"], saved["batches_done"]) == (1, 4)  # 3 steps of 4: epoch 1 from its window 4 on
    rest: list[torch.Tensor] = []
    run_trainer(
        HFWindows(tokens, max_length=32, seed=4),
        tmp_path / "cut",
        max_steps=7,
        resume=str(tmp_path / "cut" / "checkpoint-3"),
        seen=rest,
    )
    assert len(first) == 4 and len(rest) == 5  # (one ahead each) the skipped batches were never read again
    assert all(torch.equal(a, b) for a, b in zip(first[:3] + rest[:4], full, strict=True))


@pytest.mark.slow
def test_resuming_with_other_data_or_order_is_refused(folder, tmp_path):
    run_trainer(HFWindows(folder, max_length=32, seed=4), tmp_path / "cut", max_steps=3, seen=[])
    with pytest.raises(ValueError, match=r"seed=4 \(this loader: 5\)"):
        run_trainer(
            HFWindows(folder, max_length=32, seed=5),
            tmp_path / "cut",
            max_steps=6,
            resume=str(tmp_path / "cut" / "checkpoint-3"),
            seen=[],
        )


def test_callback_refuses_the_trainers_own_shuffle(folder, tmp_path):
    ds = HFWindows(folder, max_length=32)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=1, report_to=[], use_cpu=True)
    trainer = transformers.Trainer(model=tiny_gpt2(), args=args, train_dataset=ds, callbacks=[LoaderStateCallback(ds)])
    with pytest.raises(ValueError, match=r"train_sampling_strategy='random' lets the Trainer shuffle tokembed's order"):
        trainer.train()


def test_a_mixture_reads_in_the_loaders_order(tmp_path):
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        write_cut_stream(tmp_path / name, [rng.integers(0, 1000, n).tolist() for n in rng.integers(3, 40, 50)], cuts=[])
    mix = tokembed.Mixture({tmp_path / "a": 0.6, tmp_path / "b": 0.4})
    for packing in (None, "best-fit"):
        ds = HFWindows(mix, max_length=16, seed=2, packing=packing)
        ref = tokembed.create_dataloader(mix, batch_size=5, max_length=16, seed=2, packing=packing)
        x, y = next(iter(ref))
        items = ds.__getitems__(range(5))
        assert torch.equal(torch.stack([it["input_ids"] for it in items]), x)
        assert torch.equal(torch.stack([it["labels"] for it in items]), hf_labels(y))
