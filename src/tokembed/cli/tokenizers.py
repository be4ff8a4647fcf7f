"""`tokembed tokenizers`: what `get_tokenizer` can build here, offline, and where each comes from."""

from __future__ import annotations

import argparse
import json

from tokembed.cli import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tokenizers",
        help="list the tokenizers available offline and the files each is built from",
        description="List the named tokenizers (built in, registered, and declared by installed packages in the "
        "entry point group tokembed.tokenizers), the package and files each is built from here, and what is "
        "missing. Any tokenizer.json (or its folder) and any .tiktoken file (with --pattern) work too.",
        parents=[options.json_output()],
    )
    p.add_argument("--check", action="store_true", help="also build each one (checks the files' sha256; seconds)")
    p.set_defaults(func=run)


def _built(name: str) -> dict:
    from tokembed.tokenizer import get_tokenizer, tokenizer_identity

    try:
        ident = tokenizer_identity(get_tokenizer(name))
    except (ValueError, OSError) as e:
        return {"problem": str(e)}
    return {"n_vocab": ident.n_vocab, "eot_token": ident.eot_token, "hash": ident.hash}


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from tokembed.tokenizer import tokenizer_sources

    rows = [asdict(s) for s in tokenizer_sources()]
    if args.check:
        for r in rows:
            if r["problem"] is None:
                r.update(_built(r["name"]))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        size = f"  {r['n_vocab']:,} ids, end-of-text {r['eot_token']}" if "n_vocab" in r else ""
        state = f"missing: {r['problem']}" if r.get("problem") else f"{r['package']}: {r['where']}"
        print(f"{r['name']:<12} {state}{size}")
    print("any tokenizer.json (Hugging Face) or .tiktoken file (with --pattern): pass its path as --tokenizer")
    print(
        "your own: tokembed.register_tokenizer(name, build), or an entry point in 'tokembed.tokenizers' "
        "(docs/tokenizers.md)"
    )
    return 0
