"""review13: the fixes merged this morning (sampler resume, staged exports, packed leftovers, a packed run's model,
hand-built DocumentBatch), each test against an independent reference (each failed before the fix it names)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

import tokembed
from handmade_shards import small_corpus
from tokembed.data.batch import DocumentBatch


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("review13") / "shards")


@dataclasses.dataclass(frozen=True)
class LabelledBatch(DocumentBatch):
    """A user's batch: the loader's fields plus one of its own."""

    labels: torch.Tensor

    def tokens(self) -> int:
        return self.inputs.numel()


def test_a_document_batch_subclass_stays_itself_through_to(folder):
    """``to()`` (and ``pin_memory()``, which a DataLoader calls) made a plain `DocumentBatch` from a subclass: its
    methods gone, and its own fields left as stray attributes outside the dataclass's fields (``repr``, ``==``),
    while copy, deepcopy, pickling and ``dataclasses.replace`` keep the subclass, as torch's ``to()`` keeps the
    type."""
    ds = tokembed.SlidingWindowDataset(folder, max_length=16)
    b = next(iter(tokembed.create_dataloader(ds, batch_size=3, output="documents")))
    mine = LabelledBatch(**{f.name: getattr(b, f.name) for f in dataclasses.fields(b)}, labels=b.targets + 1)
    for same in (copy.copy(mine), copy.deepcopy(mine), pickle.loads(pickle.dumps(mine)), dataclasses.replace(mine)):
        assert type(same) is LabelledBatch
    moved = mine.to(torch.device("cpu"))
    assert type(moved) is LabelledBatch and moved.tokens() == 48
    assert moved == mine and "labels=" in repr(moved)


# ------------------------------------------------------------------------------------- Megatron --split all


class Killed(BaseException):
    """Stands for a kill -9 in the renames: staged_files leaves a commit that began as it is."""


def killed_at_val_rename(monkeypatch, src, prefix, **options) -> None:
    """``export_megatron(src, prefix, split="all", **options)`` killed as it renames ``corpus_val.bin`` in."""
    import os

    from tokembed.shards.export import export_megatron

    real = os.replace

    def replace(a, b):
        if str(b).endswith("corpus_val.bin"):
            raise Killed
        return real(a, b)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Killed):
        export_megatron(src, prefix, split="all", **options)
    monkeypatch.setattr(os, "replace", real)


def test_a_killed_megatron_export_of_both_splits_is_named_when_its_val_prefix_is_read(tmp_path, monkeypatch):
    """``--split all`` now stages both prefixes as one set, named by PREFIX_train's staging folder: killed in its
    renames, reading (or checking) PREFIX_train said "an export ... was interrupted; run the export again", but
    PREFIX_val, whose .idx the commit had removed, said it "does not exist; create it with tokembed prepare" (each
    prefix had its own staging folder, and this message, before)."""
    from test_export_safety import with_val
    from tokembed.shards import check
    from tokembed.shards.export import export_megatron

    with_val(tmp_path / "old", 5, 40), with_val(tmp_path / "new", 6, 50)
    prefix = tmp_path / "out" / "corpus"
    export_megatron(tmp_path / "old", prefix, split="all")
    killed_at_val_rename(monkeypatch, tmp_path / "new", prefix, overwrite=True)
    for split in ("train", "val"):
        where = prefix.with_name(f"corpus_{split}")
        with pytest.raises(FileNotFoundError, match=rf"an export to {where} was interrupted.*run the export again"):
            tokembed.open_shards(where)
        assert "interrupted" in check.check_shards(where)[0]
    export_megatron(tmp_path / "new", prefix, split="all")  # the rerun finishes it
    assert all(check.check_shards(prefix.with_name(f"corpus_{s}")) == [] for s in ("train", "val"))


def test_a_val_export_after_a_killed_export_of_both_splits_is_not_undone_by_the_next_train_export(
    tmp_path, monkeypatch
):
    """A ``--split all`` export killed in its renames leaves its set staged under PREFIX_train's name. Exporting
    PREFIX_val alone next (``--split val``) did not finish it (it looked for PREFIX_val's staging folders only), so
    the next PREFIX_train export finished the killed set then, renaming the killed export's val over the newer val
    export: silently back to older data. In the uninterrupted sequence the val export is the last word on PREFIX_val."""
    import numpy as np

    from test_export_safety import with_val
    from tokembed.shards import megatron as mg
    from tokembed.shards.export import export_megatron

    killed, newer = with_val(tmp_path / "killed", 5, 40), with_val(tmp_path / "newer", 6, 50)
    prefix = tmp_path / "out" / "corpus"
    killed_at_val_rename(monkeypatch, tmp_path / "killed", prefix)
    val, train = prefix.with_name("corpus_val"), prefix.with_name("corpus_train")
    export_megatron(tmp_path / "newer", val, split="val", overwrite=True)
    export_megatron(tmp_path / "newer", train, split="train", overwrite=True)
    for p, want in ((val, newer[1]), (train, newer[0])):
        index = mg.read_megatron_index(p)
        got = np.fromfile(mg.bin_path(p), dtype=index.dtype)
        assert np.array_equal(got, want), f"{p.name} is the killed export's: {np.array_equal(got, killed[1])}"


def test_a_val_export_without_overwrite_after_a_killed_export_of_both_splits_is_refused(tmp_path, monkeypatch):
    """Finishing the killed ``--split all`` set first (above) must not also lift the --overwrite refusal for another
    command: in the uninterrupted sequence PREFIX_val exists and ``--split val`` without --overwrite is refused."""
    import numpy as np

    from test_export_safety import with_val
    from tokembed.shards import megatron as mg
    from tokembed.shards.export import export_megatron

    killed, _ = with_val(tmp_path / "killed", 5, 40), with_val(tmp_path / "newer", 6, 50)
    prefix = tmp_path / "out" / "corpus"
    killed_at_val_rename(monkeypatch, tmp_path / "killed", prefix)
    val = prefix.with_name("corpus_val")
    with pytest.raises(FileExistsError, match=r"corpus_val\.(bin|idx|tokembed\.json) already exists.*--overwrite"):
        export_megatron(tmp_path / "newer", val, split="val")
    index = mg.read_megatron_index(val)  # the killed export, finished
    assert np.array_equal(np.fromfile(mg.bin_path(val), dtype=index.dtype), killed[1])
