"""Adversarial checks of the model's document masks and positions (review11), each against a reference
written from the definition."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tokembed
from conftest import STORY
from tokembed.embeddings.names import scheme_names
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT
from tokembed.training.data import load_training_data
from tokembed.training.loop import train

V, EOT = 97, 96


def model(positional: str, **kw) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=V, context_length=300, dim=16, n_layers=2, n_heads=2, eot_token=EOT, positional=positional, **kw
    )
    return GPT(config).eval()


@pytest.mark.parametrize("positional", scheme_names())
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8, torch.uint16])
def test_position_ids_of_any_integer_dtype_give_the_int64_logits(positional, dtype):
    # The shards' uint16 ids are taken as they are; position ids of a narrow or unsigned dtype must mean the same
    # positions too. Unsigned ones must not wrap in `key - query` (ALiBi, T5, Shaw read distances from them).
    m = model(positional)
    ids = torch.randint(0, EOT, (2, 40), generator=torch.Generator().manual_seed(1))
    pos = torch.cat((torch.arange(25), torch.arange(15))).expand(2, 40)  # (B,T): a document restarts at 25
    with torch.no_grad():
        want = m(ids, position_ids=pos)
        got = m(ids, position_ids=pos.to(dtype))
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if dtype is torch.int32:  # once: a complex tensor is no more an integer one than a float tensor is
        with pytest.raises(TypeError, match=r"position_ids must be an integer tensor, got torch.complex64"):
            m(ids, position_ids=pos.to(torch.complex64))


def each_document_alone_loss(model: GPT, tokens: torch.Tensor, *, length: int, windows: int, eot: int) -> float:
    """The definition of a model that keeps documents apart, scored on the first non-overlapping windows of
    ``tokens``: every piece of a window between separators (a separator ends its piece) run alone, its tokens
    predicting the next ones."""
    total, count = 0.0, 0
    with torch.no_grad():
        for w in range(windows):
            x, y = tokens[w * length : (w + 1) * length], tokens[w * length + 1 : (w + 1) * length + 1]
            at = 0
            ends = [i + 1 for i in range(length) if x[i] == eot] + [length]
            for end in ends:
                if end > at:
                    logits = model(x[at:end][None])[0]  # (n,V): the piece alone, positions from 0
                    total += F.cross_entropy(logits.double(), y[at:end], reduction="sum").item()
                    count += end - at
                    at = end
    return total / count


def sentence_folder(tmp_path) -> Path:
    """The story prepared with one document per sentence (many documents per window), a tenth of them val."""
    sentences = [p for p in STORY.read_text(encoding="utf-8").split(". ") if p.strip()]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": p}) + "\n" for p in sentences))
    folder = tmp_path / "shards"
    tokembed.prepare_corpus([corpus], folder, val_fraction=0.1, workers=1, progress=False)
    return folder


def test_a_packed_run_validates_and_saves_the_model_it_trains(tmp_path):
    # Packing trains a model that keeps documents apart (attention within each, positions restarting at each).
    # Its validation loss must score that model, and its checkpoint must be that model (eval, generate), not
    # one that reads across documents with positions running on.
    folder = sentence_folder(tmp_path)
    config = dict(
        data=str(folder), out=str(tmp_path / "run"), max_length=32, batch_size=4, max_steps=6, eval_interval=6, lr=1e-2,
        eval_batches=2, checkpoint_interval=6, warmup_steps=1, packing="best-fit",
    )  # fmt: skip
    result = train(config, dict(dim=16, n_layers=1, n_heads=2, positional="rope"), progress=False)
    model, _ = tokembed.load_checkpoint(tmp_path / "run")
    val = torch.as_tensor(load_training_data(str(folder), length=32).validation[0].tokens)
    eot = model.config.eot_token
    assert int((val[: 8 * 32] == eot).sum()) >= 2, "the validation windows hold several documents"
    want = each_document_alone_loss(model, val, length=32, windows=8, eot=eot)  # eval_batches x batch_size
    assert result.log["val"][-1]["loss"] == pytest.approx(want, rel=2e-6)
    assert model.config.document_mask  # eval and generate read the checkpoint as it was trained


def test_a_packed_run_resumes_with_the_model_options_it_started_with(tmp_path):
    # Job scripts pass the same GPTConfig at every (re)start: packing turning document_mask on must not make
    # the resume refuse it as "another model".
    folder = sentence_folder(tmp_path)
    model = GPTConfig(context_length=32, dim=16, n_layers=1, n_heads=2)  # document_mask=False, the default
    config = dict(
        data=str(folder), out=str(tmp_path / "run"), max_length=32, batch_size=4, max_steps=3, eval_interval=3,
        eval_batches=1, checkpoint_interval=3, warmup_steps=1, packing="best-fit",
    )  # fmt: skip
    train(config, model, progress=False, stop_at=2)
    assert train(config, model, progress=False, resume=True).step == 3
    with pytest.raises(ValueError, match=r"another model \(dim: 16 -> 32\)"):
        train(config, dataclasses.replace(model, dim=32), progress=False, resume=True)


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi", "t5", "shaw"])
def test_document_ids_that_come_back_to_an_earlier_id_start_a_new_document(positional):
    # Positions restart wherever the id changes; the mask must keep the same pieces apart. Ids [0 0 0 1 1 0 0 0]
    # (an id used again, e.g. 0 for padding at both ends) were three pieces for the positions but one document
    # for the mask: the last piece attended to the first with positions restarted. Reference: each piece alone.
    m = model(positional)
    ids = torch.randint(0, EOT, (1, 8), generator=torch.Generator().manual_seed(2))
    doc = torch.tensor([[0, 0, 0, 1, 1, 0, 0, 0]])
    with torch.no_grad():
        got = m(ids, document_ids=doc)[0]
        for lo, hi in ((0, 3), (3, 5), (5, 8)):
            torch.testing.assert_close(got[lo:hi], m(ids[:, lo:hi])[0], rtol=1e-5, atol=1e-5)


def test_a_document_batch_built_by_hand_names_what_disagrees():
    # A user's own packer can build the batch the model and varlen kernels read; fields that disagree with the
    # (B, T) tokens used to pass silently (cu_seqlens short of B*T, position_ids of another shape).
    from tokembed.data.batch import DocumentBatch

    x = torch.zeros(2, 4, dtype=torch.long)
    pos = torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]], dtype=torch.int32)
    cu, lens = torch.tensor([0, 2, 4, 8], dtype=torch.int32), torch.tensor([[2, 2], [4, 0]], dtype=torch.int32)
    good = DocumentBatch(x, x, pos, cu, 4, lens)
    assert good.document_ids().tolist() == [[0, 0, 1, 1], [0, 0, 0, 0]]
    cases = [
        (dict(targets=x[:, :3]), r"targets must have the shape of inputs \(2, 4\), got \(2, 3\)"),
        (dict(position_ids=pos[:, :3]), r"position_ids must have the shape of inputs \(2, 4\), got \(2, 3\)"),
        (dict(position_ids=pos.float()), r"position_ids must be an integer tensor, got torch.float32"),
        (dict(cu_seqlens=cu[:-1]), r"cu_seqlens must run from 0 to B\*T = 8 .*, got \[0, 2, 4\]"),
        (dict(cu_seqlens=torch.tensor([0, 4, 2, 8])), r"cu_seqlens must not decrease, got \[0, 4, 2, 8\]"),
        (dict(max_seqlen=3), r"max_seqlen must be the longest segment, 4 \(cu_seqlens' largest step\), got 3"),
        (dict(doc_lens=lens[:1]), r"doc_lens must have one row per row of inputs \(2\), got shape \(1, 2\)"),
        (dict(doc_lens=torch.tensor([[2, 1], [4, 0]])), r"each row of doc_lens must add up to T = 4 .*, got \[3, 4\]"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError if "integer" not in message else TypeError, match=message):
            dataclasses.replace(good, **change)
