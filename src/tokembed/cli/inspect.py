"""`tokembed inspect`, `tokembed report`, `tokembed export`: look at an embedding table.

SOURCE is a `tokembed train` checkpoint directory, an exported .npy/.safetensors table, or GPT-2's
own weights (model.safetensors, pytorch_model.bin, the book's model.pth, or their folder).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokembed.cli import options

WORD_HELP = (
    "words are encoded exactly as written: GPT-2 has different tokens for 'king' (start of a text) and "
    "' king' (after a space, as in running text); --space puts a space before each word. "
    "A word of several tokens is the mean of its tokens' vectors."
)


def _table(args):
    """The table named by SOURCE, with --corpus counts when given, and --min-count."""
    from tokembed.inspection.counts import table_with_counts
    from tokembed.inspection.load import load_table

    table = load_table(args.source, tokenizer=args.tokenizer, allow_unverified=args.allow_unverified)
    return table_with_counts(table, corpus=getattr(args, "corpus", None), min_count=getattr(args, "min_count", None))


def _warn_queries(table, queries, *, quiet: bool = False) -> None:
    """On stderr: a warning for each query token read fewer than min_count times, or a note without counts."""
    if table.counts is None:
        if quiet:  # a note, not a warning: --quiet leaves it out
            return
        print(
            f"note: {table.source or 'this table'} records no token counts, so under-trained tokens are not marked "
            "(pass --corpus, or use a checkpoint written by this tokembed's train)",
            file=sys.stderr,
        )
        return
    for q in queries:
        ids = [q] if isinstance(q, int) else table.ids(q)
        for i in ids:
            if table.is_undertrained(i):
                print(
                    f"warning: {table.label(i)!r} (id {i}) was read {table.count(i):,} times "
                    f"(fewer than --min-count {table.min_count}): it is under-trained, and answers about it mean little",
                    file=sys.stderr,
                )


def _mark(item) -> str:
    """The count column of a neighbour or token row: '' without counts."""
    if item.count is None:
        return ""
    return f"  read {item.count:>9,}" + ("  under-trained" if item.undertrained else "")


def _words(args, words):
    if getattr(args, "ids", False):
        out = []
        for w in words:
            try:
                out.append(int(w))
            except ValueError:
                raise ValueError(f"--ids was given but {w!r} is not an integer token id") from None
        return out
    if getattr(args, "space", False):
        return [w if w.startswith(" ") else " " + w for w in words]
    return list(words)


def _show(label) -> str:
    return repr(label) if isinstance(label, str) else f"id {label}"


def _print_neighbours(title: str, neighbours, as_json: bool) -> None:
    if as_json:
        return
    print(title)
    for rank, n in enumerate(neighbours, 1):
        print(f"  {rank:3d}  {n.token!r:<24} id {n.id:>6}  {n.score:+.4f}{_mark(n)}")


def _cmd_neighbours(args) -> int:
    table = _table(args)
    result = {}
    words = _words(args, args.words)
    _warn_queries(table, words, quiet=args.quiet)
    for w, nb in zip(words, table.neighbours_many(words, topn=args.top)):
        ids = [w] if isinstance(w, int) else table.ids(w)
        what = f"{_show(w)} (token{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))})"
        _print_neighbours(f"nearest to {what}:", nb, args.json)
        result[str(w)] = [vars(n) for n in nb]
    if args.json:
        print(json.dumps(result, ensure_ascii=False, indent=1))
    return 0


def _cmd_analogy(args) -> int:
    table = _table(args)
    pos, neg = _words(args, args.positive), _words(args, args.negative)
    _warn_queries(table, pos + neg, quiet=args.quiet)
    nb = table.most_similar(positive=pos, negative=neg, topn=args.top)
    if args.json:
        print(json.dumps([vars(n) for n in nb], ensure_ascii=False, indent=1))
    else:
        title = "most similar to " + " + ".join(map(_show, pos)) + "".join(f" - {_show(w)}" for w in neg) + ":"
        _print_neighbours(title, nb, False)
    return 0


def _cmd_similarity(args) -> int:
    table = _table(args)
    a, b = _words(args, [args.a, args.b])
    _warn_queries(table, [a, b], quiet=args.quiet)
    s = table.similarity(a, b)
    print(
        json.dumps({"a": a, "b": b, "cosine": s}, ensure_ascii=False)
        if args.json
        else f"cosine({_show(a)}, {_show(b)}) = {s:+.4f}"
    )
    return 0


def _cmd_tokens(args) -> int:
    table = _table(args)
    rows = table.token_table(args.text)
    if args.json:
        print(json.dumps([vars(r) for r in rows], ensure_ascii=False, indent=1))
        return 0
    print(f"{'pos':>5}  {'id':>6}  {'norm':>8}  token")
    for r in rows:
        print(f"{r.position:5d}  {r.id:6d}  {r.norm:8.4f}  {r.token!r:<20}{_mark(r)}")
    if table.counts is None:
        _warn_queries(table, [], quiet=args.quiet)
    return 0


def _cmd_positions(args) -> int:
    from tokembed.cli.inspect_training import cmd_positions

    return cmd_positions(args, _table(args))


def _cmd_undertrained(args) -> int:
    from tokembed.cli.inspect_training import cmd_undertrained

    return cmd_undertrained(args, _table(args))


def _cmd_isotropy(args) -> int:
    from tokembed.cli.inspect_training import cmd_isotropy

    return cmd_isotropy(args, _table(args))


def _cmd_plot(args) -> int:
    from tokembed.inspection.plot import plot_table, save_figure

    table = _table(args)
    if args.kind in ("pca", "tsne") and table.counts is None:
        _warn_queries(table, [], quiet=args.quiet)  # the note: no counts, so under-trained tokens are not marked
    fig = plot_table(
        table, args.kind, run=args.source, n_points=args.points, label_top=args.labels, progress=_bars(args)
    )
    save_figure(fig, args.out, overwrite=args.overwrite)
    print(f"wrote {args.out}")
    return 0


def _cmd_info(args) -> int:
    info = _table(args).info()
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for k, v in info.items():
            print(f"{k:>12}: {v}")
    return 0


def _cmd_report(args) -> int:
    from tokembed.inspection.report import ReportConfig, write_report

    words = _words(args, args.words) if args.words else None
    config = ReportConfig(
        corpus=args.corpus,
        min_count=args.min_count,
        words=words,
        topn=args.top,
        n_points=args.points,
        label_top=args.labels,
        tsne=False if args.no_tsne else None,
    )
    out = write_report(
        args.source,
        args.out,
        config=config,
        overwrite=args.overwrite,
        progress=_bars(args),
        allow_unverified=args.allow_unverified,
    )
    print(f"wrote {out}")
    return 0


def _export_format(out: str, given: str | None) -> str:
    if given:
        return given
    suffix = Path(out).suffix.lower()
    by_suffix = {
        ".npy": "npy",
        ".safetensors": "safetensors",
        ".txt": "word2vec",
        ".vec": "word2vec",
        ".w2v": "word2vec",
        "": "projector",
    }
    if suffix not in by_suffix:
        raise ValueError(
            f"cannot tell the export format from {out!r}; pass --format (projector, word2vec, npy, safetensors)"
        )
    return by_suffix[suffix]


def _cmd_export_shards(args) -> int:
    """``tokembed export SHARDS --format megatron|nanogpt OUT``: token data for other trainers (no torch)."""
    import warnings

    from tokembed.shards.export import export_shards

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        result = export_shards(args.source, args.out, format=args.format, split=args.split, overwrite=args.overwrite)
    for w in caught:  # tokembed's warnings as the CLI words them; any other library's as Python shows it
        if w.category is UserWarning:
            print(f"tokembed export: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if args.format == "megatron":
        for split, r in result.get("splits", {"": result}).items():
            print(
                f"wrote {r['prefix']}.bin/.idx: {r['documents']:,} documents, {r['tokens']:,} tokens ({r['dtype']})"
                + (f" of the {split} split" if split else "")
            )
        return 0
    for split, f in result["files"].items():
        print(f"wrote {f['path']}: {f['tokens']:,} tokens of the {split} split")
    print(f"wrote {result['meta']} (vocab_size for nanoGPT's train.py)")
    if "val" not in result["files"]:
        print(f"note: no val.bin (--split {args.split}); nanoGPT's train.py reads one")
    return 0


def _cmd_export(args) -> int:
    options.merge_positional(args, "output", "out")
    if args.format in ("megatron", "nanogpt"):
        return _cmd_export_shards(args)
    from tokembed.inspection.export import export_table

    table = _table(args)
    fmt = _export_format(args.out, args.format)
    ids = None if args.top is None else table.most_frequent(args.top)  # by the table's counts, or --corpus
    if ids is not None and table.counts is None:
        print(
            f"note: {table.source} records no token counts, so --top keeps the first {len(ids)} ids, not the most "
            "frequent (pass --corpus)",
            file=sys.stderr,
        )
    written = export_table(
        table,
        args.out,
        format=fmt,
        ids=ids,
        which="positions" if args.positions else "tokens",
        overwrite=args.overwrite,
    )
    for p in written if isinstance(written, tuple) else (written,):
        print(f"wrote {p}")
    return 0


def _parents():
    common = argparse.ArgumentParser(
        add_help=False,
        parents=[
            options.tokenizer(
                "the tokenizer of a table that names none (.npy, GPT-2 weights; none: ids only)", default="gpt2"
            ),
            options.json_output("print JSON instead of a table"),
            options.counts(),
            options.quiet(),
            options.unverified(),
        ],
    )
    wordopts = argparse.ArgumentParser(add_help=False)
    wordopts.add_argument(
        "--space",
        action="store_true",
        help="put a space before each word (GPT-2's token for a word inside running text)",
    )
    wordopts.add_argument("--ids", action="store_true", help="the arguments are token ids, not words")
    return common, wordopts


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="neighbours, analogies, similarity, a text's tokens, positions, under-trained tokens, isotropy, pictures",
        description="Ask questions of an embedding table. SOURCE: a checkpoint directory, an exported .npy/.safetensors table, or GPT-2 weights. "
        + WORD_HELP,
    )
    p.add_argument("source", metavar="SOURCE", help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights")
    q = p.add_subparsers(dest="question", metavar="QUESTION", required=True)
    common, wordopts = _parents()
    _register_word_questions(q, common, wordopts)
    _register_table_questions(q, common)
    _register_report(subparsers)
    _register_export(subparsers)


def _register_word_questions(q, common, wordopts) -> None:
    s = q.add_parser(
        "neighbours",
        aliases=["nn"],
        parents=[common, wordopts, options.top("neighbours listed per word", default=10, old=["--topn"])],
        help="nearest tokens by cosine similarity",
        description=WORD_HELP,
    )
    s.add_argument("words", nargs="+", metavar="WORD", help="the words (or, with --ids, token ids) to look up")
    s.set_defaults(func=_cmd_neighbours)
    analogy_help = (
        "Rank tokens by cosine similarity to the mean of the unit vectors of the positive words "
        "minus the negative ones, inputs left out (gensim's most_similar). "
    )
    s = q.add_parser(
        "analogy",
        parents=[common, wordopts, options.top("tokens listed", default=10, old=["--topn"])],
        help="gensim's most_similar(positive, negative)",
        description=analogy_help + WORD_HELP,
    )
    s.add_argument("--positive", "-p", nargs="+", default=[], metavar="WORD", help="words added (king, woman)")
    s.add_argument("--negative", "-n", nargs="+", default=[], metavar="WORD", help="words subtracted (man)")
    s.set_defaults(func=_cmd_analogy)
    s = q.add_parser(
        "similarity", parents=[common, wordopts], help="cosine similarity of two words", description=WORD_HELP
    )
    s.add_argument("a", metavar="WORD_A", help="the first word (or token id, with --ids)")
    s.add_argument("b", metavar="WORD_B", help="the second word (or token id, with --ids)")
    s.set_defaults(func=_cmd_similarity)
    s = q.add_parser("tokens", parents=[common], help="the tokens of a text with ids, embedding norms and counts")
    s.add_argument("text", metavar="TEXT", help="the text to tokenize")
    s.set_defaults(func=_cmd_tokens)


def _register_table_questions(q, common) -> None:
    s = q.add_parser(
        "positions",
        parents=[common, options.top("positions (or distances) printed in full", default=16, old=["--show"])],
        help="what the positional scheme does: cosine between learned/sinusoidal positions; RoPE frequencies, "
        "ALiBi/T5 bias, Shaw vectors against distance",
    )
    s.set_defaults(func=_cmd_positions)
    s = q.add_parser(
        "undertrained",
        parents=[common, options.top("tokens printed (--json: all)", default=30, old=["--show"])],
        help="tokens read fewer than --min-count times, with Magikarp's indicators (Land & Bartolo 2024)",
    )
    s.set_defaults(func=_cmd_undertrained)
    s = q.add_parser(
        "isotropy",
        parents=[common],
        help="mean cosine, top principal components and IsoScore: all rows, trained rows, over the run",
    )
    s.set_defaults(func=_cmd_isotropy)
    s = q.add_parser("info", parents=[common], help="shape, tokenizer, positional scheme, norms, counts")
    s.set_defaults(func=_cmd_info)
    s = q.add_parser(
        "plot",
        parents=[
            common,
            options.out("the image file (.png, .svg, .pdf)", metavar="FILE", old=["--output"]),
            options.overwrite("an existing file", old=["--force"]),
        ],
        help="draw one picture to a file (needs the extra 'plot')",
    )
    s.add_argument("kind", choices=PLOT_KINDS, metavar="KIND", help="the picture: %(choices)s")
    s.add_argument("--points", type=int, default=2000, help="tokens placed in a projection (default 2000)")
    s.add_argument("--labels", type=int, default=40, help="tokens labelled in a projection (default 40)")
    s.set_defaults(func=_cmd_plot)


def _register_report(subparsers) -> None:
    from tokembed.inspection.report_config import ReportConfig  # torch-free: the defaults are the library's

    r = subparsers.add_parser(
        "report",
        help="one self-contained HTML page about an embedding table",
        description="Write an HTML page (pictures embedded, no network needed): projections, under-trained tokens, "
        "isotropy, positions, norms, loss curve, neighbour tables. Token counts: " + options.COUNTS_HELP + ".",
        parents=[
            options.out(
                "the HTML file to write", metavar="FILE", required=False, default="report.html", old=["--output"]
            ),
            options.overwrite("an existing file", old=["--force"]),
            options.tokenizer(
                "the tokenizer of a table that names none (.npy, GPT-2 weights; none: ids only)", default="gpt2"
            ),
            options.counts(),
            options.top("neighbours listed per word", default=ReportConfig.topn, old=["--topn"]),
            options.quiet(),
            options.unverified(),
        ],
    )
    r.add_argument("source", metavar="SOURCE", help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights")
    r.add_argument("--words", nargs="+", metavar="WORD", help="words whose neighbours are listed. " + WORD_HELP)
    r.add_argument("--space", action="store_true", help="put a space before each of --words")
    r.add_argument(
        "--points",
        type=int,
        default=ReportConfig.n_points,
        help="tokens placed in the projections (default %(default)s)",
    )
    r.add_argument(
        "--labels",
        type=int,
        default=ReportConfig.label_top,
        help="tokens labelled in the projections (default %(default)s)",
    )
    r.add_argument("--no-tsne", action="store_true", help="skip the t-SNE map (drawn when scikit-learn is installed)")
    r.set_defaults(func=_cmd_report)


PLOT_KINDS = ("pca", "tsne", "positions", "norms", "loss", "isotropy")  # inspection.plot.PICTURES (that imports torch)
EXPORT_FORMATS = ("projector", "word2vec", "npy", "safetensors", "megatron", "nanogpt")


def _register_export(subparsers) -> None:
    e = subparsers.add_parser(
        "export",
        help="write a table for TensorBoard's projector, word2vec tools, numpy or safetensors; "
        "or a shard folder for Megatron-LM or nanoGPT",
        parents=[
            options.out(
                "file to write; a folder for --format projector and nanogpt (train.bin, val.bin); "
                "a prefix for megatron (OUT.bin, OUT.idx)",
                required=False,  # the old positional OUT may give it instead (checked in _cmd_export)
            ),
            options.overwrite("existing files", old=["--force"]),
            options.tokenizer("the tokenizer of a table that names none", default="gpt2"),
            options.counts(min_count=False),
            options.top(
                "only the N most frequent tokens (by the table's counts, or --corpus; without counts the first N ids)",
                default=None,
            ),
            options.storage(),
            options.unverified(),
        ],
    )
    e.add_argument(
        "source",
        metavar="SOURCE",
        help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights; a shard folder for megatron/nanogpt",
    )
    e.add_argument("output", action=options.OldPositional, instead="--out", metavar="OUT")
    e.add_argument(
        "--format",
        "-f",
        choices=EXPORT_FORMATS,
        help="default: from OUT's suffix (.npy, .safetensors, .txt/.vec = word2vec, none = projector); "
        "megatron: Megatron-LM's indexed dataset of the train split; nanogpt: uint16 train.bin/val.bin",
    )
    e.add_argument("--positions", action="store_true", help="export the position vectors instead of the token vectors")
    e.add_argument(
        "--split",
        choices=["train", "val", "all"],
        help="the shard split(s) to export: megatron default train (all: OUT_train and OUT_val), "
        "nanogpt default all (train.bin and val.bin)",
    )
    e.set_defaults(func=_cmd_export)


def _bars(args) -> bool:
    """Progress bars for a person at a terminal; none in a pipe, a log, with --json or --quiet."""
    return not getattr(args, "json", False) and not getattr(args, "quiet", False) and sys.stderr.isatty()
