"""The tokenizer interface and the ``bytes`` tokenizer, against their definitions: ids are the UTF-8 bytes,
256 ends a document, and every byte string round-trips."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

import tokembed
from tokembed.tokenizer import ByteTokenizer, Tokenizer, TokenizerIdentity, identity_from_manifest, tokenizer_identity


@pytest.fixture(scope="module")
def tok() -> ByteTokenizer:
    return tokembed.get_tokenizer("bytes")


def test_vocabulary_facts(tok):
    assert isinstance(tok, ByteTokenizer)
    assert (tok.name, tok.n_vocab, tok.eot_token) == ("bytes", 257, 256)
    assert [tok.decode_single_token_bytes(i) for i in range(256)] == [bytes([i]) for i in range(256)]
    assert tok.decode_single_token_bytes(256) == b"<|endoftext|>"
    assert "bytes" in tokembed.available_tokenizers()


def test_every_tokenizer_offers_the_interface(tok):
    assert isinstance(tok, Tokenizer)
    assert isinstance(tokembed.get_tokenizer("gpt2"), Tokenizer)  # tiktoken.Encoding as it is
    assert isinstance(tokembed.get_tokenizer("gpt2"), tiktoken.Encoding)


@given(st.binary(max_size=300))
def test_every_byte_string_round_trips(data):
    tok = ByteTokenizer()
    ids = tok.encode_bytes(data)
    assert ids == list(data)  # the definition: id = byte value
    assert tok.decode_bytes(ids) == data


@given(st.text(max_size=200))
def test_text_ids_are_its_utf8_bytes(text):
    tok = ByteTokenizer()
    ids = tok.encode_ordinary(text)
    expected = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")  # tiktoken's repair
    assert bytes(ids) == expected
    assert tok.decode(ids) == expected.decode("utf-8")


def test_end_of_text_is_256_only_when_allowed(tok):
    assert tok.encode("a<|endoftext|>b", allowed_special={"<|endoftext|>"}) == [97, 256, 98]
    assert tok.encode("a<|endoftext|>b", allowed_special="all") == [97, 256, 98]
    assert tok.encode("a<|endoftext|>b", disallowed_special=()) == list(b"a<|endoftext|>b")
    assert tok.encode_ordinary("<|endoftext|>") == list(b"<|endoftext|>")
    with pytest.raises(ValueError, match=r"special token '<\|endoftext\|>'.*allowed_special"):
        tok.encode("a<|endoftext|>b")
    assert tok.decode([104, 105, 256]) == "hi<|endoftext|>"


def test_encode_agrees_with_tiktoken_semantics_on_specials(tok):
    # The same calls on GPT-2's tiktoken encoding split the text at the same places.
    enc = tokembed.get_tokenizer("gpt2")
    text = "x<|endoftext|>y<|endoftext|>"
    ours = tok.encode(text, allowed_special="all")
    theirs = enc.encode(text, allowed_special="all")
    assert [i for i, t in enumerate(ours) if t == tok.eot_token] == [1, 3]
    assert [i for i, t in enumerate(theirs) if t == enc.eot_token] == [1, 3]


def test_ids_outside_the_vocabulary_are_refused(tok):
    with pytest.raises(ValueError, match=r"token id 257 is outside the bytes vocabulary \(ids 0..256\)"):
        tok.decode([1, 257])
    with pytest.raises(ValueError, match=r"token id -1 is outside"):
        tok.decode_single_token_bytes(-1)


def test_identity_travels_through_a_manifest_entry(tok):
    ident = tokenizer_identity(tok)
    assert (ident.name, ident.n_vocab, ident.eot_token, ident.source) == ("bytes", 257, 256, "bytes")
    assert len(ident.hash) == 64
    assert identity_from_manifest(ident.to_dict()) == ident
    assert ident.same_ids(identity_from_manifest(ident.to_dict()))
    assert not ident.same_ids(tokenizer_identity(tokembed.get_tokenizer("gpt2")))


def test_an_entry_without_the_new_fields_is_gpt2():
    gpt2 = tokenizer_identity(tokembed.get_tokenizer("gpt2"))
    old = {"name": "gpt2", "n_vocab": 50257, "eot_token": 50256, "hash": gpt2.hash}  # a manifest of an earlier version
    read = identity_from_manifest(old)
    assert read.same_ids(gpt2)
    assert read.source == "gpt2"
    assert identity_from_manifest(None).name == "gpt2"
    assert isinstance(read, TokenizerIdentity)


def test_gpt2_identity_names_its_checked_files():
    from tokembed.tokenizer import GPT2_ENCODER_JSON_SHA256, GPT2_VOCAB_BPE_SHA256, tokenizer_hash

    enc = tokembed.get_tokenizer("gpt2")
    ident = tokenizer_identity(enc)
    assert dict(ident.files) == {"vocab.bpe": GPT2_VOCAB_BPE_SHA256, "encoder.json": GPT2_ENCODER_JSON_SHA256}
    assert ident.hash == tokenizer_hash(enc)
    assert ident.describe().startswith("gpt2 (50,257 ids, end-of-text 50256, hash ")
