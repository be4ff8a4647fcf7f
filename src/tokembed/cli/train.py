"""`tokembed train`, `tokembed eval` and `tokembed experiment positions`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

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
    )
    p.add_argument(
        "data",
        nargs="?",
        help="a shard folder (tokembed prepare) or a UTF-8 text file (its last 10%% of tokens is held out for validation); "
        "or leave it out and give --source or --mixture",
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
        "weights) in a .toml or .json file; with --resume, phases that have not started may change (see docs/loading.md)",
    )
    p.add_argument(
        "--out", required=True, type=Path, help="checkpoint directory (written atomically; --resume continues it)"
    )
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out exactly where it stopped")
    p.add_argument(
        "--tokenizer",
        help="tokenizer of a text file (default gpt2; `tokembed tokenizers` lists them); a shard folder uses its manifest's",
    )
    _add_model_options(p.add_argument_group("model (ignored with --resume: taken from the checkpoint)"))
    add_scheme_options(p)
    _add_training_options(
        p.add_argument_group("training (default: the checkpoint's values with --resume, else TrainConfig's)")
    )
    _add_device_options(p)
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (there is none when stderr is not a terminal)"
    )
    p.set_defaults(func=run_train)


def _add_model_options(m) -> None:
    m.add_argument(
        "--positional",
        choices=scheme_names(),
        metavar="SCHEME",
        help="positional scheme: %(choices)s (default learned)",
    )
    m.add_argument("--context-length", type=int, help="model context (default: --max-length)")
    m.add_argument("--dim", type=int, help="model width (default 64)")
    m.add_argument("--layers", type=int, dest="n_layers", help="transformer blocks (default 2)")
    m.add_argument("--heads", type=int, dest="n_heads", help="attention heads (default 4)")
    m.add_argument("--dropout", type=float, help="dropout (default 0)")
    m.add_argument("--no-tie", action="store_true", help="separate output head instead of the token table")
    m.add_argument(
        "--document-mask",
        action="store_true",
        default=None,
        help="keep packed documents apart: attend only within a document, positions restart after <|endoftext|>",
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
    t.add_argument(
        "--max-length", type=int, help="tokens per window (default 64, or --context-length when that is smaller)"
    )
    t.add_argument("--stride", type=int, help="step between windows (default: max-length)")
    t.add_argument("--batch-size", type=int)
    t.add_argument("--steps", type=int, dest="max_steps", help="optimizer steps in all (default 300)")
    t.add_argument("--lr", type=float, help="peak learning rate (default 3e-3)")
    t.add_argument("--warmup-steps", type=int)
    t.add_argument("--weight-decay", type=float)
    t.add_argument("--grad-clip", type=float)
    t.add_argument("--eval-interval", type=int)
    t.add_argument("--eval-batches", type=int)
    t.add_argument("--checkpoint-interval", type=int)
    t.add_argument(
        "--keep",
        type=int,
        dest="keep_checkpoints",
        metavar="N",
        help="keep the last N checkpoints: the latest in --out, the N-1 before it beside it as OUT.step-NNNNNNN (default 3)",
    )
    t.add_argument("--seed", type=int)
    t.add_argument(
        "--init-embeddings",
        help="a local GPT-2 weights file (model.safetensors, pytorch_model.bin, the book's model.pth) whose wte/wpe start the embeddings",
    )


def _add_eval(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser(
        "eval",
        help="validation loss and perplexity of a checkpoint at several lengths",
        description="Validation loss and perplexity at the training length and beyond.",
    )
    e.add_argument("checkpoint", type=Path)
    e.add_argument(
        "--lengths",
        type=_lengths,
        default=None,
        help="comma-separated window lengths (default: 1x,2x,4x,8x the training length)",
    )
    e.add_argument("--data", help="shard folder or text file (default: the checkpoint's training data)")
    e.add_argument("--batch-size", type=int, default=8)
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
    e.add_argument("--json", action="store_true", help="print JSON instead of a table")
    e.add_argument(
        "--sliding",
        action="store_true",
        help="a sliding window: each window scores only its last --stride tokens (default half), which see more context",
    )
    e.add_argument("--stride", type=int, help="the sliding window's stride (with --sliding)")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.set_defaults(func=run_eval)


def _add_experiment(sub: argparse._SubParsersAction) -> None:
    x = sub.add_parser("experiment", help="experiments", description="Experiments that train and compare models.")
    xs = x.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    pos = xs.add_parser(
        "positions",
        help="train short, test long: every positional scheme",
        description="Train the same small GPT once per positional scheme and evaluate it at 1x..16x the training "
        "length, on non-overlapping windows and with a sliding window. With --tokenizer bytes the defaults show "
        "the effect in about 10 minutes on a 2-core CPU.",
    )
    pos.add_argument("data", help="shard folder or text file")
    pos.add_argument(
        "--out", type=Path, required=True, help="folder for results.json, positions.md/.png and the checkpoints"
    )
    pos.add_argument(
        "--schemes",
        type=_names,
        default=None,
        help=f"comma-separated (default all: {','.join(scheme_names())})",
    )
    pos.add_argument("--tokenizer", help="tokenizer for a text file (default gpt2; bytes: 257 ids, fast)")
    pos.add_argument("--train-length", type=int, help="training window (default 32)")
    pos.add_argument(
        "--multiples", type=_lengths, help="evaluation lengths as multiples of the training length (default 1,2,4,8,16)"
    )
    pos.add_argument("--steps", type=int, help="optimizer steps per scheme (default 1000)")
    pos.add_argument("--batch-size", type=int, help="windows per step (default 32)")
    pos.add_argument("--lr", type=float, help="peak learning rate (default 3e-3)")
    pos.add_argument("--dim", type=int, help="model width (default 64)")
    pos.add_argument("--layers", type=int, dest="n_layers", help="default 2")
    pos.add_argument("--heads", type=int, dest="n_heads", help="default 4")
    pos.add_argument("--seed", type=int)
    pos.add_argument(
        "--eval-tokens", type=int, help="score about this many validation tokens per length (default 8192)"
    )
    pos.add_argument(
        "--sliding-stride", type=int, help="the sliding evaluation's stride (default: half of each length)"
    )
    pos.add_argument("--threads", type=int, help="torch threads (default 1: fastest for tiny models; 0: torch's)")
    pos.add_argument("--device", help="auto, cpu, cuda or mps (default auto)")
    pos.add_argument("--quick", action="store_true", help="a tiny run (seconds), as the tests use")
    pos.add_argument("--no-progress", action="store_true")
    add_scheme_options(pos)
    pos.set_defaults(func=run_experiment)


def _add_device_options(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group(
        "device (may change on --resume; under torchrun each rank trains on its part of each batch)"
    )
    d.add_argument(
        "--device",
        default="auto",
        metavar="DEVICE",
        help="auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:N or mps (default auto)",
    )
    d.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help="bf16: autocast to bfloat16 (default fp32)"
    )
    d.add_argument("--compile", action="store_true", help="compile the training step with torch.compile")


def _device_config(args: argparse.Namespace):
    from tokembed.training.device import DeviceConfig

    return DeviceConfig(device=args.device, precision=args.precision, compile=args.compile)


def _train_data(args: argparse.Namespace):
    """DATA, the `Mixture` of the --source PATH:WEIGHT options, or the `PhasedMixture` of --mixture FILE (one)."""
    if [args.data is not None, bool(args.source), args.mixture is not None].count(True) != 1:
        raise ValueError(
            "give the training data either as DATA, as --source PATH:WEIGHT options (repeated) or as --mixture FILE, "
            "exactly one of them"
        )
    if args.data is not None:
        return args.data
    if args.mixture is not None:
        from tokembed.data.phases import load_schedule

        return load_schedule(args.mixture)
    from tokembed.data.mixture import Mixture, parse_source

    return Mixture([parse_source(s) for s in args.source])


def run_train(args: argparse.Namespace) -> int:
    from tokembed.data.phases import schedule_decides
    from tokembed.model.checkpoint import read_checkpoint_config
    from tokembed.model.config import GPTConfig
    from tokembed.training.config import TrainConfig
    from tokembed.training.data import data_tokenizer
    from tokembed.training.loop import train

    train_fields = [f.name for f in fields(TrainConfig) if f.name not in ("data", "out")]
    given = {k: getattr(args, k) for k in train_fields if getattr(args, k, None) is not None}
    model_config = None
    data = _train_data(args)
    if args.resume:
        saved = read_checkpoint_config(args.out)
        base = {k: v for k, v in saved["train"].items() if k not in ("data", "out")}
        new, old = TrainConfig(data=data, out=str(args.out)).data, TrainConfig(data=saved["train"]["data"], out="").data
        if new != old and not schedule_decides(old, new):  # a schedule's changes are checked at the saved step
            raise ValueError(f"--resume: the checkpoint was trained on {saved['train']['data']}, not {data}")
        config = TrainConfig(data=new, out=str(args.out), **{**base, **given})  # a schedule may have grown
    else:
        if args.max_length is None and args.context_length is not None:
            # Windows as long as the model's context unless asked otherwise (never longer).
            given["max_length"] = min(args.context_length, TrainConfig.__dataclass_fields__["max_length"].default)
        config = TrainConfig(data=data, out=str(args.out), **given)
        names = ("positional", "dim", "n_layers", "n_heads", "dropout", "document_mask")
        model_args = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
        model_args["positional_options"] = scheme_options(args, args.positional or GPTConfig.positional)
        tok = data_tokenizer(config.data, tokenizer=config.tokenizer)  # the vocabulary comes from the data
        model_config = GPTConfig(
            context_length=args.context_length or config.max_length,
            tie_embeddings=not args.no_tie,
            vocab_size=tok.n_vocab,
            eot_token=tok.eot_token,
            **model_args,
        )
    result = train(config, model_config, resume=args.resume, progress=_show_progress(args), device=_device_config(args))
    if result.is_main:  # under torchrun: one summary line, from rank 0
        val = f", validation loss {result.val_loss:.4f}" if result.val_loss is not None else ""
        print(f"step {result.step}: train loss {result.train_loss:.4f}{val}; checkpoint {result.checkpoint}")
    return 0


def format_rows(rows: list[dict]) -> str:
    lines = ["| length | loss | perplexity | windows | note |", "|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["loss"] is None:
            lines.append(f"| {r['length']} | n/a | n/a | 0 | {r['note']} |")
        else:
            lines.append(
                f"| {r['length']} | {r['loss']:.4f} | {r['perplexity']:.2f} | {r['windows']} | {r.get('note', '')} |"
            )
    return "\n".join(lines)


def run_eval(args: argparse.Namespace) -> int:
    from tokembed.model.checkpoint import load_checkpoint
    from tokembed.training.evaluation import evaluate

    model, config = load_checkpoint(args.checkpoint)
    lengths = args.lengths
    if lengths is None:
        base = int(config.get("train", {}).get("max_length") or model.config.context_length)
        lengths = [base * m for m in (1, 2, 4, 8)]
    rows = evaluate(
        (model, config),
        lengths=lengths,
        data=args.data,
        batch_size=args.batch_size,
        max_windows=args.max_windows,
        max_tokens=args.max_tokens,
        rope_scaling=args.rope_scaling,
        evaluation="sliding" if args.sliding else "nonoverlapping",
        stride=args.stride,
        progress=not args.json and _show_progress(args),  # a bar on a terminal only, never under --json
    )
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
    return 0


def run_experiment(args: argparse.Namespace) -> int:
    from tokembed.training.experiment import QUICK, PositionsExperiment, run_positions_experiment

    names = ("tokenizer", "train_length", "multiples", "steps", "batch_size", "lr", "dim", "n_layers", "n_heads")
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
    written = ", ".join(str(args.out / n) for n in ("results.json", "positions.md", "positions.png"))
    print(f"\nwrote {written} in {doc['wall_seconds']:.0f} s")
    return 0


def _show_progress(args: argparse.Namespace) -> bool:
    # A bar only for a person at a terminal: logs and CI get the summary lines alone.
    return not args.no_progress and sys.stderr.isatty()
