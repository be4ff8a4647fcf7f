"""`tokembed prepare | check | stats | merge`: corpora on disk -> verified token shards.

The library is imported inside each command, so building the parser (every `tokembed ...` call) stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from tokembed.cli import options


def register(sub: argparse._SubParsersAction) -> None:
    _add_prepare(sub)
    _add_folder_commands(sub)


def _add_prepare(sub: argparse._SubParsersAction) -> None:
    from tokembed.shards.config import PrepareConfig  # torch-free: the defaults below are its
    from tokembed.shards.formats import formats, registered_codecs

    def default(name: str):
        return options.default_of(PrepareConfig, name)

    kinds = [f.title or f.name for f in formats(plugins=False)]
    codecs = " or ".join(c.suffix for c in registered_codecs(plugins=False))
    p = sub.add_parser(
        "prepare",
        help=f"tokenize {', '.join(kinds[:-1])} and {kinds[-1]} files (optionally {codecs}) into token shards",
        description="Tokenize a corpus into a shard folder: parallel, streaming, crash-safe (rerun the same command to resume).",
        parents=[
            options.out("the shard folder to create or resume", metavar="DIR"),
            options.overwrite("a shard folder made from other inputs or options"),
            options.tokenizer("the tokenizer to encode with", default=default("tokenizer")),
            options.quiet(),
            options.storage(),
        ],
    )
    p.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="files, folders (recursive), glob patterns, or - for standard input"
    )
    p.add_argument(
        "--field",
        default=default("field"),
        help=f"JSON Lines field or Parquet column holding the text (default: {default('field')})",
    )
    p.add_argument(
        "--format",
        type=_input_format,
        default="auto",
        metavar="FORMAT",
        help=_FormatsHelp("how to read stdin and files without a known suffix"),
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=default("val_fraction"),
        help=f"fraction of documents for the val split, by a hash of the text (default {default('val_fraction')})",
    )
    p.add_argument(
        "--shard-mb",
        type=float,
        default=default("shard_mb"),
        help=f"MB of input per shard/work unit (default {default('shard_mb')}; bounds memory)",
    )
    _tokenizer_args(p, backend=default("backend"))
    p.add_argument("--strict", action="store_true", help="fail on invalid UTF-8 instead of replacing it")
    p.add_argument(
        "--skip-bad-lines", action="store_true", help="skip (and count) JSON lines that are invalid or lack --field"
    )
    _add_engine_options(p)
    p.add_argument(
        "--repair",
        action="store_true",
        help="check every shard of a finished folder (sha256) and make the damaged units again, byte-identical "
        "(a plain rerun checks sizes only)",
    )
    p.set_defaults(func=run_prepare)


class _FormatsHelp(str):
    """``--format``'s help: the registered formats, plugins included, listed when help is printed (argparse
    fills a help string with ``%``), so building the parser does not depend on the plugins being loaded yet."""

    def __mod__(self, params: object) -> str:
        from tokembed.shards.formats import PLUGINS_ENV, formats

        listed = ", ".join(f"{f.name} ({f.summary})" for f in formats())
        return f"{self}: auto (by suffix, the default), {listed}; plugins add more ({PLUGINS_ENV}, docs/corpora.md)"


def _input_format(name: str) -> str:
    """``--format``: "auto" or a registered input format (plugins included)."""
    from tokembed.shards.sources import check_format_name

    if name == "auto":
        return name  # (also the default, which argparse passes through here: no plugins loaded for it)
    try:
        check_format_name(name)
    except (ValueError, ImportError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    from tokembed.shards.ray_start import RAY_START_SECONDS  # the standard library only

    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="tokenizing processes (default 0: one per CPU this process may use: its affinity and cgroup quota)",
    )
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        default="local",
        help="local processes, or Ray tasks (pip install 'tokembed[ray]')",
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (default: a local Ray)")
    p.add_argument(
        "--ray-start-timeout",
        type=float,
        default=RAY_START_SECONDS,
        metavar="SECONDS",
        help=f"give up (exit 2) when Ray has not started, or joined --ray-address, within this time "
        f"(default {RAY_START_SECONDS:g})",
    )
    p.add_argument("--rank", type=int, default=0, help="this machine's rank (with --world-size)")
    p.add_argument("--world-size", type=int, default=1, help="machines sharing the work; then run `tokembed merge DIR`")


def _add_folder_commands(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "check",
        help="verify a shard folder (structure, counts, checksums)",
        description="Verify a shard folder; exit 1 when damaged.",
        parents=[options.json_output(), options.storage()],
    )
    c.add_argument("dir", type=options.folder, metavar="DIR", help="the shard folder to verify (a path or a URL)")
    c.set_defaults(func=run_check)

    _register_stats(sub)

    m = sub.add_parser(
        "merge",
        help="finish a folder written by `prepare --rank R --world-size N` on several machines",
        parents=[options.quiet(), options.storage()],
    )
    m.add_argument("dir", type=Path, metavar="DIR", help="the shard folder every rank wrote into")
    m.set_defaults(func=run_merge)


def _register_stats(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "stats",
        help="documents, tokens, shards and the window plan of a shard folder (per input file with --per-file); "
        "or, with --source or --mixture, what a run reads of each source of a mixture, per phase",
        parents=[
            options.windows(defaults=True),
            options.json_output("print JSON (everything, per file included)"),
            options.storage(),
        ],
    )
    s.add_argument(
        "dir",
        type=options.folder,
        metavar="DIR",
        nargs="?",
        help="a shard folder, a path or a URL (or leave it out and give --source or --mixture)",
    )
    s.add_argument(
        "--source",
        action="append",
        metavar="PATH:WEIGHT",
        help="a source of a mixture and its relative weight; repeat for each (as `tokembed train --source`)",
    )
    s.add_argument(
        "--mixture",
        type=Path,
        metavar="FILE",
        help="a mixture whose weights change over training: a schedule of phases in a .toml or .json file "
        "(as `tokembed train --mixture`; see docs/loading.md)",
    )
    s.add_argument(
        "--steps",
        type=int,
        default=None,
        help="with --source or --mixture: the run's steps of batch-size x world-size windows (default: one "
        "nominal epoch, after the last phase starts)",
    )
    s.add_argument(
        "--world-size",
        type=int,
        default=1,
        help="ranks sharing each epoch: also print the batches per rank (tokembed.data.plan)",
    )
    s.add_argument("--per-file", action="store_true", help="also print one row per input file")
    options.add_packing(s, "also report the padding and the documents cut (a mixture: count its packed windows)")
    s.set_defaults(func=run_stats)


def _tokenizer_args(p: argparse.ArgumentParser, *, backend: str) -> None:
    """The options of a tokenizer file, and who encodes (--tokenizer itself comes from `options.tokenizer`)."""
    from tokembed.shards.config import BACKENDS

    p.add_argument("--pattern", help="split regex of a .tiktoken file, or the encoding whose pattern it uses")
    p.add_argument("--eot", help="end-of-text token of a tokenizer.json that has none of the usual ones")
    p.add_argument(
        "--tokenize-backend",
        choices=BACKENDS,
        default=backend,
        help=f"who encodes (default {backend}; auto: gigatoken when installed (pip install 'tokembed[fast]') and "
        "exact for the tokenizer, else tiktoken); the shards are identical either way",
    )


def run_prepare(args: argparse.Namespace) -> int:
    from tokembed.shards.config import PrepareConfig
    from tokembed.shards.prepare import prepare_corpus

    config = PrepareConfig(
        tokenizer=args.tokenizer,
        pattern=args.pattern,
        eot=args.eot,
        backend=args.tokenize_backend,
        field=args.field,
        format=args.format,
        val_fraction=args.val_fraction,
        shard_mb=args.shard_mb,
        strict=args.strict,
        skip_bad_lines=args.skip_bad_lines,
    )
    try:
        with warnings.catch_warnings(record=True) as caught:  # said once, plainly, even with --quiet
            warnings.simplefilter("always", UserWarning)
            result = prepare_corpus(
                args.inputs,
                args.out,
                config=config,
                workers=args.workers,
                engine=args.engine,
                ray_address=args.ray_address,
                ray_start_timeout=args.ray_start_timeout,
                rank=args.rank,
                world_size=args.world_size,
                overwrite=args.overwrite,
                repair=args.repair,
                progress=False if args.quiet else None,
            )
    except ImportError as e:  # an optional extra that is not installed (Ray)
        print(f"tokembed prepare: error: {e}", file=sys.stderr)
        return 2
    for w in caught:
        print(f"tokembed prepare: warning: {w.message}", file=sys.stderr)
    if args.quiet:
        return 0
    print(result.summary(), file=sys.stderr)
    if result.manifest is None and not result.already_done:
        print(
            f"rank {args.rank} of {args.world_size} done; when every rank is done run `tokembed merge {args.out}`",
            file=sys.stderr,
        )
    return 0


def run_check(args: argparse.Namespace) -> int:
    from tokembed.shards.check import check_report

    report = check_report(args.dir)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    elif not report.ok:
        for line in report.problems:
            print(f"DAMAGED: {line}")
        print(f"{report.folder}: {len(report.problems)} problem(s)", file=sys.stderr)
    else:
        sizes = ", ".join(f"{k}: {v['shards']} shards, {v['tokens']:,} tokens" for k, v in report.splits.items())
        print(f"{report.folder}: OK ({sizes})")
    if report.sealed is False:
        print(
            f"note: {report.folder}/manifest.json has no manifest_sha256 (an older tokembed wrote it): its content was "
            "checked against the schema, but an edit that leaves it well formed cannot be detected; "
            "`tokembed prepare ... --overwrite` writes it anew with one",
            file=sys.stderr,
        )
    return 0 if report.ok else 1  # the same exit status with --json: 1 when damaged


def run_mixture_stats(args: argparse.Namespace) -> int:
    from tokembed.data.mixture import Mixture, parse_source
    from tokembed.data.phases import load_schedule
    from tokembed.data.stats import mixture_stats

    mixture = load_schedule(args.mixture) if args.mixture else Mixture([parse_source(s) for s in args.source])
    g = args.batch_size * args.world_size
    st = mixture_stats(
        mixture,
        steps=args.steps,
        global_batch_size=g,
        max_length=args.max_length,
        stride=args.stride,
        packing=args.packing,
    )
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(
        f"{st['steps']:,} steps of {g} windows (batch-size {args.batch_size} x world-size {args.world_size}): "
        f"{st['windows_read']:,} windows of {st['max_length']} tokens"
    )
    print(f"{'source':<40}{'weight':>10}{'tokens':>15}{'windows':>13}{'read':>13}{'epochs':>10}  runs out at step")
    for r in st["sources"]:
        weight = f"{r['weight']:>10.6g}" if r["weight"] is not None else f"{'phased':>10}"
        epochs = f"{r['epochs']:.3f}" if r["epochs"] is not None else "-"
        print(
            f"{_short(r['path']):<40}{weight}{r['tokens']:>15,}{r['windows']:>13,}{r['windows_read']:>13,}{epochs:>10}"
            f"  {_runs_out(r['runs_out'], r['epochs_completed'])}"
        )
    if len(st["phases"]) > 1:
        for ph in st["phases"]:
            print("", *_phase_lines(ph, g), sep="\n")
    return 0


def _short(path: str) -> str:
    return path if len(path) <= 39 else "..." + path[-36:]


def _runs_out(events: list[dict], total: int | None = None, shown: int = 3) -> str:
    """``12 (restarts 13), 25, ...``: the steps where a source read the last window of an epoch."""
    if not events:
        return "-"
    parts = []
    for e in events[:shown]:
        again = e["restarts_at_step"]
        parts.append(
            f"{e['step']:,}"
            + ("" if again == e["step"] else " (no restart)" if again is None else f" (restarts {again:,})")
        )
    total = len(events) if total is None else total
    return ", ".join(parts) + (f", ... ({total:,} in all)" if total > shown else "")


def _phase_lines(ph: dict, g: int) -> list[str]:
    name = f" {ph['name']!r}" if ph["name"] else ""
    where = f"step {ph['first_step']:,}" + (f" + {ph['first_window'] % g} windows" if ph["mid_step"] else "")
    lines = [
        f"phase {ph['number']}{name}: from token {ph['start']:,} = window {ph['first_window']:,} = {where}; "
        f"{ph['windows_read']:,} windows in the run",
        f"{'  source':<40}{'weight':>10}{'read':>13}{'tokens read':>16}{'epochs':>17}  runs out at step",
    ]
    for r in ph["sources"]:
        span = f"{r['epochs_from']:.3f}-{r['epochs_to']:.3f}" if r["epochs_to"] is not None else "-"
        lines.append(
            f"  {_short(r['path']):<38}{r['weight']:>10.6g}{r['windows_read']:>13,}{r['tokens_read']:>16,}{span:>17}"
            f"  {_runs_out(r['runs_out'])}"
        )
    return lines


def run_stats(args: argparse.Namespace) -> int:
    from tokembed.data.plan import add_rank_plans
    from tokembed.data.stats import shard_stats

    if [args.dir is not None, bool(args.source), args.mixture is not None].count(True) != 1:
        raise ValueError(
            "give one of: a shard folder DIR, --source PATH:WEIGHT options (a mixture), or --mixture FILE (a schedule)"
        )
    if args.source or args.mixture:
        return run_mixture_stats(args)

    st = shard_stats(
        args.dir, max_length=args.max_length, stride=args.stride, batch_size=args.batch_size, packing=args.packing
    )
    add_rank_plans(st, world_size=args.world_size)  # per-rank batches: the arithmetic the loader follows
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    lines = _stats_summary(st)
    lines += ["", *_stats_per_file(st)] if args.per_file else ["(per input file: add --per-file)"]
    print("\n".join(lines))
    return 0


def _stats_summary(st: dict) -> list[str]:
    """Per split: documents, tokens, shards, windows and batches per rank; the plan they assume."""
    n_bytes = sum(f.get("bytes") or 0 for f in st["inputs"])
    what = f"{len(st['inputs'])} input files ({n_bytes:,} bytes)"
    if st.get("format") == "megatron":
        what = "a Megatron dataset (.bin/.idx)"
    lines = [
        f"{st['root']}: {what}, tokenizer {st['tokenizer'] or 'not recorded (read as GPT-2 ids)'}, dtype {st['dtype']}",
        f"{'split':<8}{'documents':>12}{'tokens':>15}{'shards':>8}{'windows':>13}{'batches/rank':>14}",
    ]
    for name, s in st["splits"].items():
        windows, per_rank = s["plan"]["windows"], s["rank_plan"]["batches"]
        lines.append(f"{name:<8}{s['documents']:>12,}{s['tokens']:>15,}{s['shards']:>8}{windows:>13,}{per_rank:>14,}")
    pl = next(iter(st["splits"].values()))["plan"]
    lines.append(
        f"plan: max_length={pl['max_length']}, stride={pl['stride']}, batch_size={pl['batch_size']}, drop_last={pl['drop_last']}"
    )
    for name, s in st["splits"].items():
        rp, pl = s["rank_plan"], s["plan"]
        lines.append(
            f"{name}: {rp['batches']:,} batches per rank x world_size={rp['world_size']} (last batch {rp['last_batch_size']} windows, "
            f"{rp['dropped_windows']:,} windows dropped, {rp['padded_windows']:,} padded per epoch; {pl['tail_tokens']:,} tail tokens)"
        )
        pk = s.get("packing")
        if pk:
            lines.append(
                f"{name} packed ({pk['packer']}): {pk['windows']:,} windows, {pk['padding_tokens']:,} padding tokens "
                f"({100 * pk['padding_share']:.2f}%), {pk['cut_documents']:,} documents longer than a window cut"
            )
    return lines


def _stats_per_file(st: dict) -> list[str]:
    """One row per input file: documents, tokens, tokens per character and byte, what was skipped or replaced."""
    lines = [
        f"{'input':<40}{'documents':>11}{'tokens':>14}{'tok/char':>9}{'tok/byte':>9}{'empty':>7}{'replaced':>9}{'bad lines':>10}"
    ]
    for f in st["inputs"]:
        path = f["path"] if len(f["path"]) <= 39 else "..." + f["path"][-36:]
        tpc = f"{f['tokens_per_char']:.3f}" if f["tokens_per_char"] is not None else "-"
        tpb = f"{f['tokens_per_byte']:.3f}" if f["tokens_per_byte"] is not None else "-"
        lines.append(
            f"{path:<40}{f['documents']:>11,}{f['tokens']:>14,}{tpc:>9}{tpb:>9}{f['empty']:>7,}{f['replaced']:>9,}{f['bad_lines']:>10,}"
        )
    return lines


def run_merge(args: argparse.Namespace) -> int:
    from tokembed.shards.prepare import merge_manifests

    manifest = merge_manifests(args.dir)
    if args.quiet:
        return 0
    sizes = ", ".join(
        f"{k}: {v['documents']:,} documents, {v['tokens']:,} tokens" for k, v in manifest["splits"].items()
    )
    print(f"{args.dir}: merged ({sizes})", file=sys.stderr)
    return 0
