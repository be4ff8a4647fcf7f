"""`tokembed ...`: a thin layer over the library.

Each subcommand lives in its own module under ``tokembed.cli`` and defines
``register(subparsers)``, which adds its parser and sets ``func`` to a function
``(args) -> int`` that calls one library function. User errors (bad values, missing
files) are raised by the library as ValueError/TypeError/FileNotFoundError/... and
printed here as one line, with exit status 2 (set TOKEMBED_DEBUG=1 for the traceback).

Options that several commands share (``--out``, ``--overwrite``, ``--quiet``, ``--json``, ``--device``,
``--tokenizer``, ``--top``, ...) are defined once in ``tokembed.cli.options`` and given to a command as
argparse parents; a command adds only what is its own. tests/test_cli_vocabulary.py checks the whole vocabulary.

Every call builds the whole parser, so command modules import only argparse and the standard
library at top level and import the library inside ``func``: ``tokembed --version`` and
``tokembed check DIR`` never import torch (tests/test_cli_startup.py checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from tokembed.cli import options

# One module per command group; add yours here.
COMMAND_MODULES = [
    "tokembed.cli.demo",
    "tokembed.cli.inspect",
    "tokembed.cli.prepare",
    "tokembed.cli.tokenizers",
    "tokembed.cli.train",
]

# Errors that describe the user's input or environment: one line, no traceback (TOKEMBED_DEBUG=1 shows it).
# OSError covers missing files, folders in the way, permissions and a full disk; ImportError a missing extra.
USER_ERRORS = (ValueError, TypeError, OSError, ImportError)


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(prog="tokembed", description="Text -> BPE tokens -> windows -> batches -> embeddings.")
    from tokembed import __version__

    parser.add_argument("--version", action="version", version=f"tokembed {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # a path that is not UTF-8 is printed escaped, not an encoding error
        reconfigure = getattr(stream, "reconfigure", None)  # (a replaced stream may not have it)
        if reconfigure is not None:
            with contextlib.suppress(ValueError):
                reconfigure(errors="backslashreplace")
    try:
        parser = build_parser()  # loads the plugins (TOKEMBED_PLUGINS, entry points) that add schemes and options
    except ImportError as e:
        if os.environ.get("TOKEMBED_DEBUG"):
            raise
        print(f"tokembed: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed: `train` prints how to resume
    try:
        options.apply_storage(args)  # --cache-dir, --cache-bytes, --storage-option: the defaults of remote reads
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader that stopped early (`| head`) shows up here, not at exit
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say, and no one to hear it
        return 0
    except USER_ERRORS as e:
        if os.environ.get("TOKEMBED_DEBUG"):
            raise
        print(f"tokembed {args.command}: error: {options.secret_free(str(e), args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tokembed {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
