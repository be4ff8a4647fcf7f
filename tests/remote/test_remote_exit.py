"""A script that takes a few batches from a remote loader and exits prints nothing at exit (review2).

The loader's generator is finalized while the interpreter shuts down; its prefetch pool must not print an
"Exception ignored ... Traceback" then (``next(iter(loader))`` is the first thing a user tries).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from remote_helpers import make_folder, upload

pytestmark = pytest.mark.slow


def test_leaving_a_remote_loader_half_read_exits_quietly(tmp_path, s3):
    local = tmp_path / "local"
    make_folder(local, n_tokens=20_000, n_shards=2, block_bytes=1024)
    url = s3.url("exit")
    upload(local, url)
    script = textwrap.dedent(f"""
        import tokembed
        loader = tokembed.create_dataloader({url!r}, batch_size=2, max_length=32, seed=1)
        it = iter(loader)
        x, y = next(it)
        print("batch", tuple(x.shape))
    """)
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent
    )
    assert run.returncode == 0, run.stderr
    assert "batch (2, 32)" in run.stdout
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
