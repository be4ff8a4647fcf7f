"""The model reads the loader's document metadata (``GPT(..., document_ids=, position_ids=)``).

Two paths must agree: the metadata the loader computed from the shards' index, and today's dense path
that finds documents from the separators (``document_mask=True``), for every registered scheme. Packed
batches (targets -100 where nothing is predicted) against the definition: each document alone. The
FlexAttention path against the dense mask: forced on the CPU (torch's eager reference), and on CUDA
by default (marked ``gpu``: run where a GPU is).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import write_cut_stream
from tokembed.embeddings.names import scheme_names
from tokembed.model import masks
from tokembed.model.config import GPTConfig
from tokembed.model.gpt import GPT
from tokembed.model.masks import DocumentMask, flex_attention_available

V, EOT = 97, 96


def model(positional: str, *, document_mask: bool = True, dropout: float = 0.0, dim: int = 16) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=V, context_length=32, dim=dim, n_layers=2, n_heads=2, eot_token=EOT,
        positional=positional, document_mask=document_mask, dropout=dropout,
    )  # fmt: skip
    return GPT(config).eval()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs") / "shards"
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, EOT, n).tolist() for n in rng.integers(1, 20, 60)]
    write_cut_stream(root, docs, cuts=[300], eot=EOT)
    return root


@pytest.mark.parametrize("positional", scheme_names())
def test_the_loaders_metadata_gives_todays_dense_document_mask_loss(folder, positional):
    m = model(positional)
    batch = next(iter(tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=1, return_documents=True)))
    with torch.no_grad():
        today = m.loss(batch.inputs, batch.targets)  # documents from the separators
        meta = m.loss(batch.inputs, batch.targets, position_ids=batch.position_ids, document_ids=batch.document_ids())
        plain = model(positional, document_mask=False)  # the metadata alone asks for the mask
        same = plain.loss(
            batch.inputs, batch.targets, position_ids=batch.position_ids, document_ids=batch.document_ids()
        )
    torch.testing.assert_close(meta, today, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(same, today, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_a_packed_batch_loss_is_each_documents_loss(folder, positional):
    m = model(positional)
    batch = next(
        iter(
            tokembed.create_dataloader(
                folder, batch_size=3, max_length=32, packing="best-fit", seed=2, return_documents=True
            )
        )
    )
    with torch.no_grad():
        got = m.loss(
            batch.inputs,
            batch.targets,
            position_ids=batch.position_ids,
            document_ids=batch.document_ids(),
            reduction="sum",
        )
        n = int((batch.targets != -100).sum())
        mean = m.loss(batch.inputs, batch.targets, position_ids=batch.position_ids, document_ids=batch.document_ids())
        # The definition: each piece alone, its own targets (the last token of a document predicts nothing).
        want = torch.zeros((), dtype=torch.float64)
        for x, y, lens in zip(batch.inputs, batch.targets, batch.doc_lens):
            at = 0
            for k in lens.tolist():
                if k:
                    xs, ys = x[at : at + k], y[at : at + k]
                    keep = ys != -100
                    if keep.any():
                        logits = m(xs[None])[0][keep]
                        want += torch.nn.functional.cross_entropy(logits, ys[keep], reduction="sum").double()
                    at += k
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(mean.double(), want / n, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch: flex_attention without torch.compile is a reference
@pytest.mark.skipif(not flex_attention_available(), reason="this torch has no FlexAttention")
@pytest.mark.parametrize("positional", ["learned", "rope", "alibi", "t5"])
def test_flex_attention_gives_the_dense_masks_logits(folder, positional, monkeypatch):
    m = model(positional)
    batch = next(iter(tokembed.create_dataloader(folder, batch_size=2, max_length=32, seed=3, return_documents=True)))
    kw = dict(position_ids=batch.position_ids, document_ids=batch.document_ids())
    with torch.no_grad():
        dense = m(batch.inputs, **kw)
        monkeypatch.setattr(DocumentMask, "flex", True)
        flex = m(batch.inputs, **kw)
    torch.testing.assert_close(flex, dense, rtol=1e-5, atol=1e-5)
    mask = DocumentMask(batch.document_ids())
    assert mask.use_flex(dropout=0.0, needs_weights=False)
    assert not mask.use_flex(dropout=0.1, needs_weights=False) and not mask.use_flex(dropout=0.0, needs_weights=True)
    monkeypatch.setattr(DocumentMask, "flex", None)
    assert not mask.use_flex(dropout=0.0, needs_weights=False)  # auto on a CPU: the dense mask


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_on_cuda_flex_attention_is_chosen_and_gives_the_dense_loss(folder, positional, monkeypatch):
    m = model(positional, dim=32).cuda()  # heads of 16: torch's compiled kernel refuses narrower ones
    batch = next(
        iter(tokembed.create_dataloader(folder, batch_size=4, max_length=32, seed=1, return_documents=True))
    ).to("cuda")
    kw = dict(position_ids=batch.position_ids, document_ids=batch.document_ids())
    assert DocumentMask(batch.document_ids()).use_flex(dropout=0.0, needs_weights=False, head_dim=16)
    with torch.no_grad():
        flex = m.loss(batch.inputs, batch.targets, **kw)
        monkeypatch.setattr(DocumentMask, "flex", False)
        dense = m.loss(batch.inputs, batch.targets, **kw)
    torch.testing.assert_close(flex, dense, rtol=1e-4, atol=1e-4)


def test_flex_attention_is_chosen_on_cuda_only_for_heads_its_kernel_takes(monkeypatch):
    # torch's compiled flex_attention raises NotImplementedError for heads narrower than 16 (its CUDA kernel's
    # tl.dot): chosen by device, such heads get the dense mask; forced, the choice is the user's.
    cuda_ids = types.SimpleNamespace(is_cuda=True, dim=lambda: 2)
    mask = DocumentMask(cuda_ids)  # type: ignore[arg-type]
    monkeypatch.setattr(masks, "flex_attention_available", lambda: True)
    assert mask.use_flex(dropout=0.0, needs_weights=False, head_dim=16)
    assert mask.use_flex(dropout=0.0, needs_weights=False, head_dim=128)
    assert not mask.use_flex(dropout=0.0, needs_weights=False, head_dim=8)
    monkeypatch.setattr(DocumentMask, "flex", True)
    assert mask.use_flex(dropout=0.0, needs_weights=False, head_dim=8)


def test_document_ids_errors(folder):
    m = model("rope", document_mask=False)
    ids = torch.zeros(2, 8, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"document_ids must have the shape of ids \(2, 8\), got \(2, 7\); pass batch.document_ids\(\)"
    ):
        m(ids, document_ids=torch.zeros(2, 7, dtype=torch.long))
    with pytest.raises(ValueError, match=r"document_ids reads whole windows: no KVCache or offset \(got offset=3\)"):
        m(ids, document_ids=torch.zeros(2, 8, dtype=torch.long), offset=3)
    with pytest.raises(ValueError, match=r"target id 97 is outside the vocabulary"):
        m.loss(ids, torch.tensor([[-100] * 7 + [97]] * 2))
