"""review15: checkpoints never lose what a user or an earlier run left (found by an adversarial review).

Each test failed before its fix; the reference is what the user had on disk before the command.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path

import pytest

from conftest import STORY
from tokembed import TrainConfig, train

# The story as bytes (257 ids) and a tiny model: what is tested is the saves.
SHAPE = {"context_length": 16, "dim": 16, "n_layers": 1, "n_heads": 2}


def cfg(out: Path, **kw) -> TrainConfig:
    base = dict(data=str(STORY), out=str(out), max_length=16, batch_size=4, max_steps=2, tokenizer="bytes")
    return TrainConfig(**{**base, "eval_interval": 100, "eval_batches": 1, "checkpoint_interval": 1, **kw})


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class Killed(BaseException):
    """A SIGKILL at that point: nothing after it runs (no handler catches a BaseException of this kind)."""


def test_a_new_run_into_an_out_whose_save_was_killed_between_its_renames_is_refused(tmp_path, monkeypatch):
    """A save killed between its two renames leaves no ``run`` but the run's previous checkpoints beside it. The same
    command without --resume started a new run there, and its saves pruned the old run's checkpoints (all of them)."""
    import tokembed.model.checkpoint as checkpoint

    out = tmp_path / "run"
    real = os.replace

    def killed_at_step_3(src, dst):
        if Path(dst) == out and json.loads((Path(src) / "config.json").read_text())["step"] == 3:
            raise Killed  # the previous checkpoint is run.step-0000002, the new one still run.tmp-XXXX
        return real(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", killed_at_step_3)
    with pytest.raises(Killed):
        train(cfg(out, max_steps=4, keep_checkpoints=2), SHAPE, progress=False)
    monkeypatch.setattr(checkpoint.os, "replace", real)
    kept = {p.name: tree(p) for p in tmp_path.glob("run.step-*")}
    assert sorted(kept) == ["run.step-0000001", "run.step-0000002"]
    with pytest.raises(FileExistsError, match=r"run\.step-0000002 \(step 2\).*--resume"):
        train(cfg(out, max_steps=6, keep_checkpoints=2), SHAPE, progress=False)
    assert {p.name: tree(p) for p in tmp_path.glob("run.step-*")} == kept  # nothing of the old run was touched
    assert not out.exists()
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint"):  # what the message says to do
        train(cfg(out, max_steps=4, keep_checkpoints=2), resume=True, progress=False)
    assert json.loads((out / "config.json").read_text())["step"] == 4


def test_save_checkpoint_into_a_folder_that_is_no_checkpoint_keeps_the_users_files(tmp_path):
    """`tokembed.save_checkpoint(path, ...)` on a user's folder (here a Hugging Face model's: config.json,
    model.safetensors) retired it as a previous checkpoint and pruned it: the user's files of the names a checkpoint
    writes were deleted (the module promises only files tokembed wrote are ever removed)."""
    from tokembed import GPT, GPTConfig, save_checkpoint

    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "model.safetensors").write_bytes(b"the user's weights")
    (folder / "tokenizer.json").write_text("{}")
    before = tree(tmp_path)
    model = GPT(GPTConfig(vocab_size=257, context_length=16, dim=16, n_layers=1, n_heads=2, eot_token=256))
    with pytest.raises(FileExistsError, match=r"my-model is not a tokembed checkpoint .*config\.json.*another folder"):
        save_checkpoint(folder, model)
    assert tree(tmp_path) == before
    (tmp_path / "empty").mkdir()  # an empty folder made for it is fine
    save_checkpoint(tmp_path / "empty", model)
    save_checkpoint(tmp_path / "empty", model, step=1, keep=2)  # and a checkpoint is replaced, as always
    assert json.loads((tmp_path / "empty" / "config.json").read_text())["step"] == 1
    assert (tmp_path / "empty.step-0000000" / "config.json").is_file()


def test_saves_through_an_out_that_is_a_symlink_keep_the_link_and_write_where_it_points(tmp_path, monkeypatch):
    """``runs/run -> /big/run`` (checkpoints on another disk): a resumed run's first save renamed the link itself to
    ``runs/run.step-N`` and wrote the new checkpoint as a real folder in ``runs/`` (the small disk); the kept
    checkpoints beside the target were never pruned again (keep_checkpoints not held)."""
    (tmp_path / "big").mkdir()
    (tmp_path / "runs").mkdir()
    target, link = tmp_path / "big" / "run", tmp_path / "runs" / "run"
    train(cfg(target, keep_checkpoints=2), SHAPE, progress=False)
    link.symlink_to(target, target_is_directory=True)
    train(cfg(link, max_steps=5, keep_checkpoints=2), resume=True, progress=False)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["run"]  # nothing else on the link's disk
    assert sorted(p.name for p in (tmp_path / "big").iterdir()) == ["run", "run.step-0000004"]  # keep 2
    assert json.loads((target / "config.json").read_text())["step"] == 5
    import tokembed.model.checkpoint as checkpoint

    real = os.replace

    def killed_before_the_new_one_is_in(src, dst):
        if os.path.realpath(dst) == os.path.realpath(target):
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(checkpoint.os, "replace", killed_before_the_new_one_is_in)
    with pytest.raises(Killed):  # killed between the renames: the link dangles, run.step-0000005 is beside the target
        train(cfg(link, max_steps=6, keep_checkpoints=2), resume=True, progress=False)
    monkeypatch.setattr(checkpoint.os, "replace", real)
    assert not link.exists() and link.is_symlink()
    with pytest.raises(FileExistsError, match=r"run\.step-0000005 \(step 5\)"):
        train(cfg(link, max_steps=6, keep_checkpoints=2), SHAPE, progress=False)
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint"):
        train(cfg(link, max_steps=6, keep_checkpoints=2), resume=True, progress=False)
    assert link.is_symlink() and json.loads((link / "config.json").read_text())["step"] == 6


def test_a_schedule_file_naming_one_source_twice_is_refused_not_merged(tmp_path):
    """Two names (or two spellings) of one folder in a phase's weights: the file's weights became a dict keyed by
    path, so the first weight was dropped silently (web 0.5 + web2 0.2 + code 0.3 read as web 0.4, code 0.6),
    where a `Mixture` given the same refuses "listed twice"."""
    from test_phases import make_sources
    from tokembed import load_schedule

    make_sources(tmp_path, [3, 3])  # s0, s1
    schedule = tmp_path / "schedule.toml"
    schedule.write_text('[sources]\nweb = "s0"\nweb2 = "./s0"\ncode = "s1"\n[[phases]]\nstart = 0\n'
                        "weights = { web = 0.5, web2 = 0.2, code = 0.3 }\n")  # fmt: skip
    with pytest.raises(ValueError, match=r"phase 1 .*s0 is listed twice.*give each source once"):
        load_schedule(schedule)
    schedule.write_text('[[phases]]\nstart = 0\nweights = { "s0" = 0.5, "./s0" = 0.2, "s1" = 0.3 }\n')
    with pytest.raises(ValueError, match=r"phase 1 .*s0 is listed twice"):
        load_schedule(schedule)


def test_a_save_never_removes_the_save_in_progress_of_another_checkpoint_whose_name_extends_its_own(tmp_path):
    """Leftovers of killed saves of ``run`` are ``run.tmp-XXXXXXXX``; a save of ``run`` removed every marked save
    folder named ``run.tmp-*``, also the one another process was writing for its checkpoint ``run.tmp-b`` (saves
    ``run.tmp-b.tmp-XXXXXXXX``), which then failed."""
    from tokembed import GPT, GPTConfig, save_checkpoint

    model = GPT(GPTConfig(vocab_size=257, context_length=16, dim=16, n_layers=1, n_heads=2, eot_token=256))

    def meanwhile_run_saves(path: Path) -> None:  # while run.tmp-b's save is being written
        path.write_text("b's extra file")
        save_checkpoint(tmp_path / "run", model)

    save_checkpoint(tmp_path / "run.tmp-b", model, extra_files={"note.txt": meanwhile_run_saves})
    assert (tmp_path / "run.tmp-b" / "note.txt").read_text() == "b's extra file"
    assert (tmp_path / "run" / "config.json").is_file()


def test_a_mixture_resumes_with_the_same_weights_written_another_way(tmp_path, capsys):
    """``--source a:7 --source b:3`` is the mixture ``a:0.7 b:0.3`` (weights are relative: the same schedule, the
    same batches), but a resume given it was refused "trained on Mixture({a: 0.7, b: 0.3}), not Mixture({a: 0.7,
    b: 0.3})": the raw numbers were compared. Other weights are still refused."""
    from test_phases import make_sources
    from tokembed.cli import main

    a, b = make_sources(tmp_path, [40, 7])
    common = ["--out", str(tmp_path / "run"), "--max-length", "8", "--batch-size", "6", "--steps", "6",
              "--eval-interval", "100", "--dim", "16", "--layers", "1", "--heads", "2", "-q"]  # fmt: skip
    assert main(["train", "--source", f"{a}:0.7", "--source", f"{b}:0.3", "--stop-at", "3", *common]) == 0
    assert main(["train", "--source", f"{a}:0.6", "--source", f"{b}:0.4", "--resume", *common]) == 2
    assert "not Mixture" in capsys.readouterr().err
    assert main(["train", "--source", f"{a}:7", "--source", f"{b}:3", "--resume", *common]) == 0, (
        capsys.readouterr().err
    )
    assert json.loads((tmp_path / "run" / "config.json").read_text())["step"] == 6


@pytest.mark.parametrize("left", ["missing", "damaged"])
def test_ranks_that_repair_a_killed_save_at_once_leave_the_restored_checkpoint_in_place(tmp_path, monkeypatch, left):
    """Under torchrun every rank runs `resume_checkpoint` as it starts. When one rank restored ``run`` from
    ``run.step-N`` just after another had verified ``run.step-N``, the second one moved the restored (good)
    checkpoint aside to ``run.damaged-XXXX`` and failed (FileNotFoundError): the run was gone from ``run``."""
    import tokembed.model.checkpoint as checkpoint

    out = tmp_path / "run"
    train(cfg(out, max_steps=3, keep_checkpoints=2), SHAPE, progress=False)
    if left == "missing":  # killed between the renames: run.step-0000002 (complete) is beside, no run
        os.rename(out, tmp_path / "lost")
    else:
        (out / "log.json").write_text("{}")  # run fails its checksums; run.step-0000002 is complete
    verify = checkpoint.verify_checkpoint
    overtaken = []

    def the_other_rank_finishes_first(path, **kw):
        verified = verify(path, **kw)
        if Path(path).name == "run.step-0000002" and not overtaken:
            overtaken.append(True)
            checkpoint.resume_checkpoint(out)  # rank 0: the whole repair, just after this rank verified
        return verified

    monkeypatch.setattr(checkpoint, "verify_checkpoint", the_other_rank_finishes_first)
    with pytest.warns(UserWarning, match="resuming from the previous checkpoint"):
        checkpoint.resume_checkpoint(out)  # rank 1
    monkeypatch.setattr(checkpoint, "verify_checkpoint", verify)
    assert overtaken
    assert json.loads((out / "config.json").read_text())["step"] == 2
    checkpoint.verify_checkpoint(out)
    aside = sorted(p.name for p in tmp_path.glob("run.damaged-*"))
    assert len(aside) == (left == "damaged")  # the damaged one once, never the restored one


def test_weights_whose_sum_overflows_a_float_are_still_relative(tmp_path):
    """Weights are relative, so 1.5e308 and 1.5e308 are one half each; quota_of summed them as floats first and
    raised a bare ``OverflowError: intermediate overflow in fsum`` naming nothing."""
    from test_phases import make_sources
    from tokembed import Mixture, PhasedMixture

    a, b = make_sources(tmp_path, [3, 3])
    assert Mixture({a: 1.5e308, b: 1.5e308}).weights == (Fraction(1, 2), Fraction(1, 2))
    assert PhasedMixture([(0, {a: 1.5e308, b: 1.5e308})]).phases[0].weights == (Fraction(1, 2), Fraction(1, 2))


def test_a_schedule_files_weights_as_pairs_are_relative_to_the_file_as_a_table_is(tmp_path, monkeypatch):
    """``weights = [["s0", 1]]`` (pairs, the form `PhasedMixture` takes) in a schedule file named ``s0`` relative to
    the working directory, where a table (``weights = { s0 = 1 }``) is relative to the file: a job started elsewhere
    read another folder of that name, silently."""
    from test_phases import make_sources
    from tokembed import load_schedule

    make_sources(tmp_path / "data", [3, 3])
    make_sources(tmp_path / "cwd", [5])  # another s0 where the job runs
    monkeypatch.chdir(tmp_path / "cwd")
    schedule = tmp_path / "data" / "schedule.toml"
    for weights in ("{ s0 = 1, s1 = 1 }", '[["s0", 1], ["s1", 1]]'):
        schedule.write_text(f"[[phases]]\nstart = 0\nweights = {weights}\n")
        assert load_schedule(schedule).paths == (tmp_path / "data" / "s0", tmp_path / "data" / "s1"), weights
    schedule.write_text('[sources]\nweb = "s0"\n[[phases]]\nstart = 0\nweights = [["web", 1]]\n')
    assert load_schedule(schedule).paths == (tmp_path / "data" / "s0",)  # [sources] names, as in a table
    schedule.write_text('[[phases]]\nstart = 0\nweights = [["s0", 1, 2]]\n')
    with pytest.raises(ValueError, match=r"phase 1 weighs \['s0', 1, 2\].*\[path, weight\]"):
        load_schedule(schedule)


def test_a_started_phase_listed_in_another_order_is_refused_naming_each_sources_own_weight(tmp_path):
    """Listing a started phase's sources in another order renumbers them (the windows' order changes), so the resume
    is refused; the message printed the saved weights against the new order's paths, "weights [s1: 7/10, s0:
    3/10] -> [s1: 3/10, s0: 7/10]": s1 had 3/10. Now each weight is shown with its own source, and the order named."""
    import tokembed
    from test_phases import make_sources

    s0, s1 = make_sources(tmp_path, [40, 7])

    def loader(weights):
        return tokembed.create_dataloader(tokembed.PhasedMixture([(0, weights)]), batch_size=6, max_length=8)

    first = loader({s0: 0.7, s1: 0.3})
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    with pytest.raises(ValueError, match=r"phase 1 .*had started") as refused:
        loader({s1: 0.3, s0: 0.7}).load_state_dict(state)
    message = str(refused.value)
    assert f"{s1}: 7/10" not in message and f"{s0}: 3/10" not in message, message
    assert "another order" in message, message
    with pytest.raises(ValueError, match=rf"weights \[{s0}: 7/10, {s1}: 3/10\] -> \[{s0}: 3/5, {s1}: 2/5\]"):
        loader({s0: 0.6, s1: 0.4}).load_state_dict(state)  # other weights: each shown with its source
