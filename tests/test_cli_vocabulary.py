"""One CLI vocabulary: every command's parser is walked and its options checked against the concepts.

A concept (where to write, replace, quiet, JSON, device, tokenizer, how many) has one spelling in every command;
every visible option and positional is documented; an old spelling is hidden, works like the new one, and says
so on stderr; defaults that belong to a config dataclass are the dataclass's.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from tokembed import GPTConfig
from tokembed.cli import build_parser, main, options
from tokembed.shards.config import PrepareConfig
from tokembed.training.config import TrainConfig
from tokembed.training.experiment import PositionsExperiment

# concept (the dest argparse gives it) -> its one spelling
VOCABULARY = {
    "out": ["--out", "-o"],
    "overwrite": ["--overwrite"],
    "quiet": ["--quiet", "-q"],
    "json": ["--json"],
    "device": ["--device"],
    "tokenizer": ["--tokenizer"],
    "top": ["--top"],
}
# spellings the vocabulary replaced: they work for one release, hidden from --help
OLD = {"--output": "--out", "--force": "--overwrite", "--no-progress": "--quiet", "--topn": "--top", "--show": "--top"}
# dests a visible option must not have: each is a concept above under another name
SYNONYMS = {"output", "force", "no_progress", "topn", "show", "progress", "verbose", "silent", "as_json", "cuda"}


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for every command and subcommand, aliases (`nn`) once."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        seen = set()
        for name, child in sub.choices.items():
            if id(child) not in seen:
                seen.add(id(child))
                yield from commands(child, (*path, name))


def visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [a for a in parser._actions if a.help is not argparse.SUPPRESS and not isinstance(a, skip)]


def hidden(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.help is argparse.SUPPRESS]


ALL = list(commands(build_parser()))
IDS = [" ".join(path) for path, _ in ALL]


def test_the_walk_reaches_every_command():
    names = set(IDS)
    assert {"prepare", "check", "stats", "merge", "train", "eval", "experiment positions", "demo"} <= names
    assert {"inspect neighbours", "inspect plot", "report", "export", "tokenizers"} <= names
    assert len(ALL) == len(names) >= 19


def shown(action: argparse.Action) -> list[str]:
    """The option strings ``--help`` shows (old spellings left out)."""
    return [s for s in action.option_strings if s not in getattr(action, "old", ())]


def old_spellings(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(old spelling, new spelling) of every option and positional that was renamed."""
    found = [(o, a.option_strings[0]) for a in parser._actions for o in getattr(a, "old", ())]
    return found + [
        (f"a positional {a.metavar}", a.instead) for a in parser._actions if isinstance(a, options.OldPositional)
    ]


@pytest.mark.parametrize("path, parser", ALL, ids=IDS)
def test_one_spelling_per_concept_and_every_option_documented(path, parser):
    for action in visible(parser):
        name = " ".join(path)
        assert action.help and action.help.strip(), f"{name}: {action.option_strings or action.dest} has no help"
        assert action.dest not in SYNONYMS, f"{name}: {action.option_strings} spells a concept another way"
        if action.dest in VOCABULARY and action.option_strings:
            assert shown(action) == VOCABULARY[action.dest], (name, action.option_strings)
        for spelling in shown(action):
            assert spelling not in OLD, f"{name}: {spelling} is an old spelling and must not show in --help"


@pytest.mark.parametrize("path, parser", ALL, ids=IDS)
def test_old_spellings_are_hidden_and_point_to_the_new_one(path, parser):
    for action in hidden(parser):
        assert isinstance(action, options.OldPositional), (path, action.option_strings or action.dest)
    for old, new in old_spellings(parser):
        assert OLD.get(old, "--out") == new, (path, old, new)  # a positional OUT became --out
    usage = parser.format_help()
    for old, _ in old_spellings(parser):
        assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", usage), (path, old)


@pytest.mark.parametrize("path, parser", ALL, ids=IDS)
def test_shared_concepts_have_one_help_text(path, parser):
    by_dest = {a.dest: a for a in visible(parser)}
    if "quiet" in by_dest:
        assert by_dest["quiet"].help == options.QUIET_HELP
    if "device" in by_dest:
        assert by_dest["device"].help == options.DEVICE_HELP
    if "tokenizer" in by_dest:
        assert options.TOKENIZER_HELP in by_dest["tokenizer"].help


def _config_defaults_in_help(parser: argparse.ArgumentParser, config: type) -> list[tuple[str, str, object]]:
    """(option, what its help says after "default", the dataclass's default) for options named like a field."""
    fields = {f.name: f.default for f in dataclasses.fields(config) if f.default not in (dataclasses.MISSING, None)}
    found = []
    for action in visible(parser):
        stated = re.search(r"\(default:? ([^;)]+)", action.help or "")
        if action.dest in fields and stated and not re.match(r"(the|all|half|1x)\b|--", stated.group(1)):
            found.append((action.option_strings[0], stated.group(1), fields[action.dest]))
    return found


def _states(text: str, default: object) -> bool:
    """Whether a help's "(default TEXT" states ``default``: numbers by value (0 = 0.0 = 0e0), others as written."""
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        number = re.match(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", text)
        return number is not None and float(number.group(0)) == default
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else str(default)
    return re.fullmatch(rf"{re.escape(shown)}([,: ].*)?", text) is not None


@pytest.mark.parametrize(
    "command, config, n",
    [
        (("train",), TrainConfig, 8),
        (("train",), GPTConfig, 4),
        (("experiment", "positions"), PositionsExperiment, 8),
        (("prepare",), PrepareConfig, 4),
    ],
)
def test_defaults_in_help_are_the_config_dataclass_defaults(command, config, n):
    parser = dict(ALL)[command]
    stated = _config_defaults_in_help(parser, config)
    assert len(stated) >= n  # the check sees the options it is about
    for option, text, default in stated:
        assert _states(text, default), (
            f"{' '.join(command)} {option}: help says {text}, {config.__name__} has {default}"
        )


def test_stats_plans_the_windows_train_reads_by_default():
    args = build_parser().parse_args(["stats", "shards"])
    assert (args.max_length, args.batch_size, args.stride) == (TrainConfig(data="x", out="y").max_length, 8, None)
    assert args.max_length == TrainConfig.__dataclass_fields__["max_length"].default
    from tokembed.training.config import DEFAULT_BATCH_SIZE

    # TrainConfig.batch_size is None (from global_batch_size when given); a default train reads DEFAULT_BATCH_SIZE
    assert TrainConfig(data="x", out="y").batch_size in (None, DEFAULT_BATCH_SIZE)
    assert args.batch_size == DEFAULT_BATCH_SIZE
    train = build_parser().parse_args(["train", "data.txt", "--out", "run"])
    assert (train.max_length, train.batch_size) == (
        None,
        None,
    )  # unset: the checkpoint's on --resume, else TrainConfig's


# ---------------------------------------------------------------------------------------- old spellings

# (old command line, the same in the vocabulary's spelling, the notes the old one prints)
ALIASES = [
    (
        ["inspect", "S", "plot", "pca", "--output", "f.png", "--force"],
        ["inspect", "S", "plot", "pca", "--out", "f.png", "--overwrite"],
        ["--output", "--force"],
    ),
    (
        ["report", "S", "--output", "r.html", "--force", "--topn", "3"],
        ["report", "S", "--out", "r.html", "--overwrite", "--top", "3"],
        ["--output", "--force", "--topn"],
    ),
    (
        ["export", "S", "--force", "--top", "5", "OUT"],
        ["export", "S", "--overwrite", "--top", "5", "-o", "OUT"],
        ["--force", "a positional OUT"],
    ),
    (["export", "S", "OUT", "-f", "npy"], ["export", "S", "--out", "OUT", "-f", "npy"], ["a positional OUT"]),
    (["train", "D", "--out", "R", "--no-progress"], ["train", "D", "--out", "R", "--quiet"], ["--no-progress"]),
    (["eval", "C", "--no-progress"], ["eval", "C", "-q"], ["--no-progress"]),
    (
        ["experiment", "positions", "D", "--out", "R", "--no-progress"],
        ["experiment", "positions", "D", "--out", "R", "--quiet"],
        ["--no-progress"],
    ),
    (["inspect", "S", "neighbours", "w", "--topn", "3"], ["inspect", "S", "neighbours", "w", "--top", "3"], ["--topn"]),
    (["inspect", "S", "nn", "w", "--topn", "3"], ["inspect", "S", "nn", "w", "--top", "3"], ["--topn"]),
    (
        ["inspect", "S", "analogy", "-p", "a", "--topn", "3"],
        ["inspect", "S", "analogy", "-p", "a", "--top", "3"],
        ["--topn"],
    ),
    (["inspect", "S", "positions", "--show", "5"], ["inspect", "S", "positions", "--top", "5"], ["--show"]),
    (["inspect", "S", "undertrained", "--show", "5"], ["inspect", "S", "undertrained", "--top", "5"], ["--show"]),
]


def _parsed(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.command == "export":  # the old positional OUT goes under --out when the command runs
        options.merge_positional(args, "output", "out")
        del args.output
    return args


def _path(args: argparse.Namespace) -> tuple[str, ...]:
    """The command path a parsed command line ran: ("inspect", "neighbours"), ("train",), ..."""
    more = {
        "inspect": lambda: {"nn": "neighbours"}.get(args.question, args.question),
        "experiment": lambda: args.experiment,
    }
    return (args.command, more[args.command]()) if args.command in more else (args.command,)


@pytest.mark.parametrize("old, new, notes", ALIASES, ids=[" ".join(a[0][:3]) + " " + ",".join(a[2]) for a in ALIASES])
def test_an_old_spelling_does_what_the_new_one_does_and_says_so(old, new, notes, capsys):
    assert vars(_parsed(old)) == vars(_parsed(new))
    err = capsys.readouterr().err
    for note in notes:
        newer = OLD.get(note, "--out")
        assert re.search(
            rf"^tokembed [\w ]+: note: {re.escape(note)} is deprecated and will be removed in tokembed "
            rf"{options.REMOVED_IN}; use {re.escape(newer)}$",
            err,
            re.M,
        ), (note, err)
    assert err.count("note:") == len(notes)  # one note per old spelling
    build_parser().parse_args(new)
    assert capsys.readouterr().err == ""  # the vocabulary's spelling says nothing


def test_every_alias_is_exercised_above():
    covered = {(_path(_parsed(old)), note) for old, _, notes in ALIASES for note in notes}
    found = {(path, old) for path, parser in ALL for old, _ in old_spellings(parser)}
    assert found <= covered, f"old spellings without a test in ALIASES: {sorted(found - covered)}"


def test_export_takes_its_output_once(tmp_path, capsys):
    assert main(["export", str(tmp_path / "S"), "A", "--out", "B"]) == 2
    assert "--out was given twice: as --out B and as a positional A; keep --out" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "S")]) == 2
    assert "the following argument is required: --out (where to write)" in capsys.readouterr().err


def test_the_pictures_plot_offers_are_the_librarys():
    from tokembed.cli.inspect import PLOT_KINDS
    from tokembed.inspection.plot import PICTURES, plot_table

    assert PLOT_KINDS == PICTURES  # the parser cannot import the library (torch) to ask it
    with pytest.raises(ValueError, match=r"unknown picture 'umap'; choose one of pca, tsne, positions, norms"):
        plot_table(None, "umap")


def test_quiet_leaves_out_notes_and_summaries_but_not_the_answer(tmp_path, capsys):
    from inspect_helpers import planted_table, write_checkpoint

    ck = write_checkpoint(tmp_path / "ck", planted_table(8))  # records no counts: inspect notes it
    assert main(["inspect", str(ck), "neighbours", " king"]) == 0
    loud = capsys.readouterr()
    assert main(["inspect", str(ck), "neighbours", " king", "-q"]) == 0
    quiet = capsys.readouterr()
    assert "records no token counts" in loud.err and quiet.err == "" and quiet.out == loud.out != ""
    (tmp_path / "a.txt").write_text("one document. " * 50, encoding="utf-8")
    for rank in ("0", "1"):
        argv = ["prepare", str(tmp_path / "a.txt"), "-o", str(tmp_path / "s"), "--workers", "1"]
        assert main([*argv, "--rank", rank, "--world-size", "2", "--quiet"]) == 0
    assert main(["merge", str(tmp_path / "s"), "-q"]) == 0
    assert capsys.readouterr().err == ""  # no progress, no summary, no "merged" line
    assert main(["check", str(tmp_path / "s")]) == 0
