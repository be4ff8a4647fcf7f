"""`tokembed inspect`, `tokembed report`, `tokembed export`: look at an embedding table.

SOURCE is a `tokembed train` checkpoint directory, an exported .npy/.safetensors table, or GPT-2's
own weights (model.safetensors, pytorch_model.bin, the book's model.pth, or their folder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

WORD_HELP = (
    "words are encoded exactly as written: GPT-2 has different tokens for 'king' (start of a text) and "
    "' king' (after a space, as in running text); --space puts a space before each word. "
    "A word of several tokens is the mean of its tokens' vectors."
)


def _table(args):
    from tokembed.inspection.load import load_table

    return load_table(args.source, tokenizer=args.tokenizer)


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
        print(f"  {rank:3d}  {n.token!r:<24} id {n.id:>6}  {n.score:+.4f}")


def _cmd_neighbours(args) -> int:
    table = _table(args)
    result = {}
    words = _words(args, args.words)
    for w, nb in zip(words, table.neighbours_many(words, topn=args.topn)):
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
    nb = table.most_similar(positive=pos, negative=neg, topn=args.topn)
    if args.json:
        print(json.dumps([vars(n) for n in nb], ensure_ascii=False, indent=1))
    else:
        title = "most similar to " + " + ".join(map(_show, pos)) + "".join(f" - {_show(w)}" for w in neg) + ":"
        _print_neighbours(title, nb, False)
    return 0


def _cmd_similarity(args) -> int:
    table = _table(args)
    a, b = _words(args, [args.a, args.b])
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
        print(f"{r.position:5d}  {r.id:6d}  {r.norm:8.4f}  {r.token!r}")
    return 0


def _cmd_positions(args) -> int:
    table = _table(args)
    sim = table.position_similarity()  # (P,P)
    dist = table.position_step_distance()  # (P,)
    P = sim.shape[0]
    offsets = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if k < P]
    mean_sim = {k: float(sim.diagonal(k).mean()) for k in offsets}
    if args.json:
        print(
            json.dumps(
                {
                    "positional": table.positional,
                    "positions": P,
                    "mean_cosine_by_offset": mean_sim,
                    "step_distance": dist.tolist(),
                },
                indent=1,
            )
        )
        return 0
    print(f"{table.positional} positions: {P} x {table.dim}")
    print("mean cosine similarity between positions k apart:")
    for k, v in mean_sim.items():
        print(f"  k={k:<4d} {v:+.4f}")
    show = list(range(min(P, args.show)))
    print("distance of each position's vector to its neighbours (mean of p-1, p+1):")
    for p in show:
        print(f"  {p:5d}  {float(dist[p]):.4f}")
    if len(show) < P:
        print(f"  ... ({P - len(show)} more; --show N or --json for all)")
    return 0


def _cmd_plot(args) -> int:
    from tokembed._plot import plot_loss, save_figure
    from tokembed.inspection import plot

    table = _table(args)
    counts = None
    if args.corpus is not None:
        from tokembed.inspection.counts import token_counts

        counts = token_counts(args.corpus, tokenizer=table.tokenizer, vocab_size=table.vocab_size, progress=_bars(args))
    if args.kind in ("pca", "tsne"):
        fig = plot.plot_projection(
            table,
            counts=counts,
            method=args.kind,
            n_points=args.points,
            label_top=args.labels,
            progress=_bars(args),
        )
    elif args.kind == "positions":
        fig = plot.plot_position_similarity(table)
    elif args.kind == "norms":
        if counts is None:
            raise ValueError(
                "the norms plot needs token frequencies: pass --corpus FILE (the text the table was trained on)"
            )
        fig = plot.plot_norm_vs_frequency(table, counts)
    else:  # loss
        log_file = Path(args.source) / "log.json"
        if not log_file.is_file():
            raise FileNotFoundError(
                f"{log_file} does not exist: the loss plot needs a checkpoint directory written by `tokembed train`"
            )
        fig = plot_loss(json.loads(log_file.read_text(encoding="utf-8")))
    save_figure(fig, args.output, overwrite=args.force)
    print(f"wrote {args.output}")
    return 0


def _cmd_info(args) -> int:
    table = _table(args)
    info = {
        "source": table.source,
        "vocab_size": table.vocab_size,
        "dim": table.dim,
        "tokenizer": getattr(table.tokenizer, "name", None),
        "positional": table.positional,
        "positions": None if table.positions is None else table.positions.shape[0],
        "norm_mean": float(table.norms.mean()),
        "norm_min": float(table.norms.min()),
        "norm_max": float(table.norms.max()),
    }
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
        words=words,
        topn=args.topn,
        n_points=args.points,
        label_top=args.labels,
        tsne=False if args.no_tsne else None,
    )
    out = write_report(args.source, args.output, config=config, overwrite=args.force, progress=_bars(args))
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
    from tokembed.shards.export import export_shards

    result = export_shards(args.source, args.output, format=args.format, overwrite=args.force)
    if args.format == "megatron":
        print(
            f"wrote {result['prefix']}.bin/.idx: {result['documents']:,} documents, {result['tokens']:,} tokens ({result['dtype']})"
        )
        return 0
    for split, f in result["files"].items():
        print(f"wrote {f['path']}: {f['tokens']:,} tokens of the {split} split")
    if "val" not in result["files"]:
        print(
            f"note: {args.source} has no val split, so no val.bin (nanoGPT's train.py reads one); prepare with --val-fraction"
        )
    return 0


def _cmd_export(args) -> int:
    if args.format in ("megatron", "nanogpt"):
        return _cmd_export_shards(args)
    import torch

    from tokembed.inspection.counts import token_counts
    from tokembed.inspection.export import export_table

    table = _table(args)
    fmt = _export_format(args.output, args.format)
    ids = None
    if args.top is not None:
        if args.top < 1:
            raise ValueError(f"--top must be >= 1, got {args.top}")
        if args.corpus is not None:
            counts = token_counts(
                args.corpus, tokenizer=table.tokenizer, vocab_size=table.vocab_size, progress=_bars(args)
            )
            ids = torch.argsort(counts, descending=True, stable=True)[: args.top].tolist()
        else:
            ids = list(range(min(args.top, table.vocab_size)))
    written = export_table(
        table, args.output, format=fmt, ids=ids, which="positions" if args.positions else "tokens", overwrite=args.force
    )
    for p in written if isinstance(written, tuple) else (written,):
        print(f"wrote {p}")
    return 0


def register(subparsers) -> None:
    _add_inspect(subparsers)
    _add_report(subparsers)
    _add_export(subparsers)


def _parent_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """Options shared by the questions: (every question's, the word questions')."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--tokenizer",
        default="gpt2",
        help="tokenizer of tables that do not name one (.npy, GPT-2 weights): gpt2 (default), any `tokembed tokenizers` lists, a tokenizer file, or none (ids only)",
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    wordopts = argparse.ArgumentParser(add_help=False)
    wordopts.add_argument(
        "--space",
        action="store_true",
        help="put a space before each word (GPT-2's token for a word inside running text)",
    )
    wordopts.add_argument("--ids", action="store_true", help="the arguments are token ids, not words")
    return common, wordopts


def _add_inspect(subparsers) -> None:
    common, wordopts = _parent_parsers()
    p = subparsers.add_parser(
        "inspect",
        help="neighbours, analogies, similarity, a text's tokens, positions, pictures",
        description="Ask questions of an embedding table. SOURCE: a checkpoint directory, an exported .npy/.safetensors table, or GPT-2 weights. "
        + WORD_HELP,
    )
    p.add_argument("source", metavar="SOURCE", help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights")
    q = p.add_subparsers(dest="question", metavar="QUESTION", required=True)
    _add_word_questions(q, common, wordopts)
    _add_table_questions(q, common)


def _add_word_questions(q, common, wordopts) -> None:
    s = q.add_parser(
        "neighbours",
        aliases=["nn"],
        parents=[common, wordopts],
        help="nearest tokens by cosine similarity",
        description=WORD_HELP,
    )
    s.add_argument("words", nargs="+", metavar="WORD")
    s.add_argument("--topn", type=int, default=10)
    s.set_defaults(func=_cmd_neighbours)

    analogy_help = (
        "Rank tokens by cosine similarity to the mean of the unit vectors of the positive words "
        "minus the negative ones, inputs left out (gensim's most_similar). "
    )
    s = q.add_parser(
        "analogy",
        parents=[common, wordopts],
        help="gensim's most_similar(positive, negative)",
        description=analogy_help + WORD_HELP,
    )
    s.add_argument("--positive", "-p", nargs="+", default=[], metavar="WORD")
    s.add_argument("--negative", "-n", nargs="+", default=[], metavar="WORD")
    s.add_argument("--topn", type=int, default=10)
    s.set_defaults(func=_cmd_analogy)

    s = q.add_parser(
        "similarity", parents=[common, wordopts], help="cosine similarity of two words", description=WORD_HELP
    )
    s.add_argument("a", metavar="WORD_A")
    s.add_argument("b", metavar="WORD_B")
    s.set_defaults(func=_cmd_similarity)


def _add_table_questions(q, common) -> None:
    s = q.add_parser("tokens", parents=[common], help="the tokens of a text with ids and embedding norms")
    s.add_argument("text", metavar="TEXT")
    s.set_defaults(func=_cmd_tokens)

    s = q.add_parser(
        "positions", parents=[common], help="cosine similarity between positions, distance to neighbouring positions"
    )
    s.add_argument("--show", type=int, default=16, help="positions whose distance is printed (default 16)")
    s.set_defaults(func=_cmd_positions)

    s = q.add_parser("info", parents=[common], help="shape, tokenizer, positional scheme, norms")
    s.set_defaults(func=_cmd_info)

    s = q.add_parser("plot", parents=[common], help="draw one picture to a file (needs the extra 'plot')")
    s.add_argument("kind", choices=["pca", "tsne", "positions", "norms", "loss"])
    s.add_argument("-o", "--output", required=True, help="the image file (.png, .svg, .pdf)")
    s.add_argument("--corpus", help="the text the table was trained on: token frequencies (labels, norms plot)")
    s.add_argument("--points", type=int, default=2000, help="tokens placed in a projection")
    s.add_argument("--labels", type=int, default=40, help="tokens labelled in a projection")
    s.add_argument("--force", action="store_true", help="replace an existing file")
    s.set_defaults(func=_cmd_plot)


def _add_report(subparsers) -> None:
    r = subparsers.add_parser(
        "report",
        help="one self-contained HTML page about an embedding table",
        description="Write an HTML page (pictures embedded, no network needed) with projections, positional heatmap, norms, loss curve and neighbour tables.",
    )
    r.add_argument("source", metavar="SOURCE", help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights")
    r.add_argument("-o", "--output", default="report.html", help="the HTML file to write (default report.html)")
    r.add_argument(
        "--corpus", help="the text the table was trained on (default: the checkpoint's training data, if it is text)"
    )
    r.add_argument("--words", nargs="+", metavar="WORD", help="words whose neighbours are listed. " + WORD_HELP)
    r.add_argument("--space", action="store_true", help="put a space before each of --words")
    r.add_argument("--topn", type=int, default=8)
    r.add_argument("--points", type=int, default=1500, help="tokens placed in the projections")
    r.add_argument("--labels", type=int, default=40, help="tokens labelled in the projections")
    r.add_argument("--no-tsne", action="store_true", help="skip the t-SNE map (drawn when scikit-learn is installed)")
    r.add_argument("--tokenizer", default="gpt2", help=argparse.SUPPRESS)
    r.add_argument("--force", action="store_true", help="replace an existing file")
    r.set_defaults(func=_cmd_report)


def _add_export(subparsers) -> None:
    e = subparsers.add_parser(
        "export",
        help="write a table for TensorBoard's projector, word2vec tools, numpy or safetensors; "
        "or a shard folder for Megatron-LM or nanoGPT",
    )
    e.add_argument(
        "source",
        metavar="SOURCE",
        help="checkpoint directory, .npy/.safetensors table, or GPT-2 weights; a shard folder for megatron/nanogpt",
    )
    e.add_argument(
        "output",
        metavar="OUT",
        help="file to write; a folder for --format projector and nanogpt (train.bin, val.bin); "
        "a prefix for megatron (OUT.bin, OUT.idx)",
    )
    e.add_argument(
        "--format",
        "-f",
        choices=["projector", "word2vec", "npy", "safetensors", "megatron", "nanogpt"],
        help="default: from OUT's suffix (.npy, .safetensors, .txt/.vec = word2vec, none = projector); "
        "megatron: Megatron-LM's indexed dataset of the train split; nanogpt: uint16 train.bin/val.bin",
    )
    e.add_argument("--top", type=int, help="only this many tokens: the most frequent in --corpus, else the first ids")
    e.add_argument("--corpus", help="text whose most frequent tokens --top keeps")
    e.add_argument("--positions", action="store_true", help="export the position vectors instead of the token vectors")
    e.add_argument("--tokenizer", default="gpt2", help="tokenizer of tables that do not name one")
    e.add_argument("--force", action="store_true", help="replace existing files")
    e.set_defaults(func=_cmd_export)


def _bars(args) -> bool:
    """Progress bars for a person at a terminal; none in a pipe, a log, or with --json."""
    import sys

    return not getattr(args, "json", False) and sys.stderr.isatty()
