"""Bad tokenizer files and options are clear errors that name the file or value and the fix (issue 24, item 22):
malformed tokenizer.json files, an empty or damaged .tiktoken, a bad --pattern, and a lone surrogate through a
tokenizer.json (repaired to U+FFFD as tiktoken does, not a TypeError from the tokenizers library)."""

from __future__ import annotations

import base64
import json
import re

import pytest

import tokembed
from tokembed.cli import main


def _bpe_json(path, vocab: dict, merges: list, **extra):
    config = {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab, "merges": merges},
        **extra,
    }
    path.write_text(json.dumps(config))
    return path


def _small_tiktoken(path, n: int = 300):
    enc = tokembed.get_tokenizer("gpt2")
    lines = [base64.b64encode(enc.decode_single_token_bytes(i)) + b" " + str(i).encode() + b"\n" for i in range(n)]
    path.write_bytes(b"".join(lines))
    return path


def test_a_tokenizer_json_whose_model_is_a_string(tmp_path):
    path = tmp_path / "model_str.json"
    path.write_text(json.dumps({"model": "BPE"}))
    with pytest.raises(ValueError, match=r"model_str.json: its 'model' is 'BPE', not an object .*Tokenizer.save"):
        tokembed.get_tokenizer(path)


def test_a_tokenizer_json_whose_merges_name_unknown_tokens(tmp_path):
    path = _bpe_json(tmp_path / "unknown_merges.json", {"a": 0, "b": 1}, ["x y"])
    with pytest.raises(
        ValueError, match=r"unknown_merges.json cannot be read by the tokenizers library \(Token `x` out of vocabulary"
    ):
        tokembed.get_tokenizer(path)


def test_a_tokenizer_json_with_an_empty_vocabulary(tmp_path):
    path = _bpe_json(tmp_path / "empty_vocab.json", {}, [])
    with pytest.raises(ValueError, match=r"empty_vocab.json has an empty vocabulary \(no tokens\)"):
        tokembed.get_tokenizer(path)


def test_an_empty_tiktoken_file(tmp_path):
    path = tmp_path / "empty.tiktoken"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.tiktoken holds no ranks \(the file is empty\).*base64-token rank"):
        tokembed.get_tokenizer(path, pattern="gpt2")


def test_a_tiktoken_file_with_a_bad_line(tmp_path):
    path = _small_tiktoken(tmp_path / "bad.tiktoken")
    path.write_bytes(path.read_bytes() + b"not-a-rank-line\n")
    with pytest.raises(ValueError, match=r"bad.tiktoken: line 301 is not 'base64-token rank': b'not-a-rank-line'"):
        tokembed.get_tokenizer(path, pattern="gpt2")


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("(unclosed", r"Opening parenthesis without closing parenthesis"),
        (r"\p{Bogus}", r"Error compiling regex"),
        ("cl100k", r"did you mean 'cl100k_base'"),
        (r"\p{L}+", r"drops text"),
    ],
)
def test_a_bad_pattern_names_the_pattern_the_file_and_the_fix(tmp_path, pattern, why):
    path = _small_tiktoken(tmp_path / "small.tiktoken")
    with pytest.raises(ValueError, match=r"--pattern") as e:
        tokembed.get_tokenizer(path, pattern=pattern)
    message = str(e.value)
    assert f"--pattern {pattern!r}" in message and "small.tiktoken" in message
    assert "gpt2, r50k_base, p50k_base, cl100k_base, o200k_base" in message  # the names it could have been
    assert re.search(why, message), message


def test_bad_tokenizer_files_through_the_cli_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "s.txt").write_text("hello world\n")
    bad = tmp_path / "model_str.json"
    bad.write_text(json.dumps({"model": "BPE"}))
    assert main(["prepare", str(tmp_path / "s.txt"), "--out", str(tmp_path / "o"), "--tokenizer", str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert "model_str.json: its 'model' is 'BPE', not an object" in err and "Traceback" not in err
    small = _small_tiktoken(tmp_path / "small.tiktoken")
    argv = ["prepare", str(tmp_path / "s.txt"), "--out", str(tmp_path / "p"), "--tokenizer", str(small)]
    assert main([*argv, "--pattern", "(x"]) == 2
    assert "--pattern '(x'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "p").exists()  # refused before anything is written


def _byte_level_json(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world, the quick brown fox"] * 20, trainer)
    tok.save(str(path))
    return path


def test_a_lone_surrogate_through_a_tokenizer_json_is_repaired_like_tiktoken(tmp_path):
    tok = tokembed.get_tokenizer(_byte_level_json(tmp_path / "bl.json"))
    assert tok.encode_ordinary("a\ud800b") == tok.encode_ordinary("a\ufffdb")  # tiktoken's repair
    assert tok.encode("a\udfffb<|endoftext|>", allowed_special="all") == [
        *tok.encode_ordinary("a\ufffdb"),
        tok.eot_token,
    ]
    assert tokembed.get_tokenizer("gpt2").encode_ordinary("a\ud800b") == tokembed.get_tokenizer("gpt2").encode_ordinary(
        "a\ufffdb"
    )


def test_a_lone_surrogate_in_a_corpus_prepared_with_a_tokenizer_json(tmp_path):
    from tokembed.shards.reader import open_shards

    path = _byte_level_json(tmp_path / "bl.json")
    (tmp_path / "sur.jsonl").write_text('{"text": "a\\ud800b hello"}\n')
    assert (
        main(["prepare", str(tmp_path / "sur.jsonl"), "--out", str(tmp_path / "o"), "--tokenizer", str(path), "-q"])
        == 0
    )
    tok = tokembed.get_tokenizer(path)
    shards = open_shards(tmp_path / "o")
    assert shards.read(0, shards.n_tokens).tolist() == [*tok.encode_ordinary("a\ufffdb hello"), tok.eot_token]


# ------------------------------------------------------------------ advice on data of another tokenizer that works
@pytest.fixture(scope="module")
def bytes_run(tmp_path_factory, story):
    """A checkpoint trained on `bytes` shards, and a gpt2 shard folder of the same text."""
    root = tmp_path_factory.mktemp("advice")
    (root / "s.txt").write_text(story[:6000], encoding="utf-8")
    tokembed.prepare_corpus([root / "s.txt"], root / "bshards", tokenizer="bytes", workers=1, val_fraction=0.0)
    tokembed.prepare_corpus([root / "s.txt"], root / "gshards", workers=1)
    config = tokembed.TrainConfig(
        data=str(root / "bshards"), out=str(root / "run"), max_length=16, batch_size=2, max_steps=2, warmup_steps=1
    )
    tokembed.train(
        config,
        tokembed.GPTConfig(vocab_size=257, eot_token=256, context_length=16, dim=8, n_layers=1, n_heads=2),
        progress=False,
    )
    return root


def test_inspect_corpus_of_another_tokenizer_gives_advice_that_works(bytes_run, capsys):
    # The checkpoint's tokenizer is its own (--tokenizer is ignored for checkpoints): the advice is about the corpus.
    argv = ["inspect", str(bytes_run / "run"), "undertrained", "--corpus", str(bytes_run / "gshards")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "was prepared with gpt2" in err and "the table" in err and "bytes" in err
    assert "--tokenizer bytes" in err and "prepare" in err  # prepare the corpus with the table's tokenizer
    assert "use --tokenizer" not in err


def test_eval_on_data_of_another_tokenizer_gives_advice_that_works(bytes_run, capsys):
    assert main(["eval", str(bytes_run / "run"), "--data", str(bytes_run / "gshards"), "--lengths", "16"]) == 2
    err = capsys.readouterr().err
    assert "trained on ids of bytes" in err and "gshards" in err and "gpt2" in err
    assert "evaluate on data prepared with bytes" in err
    assert "--tokenizer bytes" in err and "tokembed prepare" in err  # eval has no --tokenizer: prepare's
    assert "resume" not in err and "train into a new --out" not in err and "use --tokenizer" not in err


def test_eval_on_a_text_file_tokenizes_it_with_the_checkpoints_tokenizer(bytes_run):
    from tokembed.training.evaluation import evaluate

    rows = evaluate(bytes_run / "run", lengths=[16], data=str(bytes_run / "s.txt"), max_windows=4)
    assert rows[0]["windows"] == 4 and rows[0]["loss"] > 0  # bytes ids, not GPT-2's (which this model cannot read)


def test_options_a_tokenizer_does_not_take_are_errors_not_ignored(tmp_path):
    with pytest.raises(
        ValueError, match=r"tokenizer 'gpt2' takes no option pattern='cl100k_base'; --pattern and --eot"
    ):
        tokembed.get_tokenizer("gpt2", pattern="cl100k_base")
    with pytest.raises(ValueError, match=r"tokenizer 'bytes' takes no option eot='</s>'"):
        tokembed.get_tokenizer("bytes", eot="</s>")
    path = _byte_level_json(tmp_path / "bl.json")
    with pytest.raises(ValueError, match=r"bl.json: a tokenizer.json holds its own split rules; drop --pattern gpt2"):
        tokembed.get_tokenizer(path, pattern="gpt2")
