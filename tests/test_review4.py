"""review4's findings: each test failed before its fix (the fixes are in this branch; see /work/team/notes/review4.md)."""

from __future__ import annotations

import json

import pytest

from conftest import STORY
from handmade_shards import counting_docs, write_shards
from tokembed import TrainConfig, train


def test_resuming_a_finished_run_without_validation_data_writes_nothing(tmp_path):
    """A run with no validation data (a folder without a val split, a Megatron prefix) has no evaluation to miss:
    resuming it once it is finished leaves its checkpoints as they are. Was: every such resume counted the
    evaluation as missing and saved the same step again, which retired the checkpoint into a kept copy of itself
    and pruned the oldest kept checkpoint (keep_checkpoints=2: the step-4 one was gone after one resume)."""
    data = tmp_path / "shards"
    write_shards(data, counting_docs([[30, 25, 40, 33] * 4]))  # a train split only
    config = TrainConfig(
        data=str(data), out=str(tmp_path / "run"), max_length=8, batch_size=2, max_steps=5, eval_interval=5,
        eval_batches=1, checkpoint_interval=4, keep_checkpoints=2,
    )  # fmt: skip
    shape = {"dim": 8, "n_layers": 1, "n_heads": 1}
    train(config, shape, progress=False)
    before = sorted(p.name for p in tmp_path.iterdir() if p.name != "shards")
    assert before == ["run", "run.step-0000004"]
    assert json.loads((tmp_path / "run" / "log.json").read_text())["val"] == []  # nothing to evaluate
    saved = (tmp_path / "run" / "model.safetensors").stat().st_mtime_ns
    train(config, resume=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "shards") == before
    assert (tmp_path / "run" / "model.safetensors").stat().st_mtime_ns == saved


def test_a_cache_dir_with_a_tilde_is_the_home_folder_for_packing_too(tmp_path, monkeypatch):
    """``cache_dir="~/c"`` is ``$HOME/c`` for the block cache (`RemoteOptions.resolved_cache_dir`, as for
    TOKEMBED_CACHE_DIR); packing's plan and rows go there too. Was: a folder literally named ``~`` in the working
    directory (``Path("~/c")`` without expanduser), beside a block cache in the home folder."""
    from tokembed.data.packed import PackedWindows

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    folder = tmp_path / "f"
    write_shards(folder, counting_docs([[30, 25, 40, 33] * 4]))
    assert PackedWindows(folder, max_length=16, cache_dir="~/c").materialize is True
    assert not (cwd / "~").exists()
    assert sorted(p.suffix for p in (home / "c" / "packing").iterdir()) == [".ignored", ".lock", ".npz", ".rows-uint16"]


def test_the_resave_of_a_run_stopped_at_its_last_step_keeps_the_older_checkpoints(tmp_path, monkeypatch):
    """keep_checkpoints=2 keeps this checkpoint and the newest previous one. A run stopped by Ctrl-C at its last step
    saves it without the evaluation due there; its resume evaluates and saves that step again (1e45989). Was: the
    re-save retired the checkpoint it replaces into ``run.step-0000006``, a second copy of the same step, and pruned
    ``run.step-0000005``: the one earlier point to go back to was lost. A save of the same step supersedes it."""
    import signal

    from tokembed import load_checkpoint
    from tokembed.training import loop

    config = TrainConfig(
        data=str(STORY), out=str(tmp_path / "run"), max_length=16, batch_size=4, max_steps=6, eval_interval=5,
        eval_batches=1, checkpoint_interval=5, keep_checkpoints=2, tokenizer="bytes",
    )  # fmt: skip
    step = loop._Run._step

    def signalled_at_the_last_step(self, interrupt):
        got = step(self, interrupt)
        return signal.SIGINT if self.state.step == 6 else got

    monkeypatch.setattr(loop._Run, "_step", signalled_at_the_last_step)
    with pytest.raises(KeyboardInterrupt, match="stopped by SIGINT after step 6"):
        train(config, {"dim": 8, "n_layers": 1, "n_heads": 1}, progress=False)
    monkeypatch.setattr(loop._Run, "_step", step)
    runs = sorted(p.name for p in tmp_path.iterdir())
    assert runs == ["run", "run.step-0000005"]
    train(config, resume=True, progress=False)
    assert [e["step"] for e in json.loads((tmp_path / "run" / "log.json").read_text())["val"]] == [5, 6]
    assert sorted(p.name for p in tmp_path.iterdir()) == runs
    assert load_checkpoint(tmp_path / "run.step-0000005")[1]["step"] == 5


def _pruned_gpt2_file(path):
    """GPT-2's ranks without the tokens ' th' and 'ing' (renumbered without gaps), as a .tiktoken file: a valid
    tiktoken vocabulary (tiktoken merges any adjacent pair whose bytes are a token) that is not a merge list, since
    ' the' and 'ting' no longer split into two tokens of lower rank."""
    from tokembed.tokenizer import get_tokenizer
    from tokembed.tokenizer.openai import dump_ranks

    ranks = get_tokenizer("gpt2").mergeable_ranks
    kept = [b for b, _ in sorted(ranks.items(), key=lambda kv: kv[1]) if b not in (b" th", b"ing")]
    path.write_bytes(dump_ranks({b: i for i, b in enumerate(kept)}))
    return path


def test_prepare_with_a_tiktoken_file_that_gigatoken_cannot_build_gives_tiktokens_ids(tmp_path):
    """The fast path promises tiktoken's ids for any tokenizer it takes, else tiktoken. gigatoken derives a merge
    list from the ranks and panics (pyo3 PanicException, a BaseException) when a token does not split into two of
    lower rank, which tiktoken does not need: ``prepare`` of such a .tiktoken file died in its workers."""
    import numpy as np

    from tokembed import get_tokenizer, open_shards, prepare_corpus

    vocab = _pruned_gpt2_file(tmp_path / "pruned.tiktoken")
    text = "the thing is nothing to the king\n"
    (tmp_path / "in.txt").write_text(text, encoding="utf-8")
    opts = dict(tokenizer=str(vocab), pattern="gpt2", workers=1, val_fraction=0.0)
    prepare_corpus([tmp_path / "in.txt"], tmp_path / "out", **opts)
    enc = get_tokenizer(str(vocab), pattern="gpt2")
    shards = open_shards(tmp_path / "out", split="train")
    assert np.asarray(shards.read(0, shards.n_tokens)).tolist() == [*enc.encode_ordinary(text), enc.eot_token]
    with pytest.raises(ValueError, match=r"the gigatoken backend cannot be used: gigatoken cannot build pruned's"):
        prepare_corpus([tmp_path / "in.txt"], tmp_path / "out2", **opts, backend="gigatoken")


def test_the_books_dataset_takes_a_text_with_a_lone_surrogate_as_the_book_does():
    """The chapter's GPTDatasetV1 encodes with tiktoken's ``encode(txt, allowed_special={"<|endoftext|>"})``, which
    takes a lone surrogate (half of a UTF-16 pair: a JSON ``\\ud800`` escape, a file read with surrogateescape) as
    U+FFFD. Was: the drop-in's ``encode_to_numpy`` raised UnicodeEncodeError where the book's code runs."""
    import torch

    import tokembed

    txt = "Hello world \ud800 café. <|endoftext|> In the sunlit terraces \udcff of the palace. " * 4
    enc = tokembed.get_tokenizer("gpt2")
    token_ids = enc.encode(txt, allowed_special={"<|endoftext|>"})  # the book's listing, as it is
    book = [
        (token_ids[i : i + 4], token_ids[i + 1 : i + 5]) for i in range(0, len(token_ids) - 4, 4)
    ]  # fmt: skip
    ds = tokembed.GPTDatasetV1(txt, enc, max_length=4, stride=4)
    assert [(x.tolist(), y.tolist()) for x, y in (ds[k] for k in range(len(ds)))] == book
    x, y = next(iter(tokembed.create_dataloader_v1(txt, batch_size=2, max_length=4, stride=4, shuffle=False)))
    assert torch.equal(x, torch.tensor([b[0] for b in book[:2]])) and torch.equal(
        y, torch.tensor([b[1] for b in book[:2]])
    )


def test_a_block_cache_on_a_file_system_without_locks_says_what_to_do(tmp_path, monkeypatch):
    """The processes of a machine share the block cache by flock (admissions, fetches, blocks in use): unlike the
    packing rows it cannot run unlocked. On a file system without locks (NFS without its lock daemon: ENOLCK) the
    error names the cache and the fix. Was: a bare "[Errno 37] No locks available" from the first remote read, and
    prefetches silently never ran (a failed non-blocking lock read as "busy"). The file system is simulated."""
    import errno

    from tokembed.storage import cache as block_cache
    from tokembed.storage.stores import Store

    spec = block_cache.BlockSpec("train/00000.bin", 10, 10, ("0" * 64,))
    blocks = block_cache.BlockCache(tmp_path / "c", 1 << 20).folder("v1", Store("s3://bucket/folder"), [spec])

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(block_cache.fcntl, "flock", no_locks)
    message = r"the cache .*c is on a file system without file locks \(No locks available\).* --cache-dir on a local"
    with pytest.raises(OSError, match=message):
        blocks.pin("train/00000.bin", 0)
    with pytest.raises(OSError, match=message):
        blocks.reserve_prefetch("train/00000.bin", 0, when=3)
