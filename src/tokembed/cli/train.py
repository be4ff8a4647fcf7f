"""`tokembed train`, `tokembed eval` and `tokembed experiment positions`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from tokembed.cli import options

# torch-free: building the parser never imports torch
from tokembed.embeddings.names import ROPE_SCALINGS, positional_scheme, scheme_names


def _lengths(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 64,128,256, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"lengths must be integers >= 1, got {text!r}")
    return values


def _every(text: str) -> str:
    from tokembed.training.progress import Every  # torch-free

    try:
        Every.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    _add_train(sub)
    _add_eval(sub)
    _add_experiment(sub)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a small GPT on a shard folder or a text file",
        description="Train a small GPT (AdamW, warmup + cosine, clipping) and write checkpoints to --out.",
        parents=[
            options.out("checkpoint directory (written atomically; --resume continues it)", metavar="DIR"),
            options.tokenizer(
                "the tokenizer of a text file (a shard folder uses its manifest's)", default=None, default_help="gpt2"
            ),
            options.quiet(old=["--no-progress"]),
            options.unverified("with --resume: " + options.UNVERIFIED_HELP),
            options.storage(),
        ],
    )
    p.add_argument(
        "data",
        nargs="?",
        help="a shard folder (tokembed prepare), a Megatron prefix (PREFIX.bin + PREFIX.idx) or a UTF-8 text file "
        "(its last 10%% of tokens is held out for validation); "
        "or leave it out and give --source or --mixture; with --resume, the checkpoint's data (a copy at another "
        "path is recognised by its content)",
    )
    p.add_argument(
        "--source",
        action="append",
        metavar="PATH:WEIGHT",
        help="train on a mixture: repeat for each shard folder (or Megatron prefix) and its relative weight, "
        "e.g. --source shards/web:0.7 --source shards/code:0.3 (exact proportions; see docs/loading.md)",
    )
    p.add_argument(
        "--mixture",
        type=Path,
        metavar="FILE",
        help="train on a mixture whose weights change over training: a schedule of phases (start in tokens, "
        "weights) in a .toml or .json file; with --resume, phases that have not started may change (see "
        "docs/loading.md)",
    )
    _add_model_options(p.add_argument_group("model (with --resume: the checkpoint's; options given must agree)"))
    add_scheme_options(p)
    _add_training_options(
        p.add_argument_group("training (default: the checkpoint's values with --resume, else TrainConfig's)")
    )
    options.add_device(
        p.add_argument_group(
            "device", "may change on --resume; under torchrun each rank trains on its part of each batch"
        ),
        training=True,
    )
    _add_run_options(p.add_argument_group("the run: resume, stop, progress"))
    p.set_defaults(func=run_train)


def _add_run_options(r) -> None:
    r.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="auto",
        help="continue the checkpoint in --out exactly where it stopped (on any number of ranks: the global batch "
        "is kept); --resume auto: continue it if it exists, else start (for job scripts that restart themselves)",
    )
    r.add_argument(
        "--stop-at",
        type=int,
        metavar="STEP",
        help="stop after this step, saving it, as if interrupted (the schedule still runs to --steps: --resume "
        "continues exactly); for a job that must end within its time slot",
    )
    r.add_argument(
        "--log-every",
        type=_every,
        default="30s",
        metavar="N",
        help="without a terminal (nohup, Slurm, kubectl logs), a log line every N steps (50) or every N seconds "
        "(30s, 2m, 1h); default 30s",
    )


def _add_model_options(m) -> None:
    from tokembed.model.config import GPTConfig  # torch-free

    def default(name: str):
        return options.default_of(GPTConfig, name)

    m.add_argument(
        "--positional",
        choices=scheme_names(),
        metavar="SCHEME",
        help=f"positional scheme: %(choices)s (default {default('positional')})",
    )
    m.add_argument("--context-length", type=int, help="model context (default: --max-length)")
    m.add_argument("--dim", type=int, help=f"model width (default {default('dim')})")
    m.add_argument("--layers", type=int, dest="n_layers", help=f"transformer blocks (default {default('n_layers')})")
    m.add_argument("--heads", type=int, dest="n_heads", help=f"attention heads (default {default('n_heads')})")
    m.add_argument("--dropout", type=float, help=f"dropout (default {default('dropout')})")
    m.add_argument("--no-tie", action="store_true", help="separate output head instead of the token table")
    m.add_argument(
        "--document-mask",
        action="store_true",
        default=None,
        help="keep packed documents apart: attend only within a document, positions restart after <|endoftext|> "
        "(--packing turns it on)",
    )


def add_scheme_options(p: argparse.ArgumentParser) -> None:
    """One argument group per registered scheme with options: ``--<scheme>-<option>`` for each field of its
    options dataclass (and the field's aliases, such as 0.1's ``--t5-buckets``), help and defaults from it.
    `train` and `experiment positions` call it; `scheme_options` / `options_by_scheme` read the values back."""
    for name in scheme_names():
        scheme = positional_scheme(name)
        specs = scheme.option_specs()
        if not specs:
            continue
        g = p.add_argument_group(f"{name} positions: {scheme.summary}".rstrip(": "))
        for spec in specs:
            try:
                g.add_argument(
                    *spec.flags,
                    dest=_scheme_dest(name, spec.name),
                    type=spec.parse,
                    choices=spec.choices,
                    metavar=None if spec.choices else spec.parse.__name__.upper(),
                    help=spec.help,
                )
            except argparse.ArgumentError as e:
                raise ValueError(
                    f"positional scheme {name!r}: option {spec.name!r} clashes with another option ({e}); rename it"
                ) from None


def _scheme_dest(scheme: str, option: str) -> str:
    return f"positional option {scheme} {option}"  # no other argument can be called this


def _given_scheme_options(args: argparse.Namespace) -> list:
    """(OptionSpec, value) of every scheme option given on the command line."""
    given = []
    for name in scheme_names():
        for spec in positional_scheme(name).option_specs():
            value = getattr(args, _scheme_dest(name, spec.name), None)
            if value is not None:
                given.append((spec, value))
    return given


def scheme_options(args: argparse.Namespace, positional: str) -> dict:
    """The options given on the command line for the scheme ``positional``; raises for another scheme's."""
    given = {}
    for spec, value in _given_scheme_options(args):
        if spec.scheme != positional:
            raise ValueError(
                f"{spec.flags[0]} is an option of --positional {spec.scheme}, but this model uses {positional}"
            )
        given[spec.name] = value
    return given


def options_by_scheme(args: argparse.Namespace) -> dict[str, dict]:
    """The scheme options given on the command line, by scheme (for runs of several schemes)."""
    given: dict[str, dict] = {}
    for spec, value in _given_scheme_options(args):
        given.setdefault(spec.scheme, {})[spec.name] = value
    return given


def _add_training_options(t) -> None:
    from tokembed.training.config import TrainConfig  # torch-free

    def default(name: str):
        return options.default_of(TrainConfig, name)

    options.add_windows(t, defaults=False, length_note=", or --context-length when that is smaller")
    options.add_packing(t, "train on whole documents, attention and positions within each (no --stride)")
    t.add_argument(
        "--materialize-packing",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --packing over a shard folder (or each folder of a mixture): write the packed windows once into the cache and read them as "
        "rows (the same batches, faster; the split's bytes plus its padding on disk); default: a local split of up to 2**28 tokens "
        "is, when the cache has room; --no-materialize-packing always gathers them from the shards",
    )
    t.add_argument(
        "--steps", type=int, dest="max_steps", help=f"optimizer steps in all (default {default('max_steps')})"
    )
    t.add_argument("--lr", type=float, help=f"peak learning rate (default {default('lr')})")
    t.add_argument(
        "--warmup-steps", type=int, help=f"steps of linear warmup to --lr (default {default('warmup_steps')})"
    )
    t.add_argument(
        "--weight-decay", type=float, help=f"AdamW decay of matrices and embeddings (default {default('weight_decay')})"
    )
    t.add_argument(
        "--grad-clip",
        type=float,
        help=f"clip the global gradient norm; 0: no clipping (default {default('grad_clip')})",
    )
    t.add_argument(
        "--eval-interval", type=int, help=f"steps between validation losses (default {default('eval_interval')})"
    )
    t.add_argument(
        "--eval-batches", type=int, help=f"validation batches per evaluation (default {default('eval_batches')})"
    )
    t.add_argument(
        "--checkpoint-interval", type=int, help=f"steps between checkpoints (default {default('checkpoint_interval')})"
    )
    t.add_argument(
        "--global-batch-size",
        type=int,
        help="windows per step over all ranks: what --resume keeps on any number of ranks (default: "
        "--batch-size x ranks; with --resume, the checkpoint's)",
    )
    t.add_argument(
        "--keep",
        type=int,
        dest="keep_checkpoints",
        metavar="N",
        help="keep the last N checkpoints: the latest in --out, the N-1 before it beside it as OUT.step-NNNNNNN "
        f"(default {default('keep_checkpoints')})",
    )
    t.add_argument("--seed", type=int, help=f"seeds weights, shuffling and dropout (default {default('seed')})")
    t.add_argument(
        "--init-embeddings",
        help="a local GPT-2 weights file (model.safetensors, pytorch_model.bin, the book's model.pth) whose wte/wpe start the embeddings",
    )


def _add_eval(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser(
        "eval",
        help="validation loss and perplexity of a checkpoint at several lengths",
        description="Validation loss and perplexity at the training length and beyond.",
        parents=[
            options.json_output("print JSON instead of a table"),
            options.device(),
            options.quiet(old=["--no-progress"]),
            options.unverified(),
            options.storage(),
        ],
    )
    e.add_argument("checkpoint", type=Path, help="a checkpoint directory written by `tokembed train`")
    e.add_argument(
        "--lengths",
        type=_lengths,
        default=None,
        help="comma-separated window lengths (default: 1x,2x,4x,8x the training length)",
    )
    e.add_argument("--data", help="shard folder or text file (default: the checkpoint's training data)")
    e.add_argument("--batch-size", type=int, default=8, help="windows per forward pass (default 8)")
    e.add_argument("--max-windows", type=int, default=None, help="at most this many windows per length")
    e.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="at most max-tokens // length windows per length (the same tokens scored at every length)",
    )
    e.add_argument(
        "--rope-scaling",
        choices=ROPE_SCALINGS,
        help="RoPE past the training length, by factor length / training length: linear (position interpolation), "
        "ntk, yarn (with its attention temperature) or llama3",
    )
    e.add_argument(
        "--sliding",
        action="store_true",
        help="a sliding window: each window scores only its last --stride tokens (default half), which see more context",
    )
    e.add_argument("--stride", type=int, help="the sliding window's stride (with --sliding)")
    e.set_defaults(func=run_eval)


def _add_experiment(sub: argparse._SubParsersAction) -> None:
    from tokembed.training.experiment import PositionsExperiment  # torch-free

    def default(name: str) -> str:
        value = options.default_of(PositionsExperiment, name)
        return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)

    x = sub.add_parser("experiment", help="experiments", description="Experiments that train and compare models.")
    xs = x.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    pos = xs.add_parser(
        "positions",
        help="train short, test long: every positional scheme",
        description="Train the same small GPT once per positional scheme and evaluate it at 1x..16x the training "
        "length, on non-overlapping windows and with a sliding window. With --tokenizer bytes the defaults show "
        "the effect in about 10 minutes on a 2-core CPU.",
        parents=[
            options.out("folder for results.json, positions.md/.png and the checkpoints", metavar="DIR"),
            options.tokenizer("the tokenizer of a text file (bytes: 257 ids, fast)", default=None, default_help="gpt2"),
            options.device(),
            options.quiet(old=["--no-progress"]),
            options.storage(),
        ],
    )
    pos.add_argument("data", help="shard folder or text file")
    pos.add_argument(
        "--schemes",
        type=_names,
        default=None,
        help=f"comma-separated (default all: {','.join(scheme_names())})",
    )
    pos.add_argument("--train-length", type=int, help=f"training window (default {default('train_length')})")
    pos.add_argument(
        "--multiples",
        type=_lengths,
        help=f"evaluation lengths as multiples of the training length (default {default('multiples')})",
    )
    pos.add_argument("--steps", type=int, help=f"optimizer steps per scheme (default {default('steps')})")
    pos.add_argument("--batch-size", type=int, help=f"windows per step (default {default('batch_size')})")
    pos.add_argument("--lr", type=float, help=f"peak learning rate (default {default('lr')})")
    pos.add_argument("--dim", type=int, help=f"model width (default {default('dim')})")
    pos.add_argument("--layers", type=int, dest="n_layers", help=f"transformer blocks (default {default('n_layers')})")
    pos.add_argument("--heads", type=int, dest="n_heads", help=f"attention heads (default {default('n_heads')})")
    pos.add_argument("--seed", type=int, help=f"the same seed for every scheme (default {default('seed')})")
    pos.add_argument(
        "--eval-tokens",
        type=int,
        help=f"score about this many validation tokens per length (default {default('eval_tokens')})",
    )
    pos.add_argument(
        "--sliding-stride", type=int, help="the sliding evaluation's stride (default: half of each length)"
    )
    pos.add_argument(
        "--threads",
        type=int,
        help=f"torch threads; 0: torch's own choice (default {default('threads')}: fastest for tiny models)",
    )
    pos.add_argument("--quick", action="store_true", help="a tiny run (seconds), as the tests use")
    add_scheme_options(pos)
    pos.set_defaults(func=run_experiment)


def _device_config(args: argparse.Namespace):
    from tokembed.training.device import DeviceConfig

    return DeviceConfig(device=args.device, precision=args.precision, compile=args.compile)


# Model options of `tokembed train` -> GPTConfig fields (the vocabulary is the data's: train() sets it; the
# scheme's options are gathered by `scheme_options`).
MODEL_OPTIONS = ("positional", "context_length", "dim", "n_layers", "n_heads", "dropout", "document_mask")


def _train_data(args: argparse.Namespace):
    """DATA, the `Mixture` of the --source PATH:WEIGHT options, the `PhasedMixture` of --mixture FILE, or None
    (with --resume: the checkpoint's)."""
    if [args.data is not None, bool(args.source), args.mixture is not None].count(True) > 1:
        raise ValueError(
            "give the training data either as DATA, as --source PATH:WEIGHT options (repeated) or as --mixture FILE, "
            "only one of them"
        )
    if args.mixture is not None:
        from tokembed.data.phases import load_schedule

        return load_schedule(args.mixture)
    if not args.source:
        return args.data
    from tokembed.data.mixture import Mixture, parse_source

    return Mixture([parse_source(s) for s in args.source])


def _resume_value(args: argparse.Namespace) -> bool | str:
    """``--resume`` takes an optional ``auto``; a word after it that is not ``auto`` is the DATA argument."""
    if args.resume in (True, False, "auto"):
        return args.resume
    if args.data is None:
        args.data = args.resume
        return True
    raise ValueError(f"--resume takes no value but auto, got {args.resume!r}")


def run_train(args: argparse.Namespace) -> int:
    from tokembed.training.config import TrainConfig
    from tokembed.training.interrupt import TrainingInterrupted
    from tokembed.training.loop import train

    resume = _resume_value(args)
    options = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if getattr(args, f.name, None) is not None}
    options.update(data=_train_data(args), out=str(args.out))
    model = {k: getattr(args, k) for k in MODEL_OPTIONS if getattr(args, k) is not None}
    if args.no_tie:
        model["tie_embeddings"] = False
    chosen = scheme_options(args, _scheme_of_run(args, resume))  # only the options given (train() fills the rest)
    if chosen:
        model["positional_options"] = chosen
    device = _device_config(args)
    progress = not args.quiet
    try:
        result = train(
            options, model, resume=resume, stop_at=args.stop_at, progress=progress, log_every=args.log_every,
            device=device, allow_unverified=args.allow_unverified,
        )  # fmt: skip
    except TrainingInterrupted as stop:
        if _is_main():  # under torchrun: one line, from rank 0 (every rank stopped at the same step)
            print(f"tokembed train: {stop}. Resume with: {_resume_command(args)}", file=sys.stderr, flush=True)
        return 128 + stop.signal
    if result.is_main:  # under torchrun: one summary line, from rank 0
        val = f", validation loss {result.val_loss:.4f}" if result.val_loss is not None else ""
        print(f"step {result.step}: train loss {result.train_loss:.4f}{val}; checkpoint {result.checkpoint}")
    return 0


def _scheme_of_run(args: argparse.Namespace, resume: bool | str) -> str:
    """The positional scheme that scheme options given apply to: --positional; else, resuming, the checkpoint's
    (the model is the checkpoint's); else GPTConfig's default."""
    from tokembed.model.config import GPTConfig  # torch-free

    if args.positional:
        return args.positional
    if resume and _given_scheme_options(args):
        from tokembed.model.checkpoint import read_checkpoint_config

        try:
            return GPTConfig.from_dict(read_checkpoint_config(args.out)["model"]).positional
        except (OSError, ValueError, KeyError, TypeError):  # none there or damaged: train() says what is wrong
            pass
    return options.default_of(GPTConfig, "positional")


def _is_main() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"


def _resume_command(args: argparse.Namespace) -> str:
    """This command again, resuming: the same arguments (with --resume), under torchrun as it was started."""
    import os
    import shlex

    argv = list(args.argv)
    if not any(a == "--resume" or a.startswith("--resume=") for a in argv):
        argv.append("--resume")
    hidden = [_hide_value(a) if prev == "--storage-option" or a.startswith("--storage-option=") else a
              for prev, a in zip(["", *argv], argv)]  # fmt: skip
    command = ["tokembed", *hidden]
    local, world = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        nodes = [] if local == world else ["--nnodes", str(world // local)]
        head = ["torchrun", "--standalone"] if local == world else ["torchrun", *nodes]
        command = [*head, "--nproc_per_node", str(local), "-m", *command]
    from tokembed.cli.options import secret_free

    shown = secret_free(shlex.join(command), args)  # a credential typed elsewhere in the command
    return shown + (" (give the --storage-option values again)" if hidden != argv else "")


def _hide_value(option: str) -> str:
    """``secret=a=b`` -> ``secret=***`` (``--storage-option=secret=a`` keeps its flag): a resume command is logged."""
    flag = "--storage-option=" if option.startswith("--storage-option=") else ""
    key, sep, _ = option.removeprefix(flag).partition("=")
    return f"{flag}{key}{sep}***" if sep else option


def format_rows(rows: list[dict]) -> str:
    """Markdown: what was scored, then a row per length (and per source, for a mixture)."""
    scored = next((r["scored"] for r in rows if r.get("scored")), None)
    several = any(len(r.get("sources", ())) > 1 for r in rows)
    head = ["length", *(["source"] if several else []), "loss", "perplexity", "windows", "note"]
    lines = [f"scored: {scored}", ""] if scored else []
    lines += ["| " + " | ".join(head) + " |", "|---:|" + ("---|" if several else "") + "---:|---:|---:|---|"]
    for r in rows:
        if r["loss"] is None:
            lines.append(f"| {r['length']} |{' |' if several else ''} n/a | n/a | 0 | {r['note']} |")
            continue
        names = _labels([s["source"] for s in r["sources"]]) if several else {}
        for s in r["sources"] if several else ():
            lines.append(_row(r["length"], names[s["source"]], s, f"weight {s['weight']:.4g}"))
        lines.append(_row(r["length"], "mixture (weighted)" if several else None, r, r.get("note", "")))
    return "\n".join(lines)


def _row(length: int, label: str | None, r: dict, note: str) -> str:
    source = f" {label} |" if label is not None else ""
    return f"| {length} |{source} {r['loss']:.4f} | {r['perplexity']:.2f} | {r['windows']} | {note} |"


def _labels(paths: list[str]) -> dict[str, str]:
    """Each source's folder name, or its whole path where two share a name."""
    names = [Path(p).name for p in paths]
    return {p: n if names.count(n) == 1 else p for p, n in zip(paths, names)}


def run_eval(args: argparse.Namespace) -> int:
    from tokembed.training.evaluation import evaluate

    rows = evaluate(
        args.checkpoint,  # the directory, not a loaded model: a phased mixture is weighed as at its last step
        lengths=args.lengths,
        data=args.data,
        batch_size=args.batch_size,
        max_windows=args.max_windows,
        max_tokens=args.max_tokens,
        rope_scaling=args.rope_scaling,
        evaluation="sliding" if args.sliding else "nonoverlapping",
        stride=args.stride,
        progress=not args.json and not args.quiet,  # a bar on a terminal, a line per length in a log
        device=args.device,
        allow_unverified=args.allow_unverified,
    )
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
    return 0


def run_experiment(args: argparse.Namespace) -> int:
    from tokembed.training.experiment import QUICK, PositionsExperiment, run_positions_experiment

    names: tuple[str, ...] = ("tokenizer", "train_length", "multiples", "steps", "batch_size", "lr", "dim")
    names += ("n_layers", "n_heads")
    names += ("seed", "eval_tokens", "sliding_stride", "threads", "device")
    options = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    if args.quick:
        options = {**QUICK, **options}
    if "multiples" in options:
        options["multiples"] = tuple(options["multiples"])
    if args.schemes is not None:
        options["schemes"] = tuple(args.schemes)
    options["positional_options"] = options_by_scheme(args)
    config = PositionsExperiment(data=args.data, out=str(args.out), **options)
    doc = run_positions_experiment(config, progress=_show_progress(args))
    from tokembed.training.experiment import format_table

    print(format_table(doc))
    written = ", ".join(str(Path(args.out) / n) for n in ("results.json", "positions.md", "positions.png"))
    print(f"\nwrote {written} in {doc['wall_seconds']:.0f} s")
    return 0


def _show_progress(args: argparse.Namespace) -> bool:
    # A bar only for a person at a terminal: logs and CI get the summary lines alone; none with --quiet.
    return not args.quiet and sys.stderr.isatty()
