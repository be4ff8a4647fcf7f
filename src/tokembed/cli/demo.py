"""`tokembed demo`: the chapter end to end, printed for people or as JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tokembed.cli import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="walk the chapter: text -> tokens -> batch -> token + positional embeddings",
        description="Walk the chapter end to end on Python's own documentation topics (offline) or --text FILE.",
        parents=[
            options.tokenizer("the tokenizer to encode with (the chapter's is gpt2)"),
            options.json_output("print the facts as JSON"),
        ],
    )
    p.add_argument(
        "--text",
        type=Path,
        help="a UTF-8 text file (default: Python's documentation topics, shipped with every install)",
    )
    # The chapter's own numbers, not a config's: the demo reproduces what the chapter prints.
    p.add_argument("--batch-size", type=int, default=8, help="windows per batch (the chapter's 8)")
    p.add_argument("--max-length", type=int, default=4, help="tokens per window (the chapter's 4)")
    p.add_argument("--stride", type=int, default=None, help="step between windows (default: max-length)")
    p.add_argument("--dim", type=int, default=256, help="embedding width (the chapter's 256)")
    p.add_argument("--pattern", help="split regex of a .tiktoken file, or the encoding whose pattern it uses")
    p.add_argument("--eot", help="end-of-text token of a tokenizer.json that has none of the usual ones")
    p.set_defaults(func=run)


def _read_text(path: Path) -> str:
    if not path.exists():
        raise FileNotFoundError(f"--text {path}: no such file")
    if path.is_dir():
        raise IsADirectoryError(f"--text {path} is a folder; give one text file (for corpora use `tokembed prepare`)")
    return path.read_text(encoding="utf-8", errors="replace")


def run(args: argparse.Namespace) -> int:
    from tokembed.demo import chapter_walk  # imports torch: only this command pays for it
    from tokembed.tokenizer import get_tokenizer

    text = _read_text(args.text) if args.text else None
    tokenizer = get_tokenizer(args.tokenizer, pattern=args.pattern, eot=args.eot) if args.pattern or args.eot else None
    facts = chapter_walk(
        text,
        source=str(args.text) if args.text else None,
        batch_size=args.batch_size,
        max_length=args.max_length,
        stride=args.stride,
        dim=args.dim,
        tokenizer=tokenizer or args.tokenizer,
    )
    print(json.dumps(facts, indent=2) if args.json else format_facts(facts))
    return 0


def _row(values: list, width: int = 8) -> str:
    return "[" + ", ".join(f"{v:>{width}.4f}" if isinstance(v, float) else f"{v:>{width}}" for v in values) + "]"


def format_facts(f: dict) -> str:
    t, tx, ld, fb, st, sh, we = (
        f[k] for k in ("tokenizer", "text", "loader", "first_batch", "seed_table", "shapes", "worked_example")
    )
    lines = [
        "1. Tokenizer",
        f"   {t['name']} BPE, {t['n_vocab']:,} ids, {t['endoftext']['token']} = {t['endoftext']['id']}, built offline from",
        f"   {next(iter(t['files'].values()), 'built in')}",
        "",
        "2. Text",
        f"   {tx['source']}: {tx['characters']:,} characters -> {tx['tokens']:,} tokens",
        "",
        f"3. Sliding windows: max_length={ld['max_length']}, stride={ld['stride']} -> {ld['windows']:,} windows, "
        f"{ld['batches']:,} batches of {ld['batch_size']}",
        f"   {'first batch, inputs:':<35}targets (the inputs shifted by one):",
    ]
    for x, y in zip(fb["inputs"], fb["targets"]):
        lines.append(f"   {_row(x, 6)}   {_row(y, 6)}")
    lines.append(f"   first window as tokens: {fb['first_window_tokens']} -> predict {fb['first_target_tokens']}")
    lines += ["", f"4. Token embedding: torch.manual_seed({st['seed']}); TokenEmbedding(6, 3).weight ="]
    lines += [f"   {i}: {_row(r)}" for i, r in enumerate(st["weight"])]
    lines += [
        f"   lookup of token 3 -> {_row(st['token_3'])}",
        "",
        "5. Shapes",
        f"   token embeddings       {tuple(sh['token_embeddings'])}   (batch, max_length, dim)",
        f"   positional embeddings  {tuple(sh['positional_embeddings'])}        (max_length, dim)",
        f"   input embeddings       {tuple(sh['input_embeddings'])}   token + positional, broadcast over the batch",
        "",
        "6. The chapter's worked example: token + position = combined",
        f"   {_row(we['token'], 5)} + {_row(we['position'], 5)} = {_row(we['combined'], 5)}",
    ]
    return "\n".join(lines)
