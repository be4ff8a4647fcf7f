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


# ------------------------------------------------------------------------- resumes the Trainer makes itself


class RecordingTrainer(transformers.Trainer):
    """transformers' Trainer, noting the batches it trains on (in its loop, after accelerate's prefetch)."""

    def __init__(self, *args, seen: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = seen

    def training_step(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs["input_ids"].clone())
        return super().training_step(model, inputs, *args, **kwargs)


def train(ds, out, *, seen, resume=None, **overrides):
    options = dict(
        output_dir=str(out),
        per_device_train_batch_size=3,
        gradient_accumulation_steps=3,
        dataloader_drop_last=False,
        save_steps=3,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        train_sampling_strategy="sequential",
        seed=0,
    )
    args = transformers.TrainingArguments(**{**options, **overrides})
    trainer = RecordingTrainer(
        model=tiny_gpt2(), args=args, train_dataset=ds, callbacks=[LoaderStateCallback(ds)], seen=seen
    )
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return trainer


TOKENS = np.arange(330) % 997  # 10 windows of 32


def windows_of(ds, epochs, batch):
    """tokembed's order as the Trainer's sequential batches of ``batch`` windows, epoch after epoch."""
    n = len(ds)
    return [
        ds.dataset.gather(ds.windows(range(i, min(i + batch, n)), epoch=e))[0]
        for e in epochs
        for i in range(0, n, batch)
    ]


@pytest.mark.slow
def test_with_accumulation_the_saved_position_is_where_the_trainer_reads_on(tmp_path):
    # 10 windows in batches of 3 (the last of 1), accumulated 3 at a time: the Trainer steps after batches
    # 0-2 and after the short batch 3, so 2 steps an epoch (not 4 // 3 = 1); 7 steps cross epochs 0..3.
    full: list[torch.Tensor] = []
    train(HFWindows(TOKENS, max_length=32, seed=4), tmp_path / "full", seen=full, max_steps=7)
    ds = HFWindows(TOKENS, max_length=32, seed=4)
    assert len(full) == 15 and all(torch.equal(a, b) for a, b in zip(full, windows_of(ds, range(4), 3)))

    cut: list[torch.Tensor] = []
    train(HFWindows(TOKENS, max_length=32, seed=4), tmp_path / "cut", seen=cut, max_steps=3)
    assert len(cut) == 7  # epoch 0's 4 batches, then one step of 3 in epoch 1
    saved = json.loads((tmp_path / "cut" / "checkpoint-3" / STATE_FILE).read_text())
    # tokembed's own loader restored from the file reads what the uninterrupted Trainer trained on next
    loader = tokembed.create_dataloader(TOKENS, batch_size=1, max_length=32, seed=4)
    loader.load_state_dict(saved)
    assert torch.equal(next(iter(loader))[0], full[7])
    assert (saved["epoch"], saved["batches_done"]) == (1, 9)

    rest: list[torch.Tensor] = []
    train(ds, tmp_path / "cut", seen=rest, max_steps=7, resume=tmp_path / "cut" / "checkpoint-3")
    assert all(torch.equal(a, b) for a, b in zip(cut + rest, full, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        # what a save with the floor of 4 // 3 steps an epoch wrote: the Trainer's own record disagrees
        ("file", r"the Trainer's own state \(trainer_state.json: epoch 1.75\) puts it at epoch 1 window 9"),
        ("accumulation", r"resumes 3 steps in at epoch 1 window 6: resume with the batch size, accumulation"),
        ("ignore_data_skip", r"window 9, but ignore_data_skip=True makes the Trainer read epoch 1 from its start"),
    ],
)
def test_the_resume_check_asks_the_trainers_own_record(tmp_path, change, message):
    train(HFWindows(TOKENS, max_length=32, seed=4), tmp_path / "cut", seen=[], max_steps=3)
    checkpoint = tmp_path / "cut" / "checkpoint-3"
    options = {}
    if change == "file":
        saved = json.loads((checkpoint / STATE_FILE).read_text())
        saved["epoch"], saved["batches_done"] = 3, 0
        (checkpoint / STATE_FILE).write_text(json.dumps(saved))
    elif change == "accumulation":
        options["gradient_accumulation_steps"] = 2
    else:
        options["ignore_data_skip"] = True
    with pytest.raises(ValueError, match=message):
        train(
            HFWindows(TOKENS, max_length=32, seed=4),
            tmp_path / "cut",
            seen=[],
            max_steps=7,
            resume=checkpoint,
            **options,
        )


@pytest.mark.slow
def test_a_checkpoint_outside_output_dir_is_checked_where_it_is(tmp_path):
    run1 = tmp_path / "run1"
    train(HFWindows(TOKENS, max_length=32, seed=4), run1, seen=[], max_steps=3)
    with pytest.raises(ValueError, match=r"seed=4 \(this loader: 5\)"):
        train(
            HFWindows(TOKENS, max_length=32, seed=5),
            tmp_path / "run2",
            seen=[],
            max_steps=7,
            resume=run1 / "checkpoint-3",
        )
    rest: list[torch.Tensor] = []
    ds = HFWindows(TOKENS, max_length=32, seed=4)
    train(ds, tmp_path / "run3", seen=rest, max_steps=7, resume=run1 / "checkpoint-3")
    assert all(torch.equal(a, b) for a, b in zip(rest, windows_of(ds, range(4), 3)[7:15], strict=True))
    (run1 / "checkpoint-3" / STATE_FILE).unlink()  # saved without the callback: nothing to check, and it says so
    with pytest.warns(UserWarning, match=rf"resuming from {run1 / 'checkpoint-3'}, which has no {STATE_FILE}"):
        train(
            HFWindows(TOKENS, max_length=32, seed=5),
            tmp_path / "run4",
            seen=[],
            max_steps=4,
            resume=run1 / "checkpoint-3",
        )


@pytest.mark.slow
def test_persistent_workers_read_each_epochs_order_and_resume_in_a_later_epoch(tmp_path):
    workers = dict(
        per_device_train_batch_size=5,
        gradient_accumulation_steps=1,
        dataloader_num_workers=1,
        dataloader_persistent_workers=True,
    )
    full: list[torch.Tensor] = []
    train(HFWindows(TOKENS, max_length=32, seed=4), tmp_path / "full", seen=full, num_train_epochs=4, **workers)
    ds = HFWindows(TOKENS, max_length=32, seed=4)
    want = windows_of(ds, range(4), 5)
    assert not torch.equal(want[0], want[2])  # epoch 1 has another order than epoch 0
    assert len(full) == 8 and all(torch.equal(a, b) for a, b in zip(full, want))
    cut: list[torch.Tensor] = []
    train(HFWindows(TOKENS, max_length=32, seed=4), tmp_path / "cut", seen=cut, max_steps=3, **workers)
    rest: list[torch.Tensor] = []  # resumed in epoch 1; epochs 2 and 3 on the same persistent worker
    train(ds, tmp_path / "cut", seen=rest, num_train_epochs=4, resume=tmp_path / "cut" / "checkpoint-3", **workers)
    assert all(torch.equal(a, b) for a, b in zip(cut + rest, full, strict=True))
