"""Document metadata with every batch (``output="documents"`` / ``return_documents=True``).

The reference is computed from the definition with plain Python loops over the document starts that the
hand-written shard folder was given (`handmade_shards`, not tokembed's writer or reader): a segment starts
at a window's first token and at every document start inside it; ``position_ids`` count from each
segment's start, ``cu_seqlens`` are the segments' starts in the flattened batch, ``doc_lens`` their
lengths per row. The tokens count up through the stream, so a window's first non-separator token says
where it starts.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tokembed
from handmade_shards import EOT, write_cut_stream
from tokembed.data.batch import DocumentBatch
from tokembed.model.gpt import document_ids, document_positions


def counting(lengths: list[int]) -> list[list[int]]:
    docs, pos = [], 0
    for n in lengths:
        docs.append(list(range(pos, pos + n)))
        pos += n + 1
    return docs


def window_start(row: torch.Tensor) -> int:
    """A counting window's start: its first token that is not a separator, minus that token's place."""
    j = int(torch.nonzero(row != EOT)[0])
    return int(row[j]) - j


def row_cuts(starts: list[int], doc_starts: list[int], t: int) -> list[list[int]]:
    """Where each window's segments start: 0, then every document start inside the window."""
    return [[0] + [d - s for d in doc_starts if s < d < s + t] for s in starts]


def reference(starts: list[int], doc_starts: list[int], t: int) -> tuple[list, list, list]:
    """position_ids (B, T), cu_seqlens, doc_lens per row, from the definition."""
    positions, cu, lens = [], [], []
    for b, cuts in enumerate(row_cuts(starts, doc_starts, t)):
        positions.append([i - max(c for c in cuts if c <= i) for i in range(t)])
        cu += [b * t + c for c in cuts]
        lens.append([e - c for c, e in zip(cuts, cuts[1:] + [t])])
    return positions, cu + [len(starts) * t], lens


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 60, size=120).tolist()
    stream, doc_starts = write_cut_stream(tmp_path, counting(lengths), cuts=[700, 1500, 1501, 3000])
    return tmp_path, stream, doc_starts.tolist()


@pytest.mark.parametrize(
    "options",
    [
        dict(max_length=32),
        dict(max_length=24, stride=7),  # overlapping windows
        dict(max_length=16, within_documents=True),
        dict(max_length=32, num_workers=2),
    ],
)
def test_metadata_matches_the_definition_from_the_document_index(folder, options):
    root, stream, doc_starts = folder
    t = options["max_length"]
    loader = tokembed.create_dataloader(root, batch_size=6, seed=3, return_documents=True, **options)
    plain = list(tokembed.create_dataloader(root, batch_size=6, seed=3, **options))
    batches = list(loader)
    assert len(batches) == len(plain) > 3
    for batch, (x, y) in zip(batches, plain):
        assert isinstance(batch, DocumentBatch)
        assert torch.equal(batch.inputs, x) and torch.equal(batch.targets, y)  # the same batches as today
        starts = [window_start(row) for row in batch.inputs]
        positions, cu, lens = reference(starts, doc_starts, t)
        assert batch.position_ids.tolist() == positions
        assert batch.cu_seqlens.dtype == torch.int32 and batch.cu_seqlens.tolist() == cu
        assert batch.max_seqlen == max(max(r) for r in lens)
        width = max(len(r) for r in lens)
        assert batch.doc_lens.tolist() == [r + [0] * (width - len(r)) for r in lens]
        # A second path: the model's positions from the separators agree (every document ends with one).
        assert torch.equal(batch.position_ids, document_positions(document_ids(batch.inputs, EOT)))
        want_ids = [[sum(1 for c in cuts if 0 < c <= i) for i in range(t)] for cuts in row_cuts(starts, doc_starts, t)]
        assert batch.document_ids().tolist() == want_ids


def test_static_shapes_pad_cu_seqlens_and_doc_lens(folder):
    root, _, _ = folder
    loader = tokembed.create_dataloader(root, batch_size=4, max_length=32, return_documents=True, max_documents=40)
    exact = list(tokembed.create_dataloader(root, batch_size=4, max_length=32, return_documents=True))
    for padded, b in zip(loader, exact):
        n = len(b.cu_seqlens)
        assert padded.cu_seqlens.shape == (41,) and padded.doc_lens.shape == (4, 40)
        assert padded.cu_seqlens[:n].tolist() == b.cu_seqlens.tolist()
        assert set(padded.cu_seqlens[n:].tolist()) <= {4 * 32}  # zero-length sequences at the end
        assert padded.doc_lens[:, : b.doc_lens.shape[1]].tolist() == b.doc_lens.tolist()
        assert padded.max_seqlen == b.max_seqlen
    with pytest.raises(
        ValueError, match=r"a batch holds \d+ document pieces, more than max_documents=4; raise max_documents"
    ):
        next(
            iter(tokembed.create_dataloader(root, batch_size=4, max_length=32, return_documents=True, max_documents=4))
        )


def test_arrays_and_texts_take_documents_from_the_separator(story):
    text = story[:3000] + "<|endoftext|>" + story[3000:6000] + "<|endoftext|>" + story[6000:9000]
    loader = tokembed.create_dataloader(text, batch_size=4, max_length=64, shuffle=False, output="documents")
    for b in loader:
        assert torch.equal(b.position_ids, document_positions(document_ids(b.inputs, EOT)))
        assert b.cu_seqlens[-1] == b.inputs.numel()


def test_a_mixture_gives_each_window_its_own_sources_documents(tmp_path):
    rng = np.random.default_rng(1)
    ra, rb = tmp_path / "a", tmp_path / "b"
    _, starts_a = write_cut_stream(ra, counting(rng.integers(1, 40, 80).tolist()), cuts=[500])
    docs_b = [[d + 20000 for d in doc] for doc in counting(rng.integers(1, 40, 80).tolist())]
    _, starts_b = write_cut_stream(rb, docs_b, cuts=[900])
    mix = tokembed.Mixture({ra: 0.6, rb: 0.4})
    plain = list(tokembed.create_dataloader(mix, batch_size=5, max_length=20, seed=2))
    for b, (x, _) in zip(
        tokembed.create_dataloader(mix, batch_size=5, max_length=20, seed=2, return_documents=True), plain
    ):
        assert torch.equal(b.inputs, x)
        for row, pos in zip(b.inputs, b.position_ids):
            s = window_start(row)
            doc_starts = (starts_b + 20000) if s >= 20000 else starts_a  # source b's tokens count from 20000
            assert pos.tolist() == reference([s], doc_starts.tolist(), 20)[0][0]


def test_rows_mode_yields_one_tensor_of_the_same_windows(folder):
    root, _, _ = folder
    pairs = list(tokembed.create_dataloader(root, batch_size=3, max_length=16, seed=1))
    rows = list(tokembed.create_dataloader(root, batch_size=3, max_length=16, seed=1, output="rows"))
    assert len(rows) == len(pairs)
    for r, (x, y) in zip(rows, pairs):
        assert r.shape == (3, 17) and r.dtype == torch.int64
        assert torch.equal(r[:, :-1], x) and torch.equal(r[:, 1:], y)


def test_document_batches_move_and_resume(folder):
    root, _, _ = folder
    loader = tokembed.create_dataloader(root, batch_size=4, max_length=32, seed=7, return_documents=True)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    rest = list(it)
    again = tokembed.create_dataloader(root, batch_size=4, max_length=32, seed=7, return_documents=True)
    again.load_state_dict(state)
    for a, b in zip(again, rest, strict=True):
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.cu_seqlens, b.cu_seqlens)
    moved = rest[0].to("cpu")
    assert isinstance(moved, DocumentBatch) and moved.max_seqlen == rest[0].max_seqlen and len(moved) == 4


def test_output_errors(folder):
    root, _, _ = folder
    with pytest.raises(ValueError, match=r"output must be one of 'pairs', 'rows', 'documents', got 'dict'"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, output="dict")
    with pytest.raises(ValueError, match=r"max_documents=8 pads the document metadata: it needs output='documents'"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, max_documents=8)
    with pytest.raises(ValueError, match=r"return_documents=True asks for output='documents', but output='rows'"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, output="rows", return_documents=True)
    with pytest.raises(ValueError, match=r"max_documents must be >= 1, got 0"):
        tokembed.create_dataloader(root, batch_size=2, max_length=8, return_documents=True, max_documents=0)
