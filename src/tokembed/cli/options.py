"""The CLI's one vocabulary: each shared concept is one option, defined here once and given to commands as parents.

Each function named after a concept (`out`, `overwrite`, `quiet`, ...) returns an argparse parent parser
(``add_parser(..., parents=[...])``) holding that concept's options; `add_device` and `add_windows` put the same
options into a parser or an argument group, for commands that group them (train). So a concept is spelled, typed
and documented the same way in every command:

==================  =====================================  ==========================================================
concept             option                                 commands
==================  =====================================  ==========================================================
where to write      ``--out/-o``                           prepare, train, experiment positions, report, export,
                                                           inspect plot
replace             ``--overwrite``                        prepare, report, export, inspect plot
less on stderr      ``--quiet/-q``                         prepare, merge, train, eval, experiment positions, report,
                                                           inspect
machine-readable    ``--json``                             demo, tokenizers, check, stats, eval, inspect
where to compute    ``--device``                           train (with --precision, --compile), eval, experiment
tokenizer           ``--tokenizer``                        prepare, train, demo, experiment positions, inspect, report,
                                                           export
how many            ``--top N``                            inspect neighbours/analogy/positions/undertrained, report,
                                                           export
token counts        ``--corpus``, ``--min-count``          inspect, report, export
windows             ``--max-length``, ``--stride``,        train, stats (defaults: `TrainConfig`'s, one source)
                    ``--batch-size``
remote storage      ``--cache-dir``, ``--cache-bytes``,     prepare, merge, check, stats, train, eval, export
                    ``--storage-option KEY=VALUE``         (every command that reads or writes shard folders)
==================  =====================================  ==========================================================

``--quiet`` means one thing everywhere: nothing on stderr but warnings and errors (no progress bar, no log lines, no
summary); what a command prints on stdout (its answer: a table, JSON, the final line of train) stays. The older
``--no-progress`` meant the same in every command that had it (train, eval and experiment print nothing else on
stderr), so it is an alias of ``--quiet``, not a second flag.

Old spellings (``--output``, export's positional OUT, ``--force``, ``--no-progress``, ``--topn``, ``--show``) keep
working for one release: hidden from ``--help`` (`Spellings`, `OldPositional`), and a note on stderr names the new one.
``tests/test_cli_vocabulary.py`` walks every command's parser and checks all of this.

Defaults that belong to a config dataclass are read from it (``TrainConfig``'s module imports no torch), never
written a second time in a help text. This module imports only argparse and the standard library at top level:
the parser is built on every ``tokembed`` call.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

REMOVED_IN = "0.3"  # the release that drops the deprecated spellings

QUIET_HELP = "nothing on stderr but warnings and errors: no progress bar, no log lines, no summary"
DEVICE_HELP = "auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps (default: auto)"
TOKENIZER_HELP = "a name `tokembed tokenizers` lists, a tokenizer.json (or its folder) or a .tiktoken file"


def _note(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    print(
        f"{parser.prog}: note: {old} is deprecated and will be removed in tokembed {REMOVED_IN}; use {new}",
        file=sys.stderr,
    )


class Spellings(argparse.Action):
    """An option (a value, or a flag with ``flag=True``) whose ``old`` spellings still work for one release.

    The old spellings are option strings of this same action, so everything argparse checks (``required``,
    conflicts) holds for them too; `Formatter` leaves them out of ``--help``, and using one prints a note on
    stderr naming the new spelling (the first option string).
    """

    def __init__(
        self, option_strings: Sequence[str], dest: str, *, old: Sequence[str] = (), flag: bool = False, **kwargs: Any
    ) -> None:
        if flag:
            kwargs.update(nargs=0, const=True, default=kwargs.get("default", False))
        super().__init__(option_strings, dest, **kwargs)
        self.old = tuple(old)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if option_string in self.old:
            _note(parser, option_string, self.option_strings[0])
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


class OldPositional(argparse.Action):
    """A positional that an option replaced (export's OUT, now ``--out``): hidden, optional, and noted on stderr.

    It keeps its value under its own name; `merge_positional` hands it to the option when the command runs.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, *, instead: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", default=None, help=argparse.SUPPRESS, **kwargs)
        self.instead = instead

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if values is not None:
            _note(parser, f"a positional {self.metavar or self.dest.upper()}", self.instead)
        setattr(namespace, self.dest, values)


class Formatter(argparse.HelpFormatter):
    """``--help`` without the old spellings of an option (`Spellings`)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, Spellings) and action.old:
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in action.old]
        return super()._format_action_invocation(action)


class Parser(argparse.ArgumentParser):
    """tokembed's parser, and every subcommand's: `Formatter` for help, and late old positionals.

    argparse fills an optional positional at the first run of positionals, so in ``export SRC --format f OUT``
    the old positional OUT would be left over: it is given to the `OldPositional` still waiting for it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            waiting = isinstance(action, OldPositional) and getattr(namespace, action.dest, None) is None
            if waiting and extras and (extras[0] == "-" or not extras[0].startswith("-")):  # "-": stdout
                action(self, namespace, extras.pop(0))
        return namespace, extras


def merge_positional(args: argparse.Namespace, old: str, new: str) -> None:
    """Put an `OldPositional`'s value under ``new``; exactly one of the two must be given."""
    given_old, given_new = getattr(args, old, None), getattr(args, new, None)
    flag = "--" + new.replace("_", "-")
    if given_old is not None and given_new is not None:
        raise ValueError(f"{flag} was given twice: as {flag} {given_new} and as a positional {given_old}; keep {flag}")
    if given_old is None and given_new is None:
        raise ValueError(f"the following argument is required: {flag} (where to write)")
    setattr(args, new, given_new if given_new is not None else given_old)


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def _with_default(text: str, default: Any) -> str:
    return text if default is None else f"{text} (default: {default})"


def out(
    what: str, *, metavar: str = "OUT", required: bool = True, default: str | None = None, old: Sequence[str] = ()
) -> argparse.ArgumentParser:
    """``--out/-o``: where the command writes ``what``; ``old``: this command's deprecated spellings."""
    p = _parent()
    p.add_argument(
        "--out",
        "-o",
        *old,
        action=Spellings,
        old=old,
        metavar=metavar,
        required=required,
        default=default,
        help=_with_default(what, default),
    )
    return p


def overwrite(what: str, *, old: Sequence[str] = ()) -> argparse.ArgumentParser:
    """``--overwrite``: replace what is already at ``--out``."""
    p = _parent()
    p.add_argument("--overwrite", *old, action=Spellings, old=old, flag=True, help=f"replace {what}")
    return p


def quiet(*, old: Sequence[str] = ()) -> argparse.ArgumentParser:
    """``--quiet/-q``: nothing on stderr but warnings and errors; stdout unchanged."""
    p = _parent()
    p.add_argument("--quiet", "-q", *old, action=Spellings, old=old, flag=True, help=QUIET_HELP)
    return p


UNVERIFIED_HELP = "read a checkpoint that has no sha256.json (written before tokembed 0.2) without verifying it"


def unverified(what: str = UNVERIFIED_HELP) -> argparse.ArgumentParser:
    """``--allow-unverified``: read a checkpoint written before checksums (``sha256.json``) without verifying it."""
    p = _parent()
    p.add_argument("--allow-unverified", action="store_true", help=what)
    return p


def json_output(what: str = "print JSON on stdout instead of text") -> argparse.ArgumentParser:
    """``--json``: the answer as JSON on stdout."""
    p = _parent()
    p.add_argument("--json", action="store_true", help=what)
    return p


def add_device(container, *, training: bool = False) -> None:
    """``--device`` (and, for training, ``--precision`` and ``--compile``) into a parser or argument group."""
    container.add_argument("--device", default="auto", metavar="DEVICE", help=DEVICE_HELP)
    if training:
        container.add_argument(
            "--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast to bfloat16 (default fp32)"
        )
        container.add_argument("--compile", action="store_true", help="compile the training step with torch.compile")


def device(*, training: bool = False) -> argparse.ArgumentParser:
    """`add_device` as a parent parser."""
    p = _parent()
    add_device(p, training=training)
    return p


def tokenizer(what: str, *, default: str | None = "gpt2", default_help: str | None = None) -> argparse.ArgumentParser:
    """``--tokenizer``: ``what`` it is in this command, then the one help text of what may be named.

    ``default_help`` describes a default that is not one name (train: "gpt2, or the shard folder's").
    """
    p = _parent()
    text = f"{what}: {TOKENIZER_HELP}"
    p.add_argument("--tokenizer", default=default, metavar="NAME", help=_with_default(text, default_help or default))
    return p


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (argparse names the option in its message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def top(what: str, *, default: int | None, old: Sequence[str] = ()) -> argparse.ArgumentParser:
    """``--top N``: how many of a ranked list (neighbours, tokens, positions) to print or keep."""
    p = _parent()
    p.add_argument(
        "--top",
        *old,
        action=Spellings,
        old=old,
        type=positive_int,
        default=default,
        metavar="N",
        help=_with_default(what, default),
    )
    return p


COUNTS_HELP = (
    "count tokens in this text file, folder of *.txt or shard folder instead of the counts the table records "
    "(a checkpoint written by `tokembed train`, or its safetensors export)"
)


def counts(*, min_count: bool = True) -> argparse.ArgumentParser:
    """``--corpus`` (where token counts come from) and ``--min-count`` (the under-trained threshold)."""
    p = _parent()
    p.add_argument("--corpus", metavar="PATH", help=COUNTS_HELP)
    if min_count:
        p.add_argument(
            "--min-count",
            type=int,
            default=None,
            help="tokens read fewer times are marked under-trained (default 10)",
        )
    return p


def default_of(config: type, name: str) -> Any:
    """The default of field ``name`` of the dataclass ``config``: help texts derive from it, never repeat it."""
    field = {f.name: f for f in dataclasses.fields(config)}[name]
    if field.default is dataclasses.MISSING:
        raise ValueError(f"{config.__name__}.{name} has no default to show")
    return field.default


def add_windows(container, *, defaults: bool, length_note: str = "") -> None:
    """``--max-length``, ``--stride``, ``--batch-size`` into a parser or group, with `TrainConfig`'s defaults.

    ``defaults``: set them (``stats``: it plans the windows a default ``train`` reads), or only name them in the
    help (``train``: unset means the checkpoint's values on --resume, else TrainConfig's). ``length_note`` follows
    the default of --max-length in its help.
    """
    from tokembed.training.config import DEFAULT_BATCH_SIZE, TrainConfig  # torch-free

    length = default_of(TrainConfig, "max_length")
    batch = default_of(TrainConfig, "batch_size") or DEFAULT_BATCH_SIZE  # None: from global_batch_size, else this
    container.add_argument(
        "--max-length",
        type=int,
        default=length if defaults else None,
        help=f"tokens per window (default {length}{length_note})",
    )
    container.add_argument("--stride", type=int, default=None, help="step between windows (default: max-length)")
    container.add_argument(
        "--batch-size",
        type=int,
        default=batch if defaults else None,
        help=f"windows per batch on each rank (default {batch})"
        + (
            ", or --global-batch-size / ranks; with --resume, any that times the ranks makes its global batch"
            if not defaults
            else ""
        ),
    )


def windows(*, defaults: bool) -> argparse.ArgumentParser:
    """`add_windows` as a parent parser."""
    p = _parent()
    add_windows(p, defaults=defaults)
    return p


def add_packing(container, what: str) -> None:
    """``--packing PACKER`` into a parser or group: a name of `tokembed.data.packing.PACKERS` (checked where it is
    used, so that a wrong name is refused with the list). ``what`` says what packing does for this command."""
    container.add_argument(
        "--packing",
        default=None,
        metavar="PACKER",
        help=f"{what}: pack whole documents into windows of max-length with a packer of "
        "tokembed.data.packing.PACKERS, e.g. best-fit (a wrong name lists them)",
    )


def folder(text: str) -> Any:
    """An argparse ``type`` for a shard folder: a local `pathlib.Path`, or a URL kept as text (``Path`` would fold
    ``s3://bucket/x`` into ``s3:/bucket/x``)."""
    from pathlib import Path

    from tokembed._paths import as_url, is_url

    return as_url(text) if is_url(text) else Path(text)


def _size(text: str) -> int:
    from tokembed.storage.options import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def storage() -> argparse.ArgumentParser:
    """Options for shard folders and inputs in object storage (URLs: `tokembed.storage`), the same in every command
    that reads or writes shard folders. `apply_storage` makes them the process's defaults for remote reads."""
    from tokembed.storage.options import DEFAULT_CACHE_BYTES, format_size

    p = _parent()
    g = p.add_argument_group("remote storage (s3://, gs://, az://, hf://, https:// folders and inputs)")
    g.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="the machine's cache of verified blocks, shared by every process that reads remote folders, and of "
        "packing plans and packed windows (default: $TOKEMBED_CACHE_DIR, else ~/.cache/tokembed)",
    )
    g.add_argument(
        "--cache-bytes",
        metavar="SIZE",
        type=_size,
        default=None,
        help="the cache holds at most this much on disk, plus the blocks in use: 512MiB, 20GB, 1.5TiB "
        f"(default: $TOKEMBED_CACHE_BYTES, else {format_size(DEFAULT_CACHE_BYTES).replace(' ', '')})",
    )
    g.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        default=None,
        dest="storage_options",
        help="an option of the storage library (fsspec), e.g. anon=true or client_kwargs.region_name=eu-west-1; "
        "repeat for more. Credentials are best left in the standard places (AWS_* variables, ~/.aws); "
        "a value given here is never written to a manifest, checkpoint or log, nor shown in a message",
    )
    return p


def apply_storage(args: argparse.Namespace) -> None:
    """Make a command's ``--cache-dir``, ``--cache-bytes`` and ``--storage-option`` this process's defaults for
    remote folders (`tokembed.storage.options.set_remote_defaults`); nothing for a command without them.

    Raises:
        ValueError: a ``--storage-option`` that is not KEY=VALUE (names the key, never the value).
    """
    if not hasattr(args, "storage_options"):
        return
    from tokembed.storage.options import parse_storage_options, set_remote_defaults

    set_remote_defaults(
        storage_options=parse_storage_options(args.storage_options or []),
        cache_dir=args.cache_dir,
        cache_bytes=args.cache_bytes,
    )


def secret_free(text: str, args: argparse.Namespace) -> str:
    """``text`` (a message about to be printed) without the values of ``--storage-option`` or credentials in the
    environment (`tokembed.storage.options.redact`)."""
    from tokembed.storage.options import parse_storage_options, redact

    pairs = getattr(args, "storage_options", None) or []
    try:
        given = parse_storage_options(pairs)
    except ValueError:
        given = {str(i): item.partition("=")[2] for i, item in enumerate(pairs)}
    return redact(text, given)
