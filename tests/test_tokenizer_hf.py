"""Hugging Face tokenizer.json files through the ``tokenizers`` library: one built here from GPT-2's own
vocab.bpe and encoder.json gives the ids of tiktoken's gpt2 (a second implementation)."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokembed
from tokembed.tokenizer import gpt2_files, tokenizer_identity


def _gpt2_tokenizer_json(path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab_bpe, encoder_json = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(encoder_json), str(vocab_bpe)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def hf_path(tmp_path_factory):
    return _gpt2_tokenizer_json(tmp_path_factory.mktemp("gpt2hf") / "tokenizer.json")


@pytest.fixture(scope="module")
def hf(hf_path):
    return tokembed.get_tokenizer(hf_path)


def test_same_ids_as_gpt2(hf, story, spec_texts):
    gpt2 = tokembed.get_tokenizer("gpt2")
    assert (hf.n_vocab, hf.eot_token) == (50257, 50256)
    for text in [story, *spec_texts, "x<|endoftext|>y  \n\n\t z"]:
        ids = hf.encode_ordinary(text)
        assert ids == gpt2.encode_ordinary(text)
        assert hf.decode(ids) == text
        assert hf.encode(text, allowed_special="all") == gpt2.encode(text, allowed_special="all")


@settings(max_examples=100)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=120))
def test_same_ids_as_gpt2_on_any_text(hf_path, text):
    hf = tokembed.get_tokenizer(hf_path)
    gpt2 = tokembed.get_tokenizer("gpt2")
    ids = hf.encode_ordinary(text)
    assert ids == gpt2.encode_ordinary(text)
    assert hf.decode_bytes(ids) == text.encode()
    assert [hf.decode_single_token_bytes(i) for i in ids] == [gpt2.decode_single_token_bytes(i) for i in ids]


def test_identity_is_the_files_hash(hf, hf_path):
    import hashlib

    ident = tokenizer_identity(hf)
    sha = hashlib.sha256(hf_path.read_bytes()).hexdigest()
    assert ident.hash == sha and dict(ident.files) == {"tokenizer.json": sha}
    assert ident.source == str(hf_path.resolve())
    assert ident.name == hf_path.parent.name  # a tokenizer.json is named by its folder
    assert tokembed.get_tokenizer(hf_path.parent).n_vocab == 50257  # the folder works too
    again = pickle.loads(pickle.dumps(hf))  # workers receive it
    assert again.encode_ordinary("hello world") == [31373, 995]


def test_a_wordlevel_model_is_refused(tmp_path):
    from tokenizers import Tokenizer, models

    path = tmp_path / "wl.json"
    Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).save(str(path))
    with pytest.raises(ValueError, match=r"wl.json holds a WordLevel model; tokembed reads BPE, WordPiece or Unigram"):
        tokembed.get_tokenizer(path)


def test_not_a_tokenizer_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match=r"config.json is not a Hugging Face tokenizer.json \(no 'model' entry\)"):
        tokembed.get_tokenizer(path)


def test_a_missing_end_of_text_asks_for_eot(tmp_path, hf_path):
    config = json.loads(hf_path.read_text())
    config["added_tokens"][0]["content"] = "<|sep|>"
    del config["model"]["vocab"]["<|endoftext|>"]  # GPT-2's encoder.json lists it too
    path = tmp_path / "noeot.json"
    path.write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"has none of the end-of-text tokens <\|endoftext\|>, .*pass --eot TOKEN .*<\|sep\|>"
    ):
        tokembed.get_tokenizer(path)
    assert tokembed.get_tokenizer(path, eot="<|sep|>").eot_token == 50256
    with pytest.raises(ValueError, match=r"has no token '<\|end\|>'; pass --eot"):
        tokembed.get_tokenizer(path, eot="<|end|>")


def test_a_wordpiece_tokenizer_with_an_eot_it_names(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "[SEP]": 1, "he": 2, "##llo": 3, "world": 4}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["[SEP]"])
    tok.save(str(tmp_path / "wp.json"))
    with pytest.raises(ValueError, match=r"has none of the end-of-text tokens .*pass --eot TOKEN .*\[SEP\]"):
        tokembed.get_tokenizer(tmp_path / "wp.json")
    wp = tokembed.get_tokenizer(tmp_path / "wp.json", eot="[SEP]")
    assert (wp.n_vocab, wp.eot_token) == (5, 1)
    assert wp.encode_ordinary("hello world") == [2, 3, 4]  # the WordPiece definition: longest match first
    assert wp.encode("hello[SEP]", allowed_special="all") == [2, 3, 1]
    assert wp.decode_single_token_bytes(3) == b"##llo"
