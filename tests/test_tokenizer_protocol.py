"""A tokenizer written from `tokembed.Tokenizer`'s documentation alone (not from tiktoken), registered in this test
file, goes through every stage: prepare (one and two workers, a document cut into pieces), check, train, inspect
and report, from Python and from the command line (`main([...])`), and its record in the manifest and the
checkpoint rebuilds it. No edit under src/ is needed for it. The entry point group `tokembed.tokenizers` lets the
`tokembed` command find one without an import (a package installed into a folder on PYTHONPATH)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

import tokembed
from tokembed.cli import main

ENDOFTEXT = "<|endoftext|>"
ALPHABET = "".join(chr(c) for c in range(32, 127)) + "\n\t"


class CharTokenizer:
    """One id per character of ``alphabet``; any other character is ``<unk>``; ``<|endoftext|>`` ends a document."""

    def __init__(self, alphabet: str = ALPHABET):
        self.alphabet = alphabet
        self._ids = {c: i for i, c in enumerate(alphabet)}
        self.unk = len(alphabet)
        self.name = "chars"
        self.eot_token = len(alphabet) + 1
        self.n_vocab = len(alphabet) + 2
        self.special_tokens = {ENDOFTEXT: self.eot_token}
        self.document_cut = "whitespace"  # one id per character: a cut between characters keeps every id

    def encode_ordinary(self, text: str) -> list[int]:
        return [self._ids.get(c, self.unk) for c in text]

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | Collection[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        allowed = ENDOFTEXT in self.special_tokens if allowed_special == "all" else ENDOFTEXT in allowed_special
        disallowed = not allowed if disallowed_special == "all" else ENDOFTEXT in disallowed_special
        if disallowed and ENDOFTEXT in text:
            raise ValueError(f"text contains the special token {ENDOFTEXT!r}; pass allowed_special to encode it")
        if not allowed:
            return self.encode_ordinary(text)
        pieces = [self.encode_ordinary(p) for p in text.split(ENDOFTEXT)]
        return [i for k, p in enumerate(pieces) for i in ([self.eot_token] if k else []) + p]

    def decode_single_token_bytes(self, token: int) -> bytes:
        if not 0 <= token < self.n_vocab:
            raise ValueError(f"token id {token} is outside the chars vocabulary (0..{self.n_vocab - 1})")
        if token == self.eot_token:
            return ENDOFTEXT.encode()
        return "\ufffd".encode() if token == self.unk else self.alphabet[token].encode()

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.decode_single_token_bytes(int(t)) for t in tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors)

    def identity(self) -> tokembed.TokenizerIdentity:
        digest = hashlib.sha256(("chars\0" + self.alphabet).encode("utf-8", "surrogatepass")).hexdigest()
        return tokembed.TokenizerIdentity(name=self.name, n_vocab=self.n_vocab, eot_token=self.eot_token, hash=digest)


def build_chars(alphabet: str = ALPHABET) -> CharTokenizer:
    return CharTokenizer(alphabet)


@pytest.fixture
def chars():
    tokembed.register_tokenizer("chars", build_chars, description="one id per character (a test)")
    yield tokembed.get_tokenizer("chars")
    tokembed.tokenizer.unregister_tokenizer("chars")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, story):
    root = tmp_path_factory.mktemp("chars")
    docs = [
        "naïve café <|endoftext|> is text here",
        "short\tone\n",
        *[story[i : i + 3000] for i in range(0, 9000, 3000)],
    ]
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    (root / "story.txt").write_text(story, encoding="utf-8")
    return root, [*docs, story]


def _decoded(folder: Path) -> list[list[int]]:
    from tokembed.shards.reader import open_shards

    out = []
    for split in ("train", "val"):
        out += [d.tolist() for d in open_shards(folder, split=split).documents()]
    return sorted(out)


def test_it_is_a_tokenizer_and_its_name_is_listed(chars):
    assert isinstance(chars, tokembed.Tokenizer) and isinstance(chars, CharTokenizer)
    assert "chars" in tokembed.available_tokenizers()
    source = next(s for s in tokembed.tokenizer.tokenizer_sources() if s.name == "chars")
    assert source.where == f"{__name__}.build_chars" and source.problem is None
    ident = tokembed.tokenizer.tokenizer_identity(chars)
    assert (ident.name, ident.source, ident.n_vocab, ident.eot_token) == ("chars", "chars", 99, 98)
    assert tokembed.get_tokenizer("chars") is chars  # built once


@pytest.mark.parametrize("workers", [1, 2])
def test_prepare_writes_its_ids_and_check_passes(chars, corpus, tmp_path, workers):
    root, docs = corpus
    out = tmp_path / "shards"
    # 4 KB units: the 20 KB story is cut into pieces where its document_cut allows, and they join up exactly.
    tokembed.prepare_corpus(
        [root / "docs.jsonl", root / "story.txt"],
        out,
        tokenizer="chars",
        workers=workers,
        shard_mb=0.004,
        val_fraction=0.3,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"] == {**tokembed.tokenizer.tokenizer_identity(chars).to_dict(), "source": "chars"}
    assert manifest["dtype"] == "uint16"
    assert _decoded(out) == sorted(chars.encode_ordinary(d) for d in docs)  # an independent reference: per character
    assert len(manifest["splits"]["train"]["shards"]) + len(manifest["splits"]["val"]["shards"]) > 4
    assert tokembed.check_shards(out) == []
    assert tokembed.tokenizer.tokenizer_from_record(manifest["tokenizer"]) is chars


def test_train_inspect_and_report_in_python(chars, corpus, tmp_path):
    from tokembed.inspection.report import ReportConfig, write_report

    root, _ = corpus
    tokembed.prepare_corpus([root / "story.txt"], tmp_path / "shards", tokenizer="chars", workers=1)
    config = tokembed.TrainConfig(
        data=str(tmp_path / "shards"),
        out=str(tmp_path / "run"),
        max_length=16,
        batch_size=4,
        max_steps=3,
        warmup_steps=1,
    )
    tokembed.train(config, progress=False)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["tokenizer_record"]["source"] == "chars" and saved["model"]["vocab_size"] == 99
    table = tokembed.load_table(tmp_path / "run")
    assert table.tokenizer is chars and tuple(table.tokens.shape) == (99, tokembed.GPTConfig().dim)
    e = ALPHABET.index("e")
    assert table.ids("e") == [e] and table.label(e) == "e" and table.label(98) == ENDOFTEXT
    assert table.ids(ENDOFTEXT) == [98]
    assert len(table.neighbours("e", topn=5)) == 5
    assert table.count(e) > 0  # train counted the ids it read
    model, ckpt = tokembed.load_checkpoint(tmp_path / "run")
    assert tokembed.EmbeddingTable.from_model(model).tokenizer is chars  # the model knows its tokenizer
    page = write_report(tmp_path / "run", tmp_path / "r.html", config=ReportConfig(n_points=50, tsne=False))
    assert "chars" in page.read_text(encoding="utf-8")


def test_the_command_line_with_a_registered_tokenizer(chars, corpus, tmp_path, capsys):
    root, _ = corpus
    shards, run = tmp_path / "shards", tmp_path / "run"
    assert main(["prepare", str(root / "story.txt"), "--out", str(shards), "--tokenizer", "chars", "-q"]) == 0
    assert main(["check", str(shards)]) == 0
    capsys.readouterr()
    assert main(["tokenizers", "--json"]) == 0
    listed = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["chars"]["package"] == "registered in this process"
    small = ["--max-length", "16", "--batch-size", "4", "--steps", "3", "--dim", "16", "--layers", "1", "--heads", "2"]
    assert main(["train", str(shards), "--out", str(run), *small, "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(run), "neighbours", "e", "--json", "--topn", "3"]) == 0
    answer = json.loads(capsys.readouterr().out)["e"]
    assert len(answer) == 3 and all(r["token"] == ALPHABET[r["id"]] for r in answer)  # labelled by chars, not GPT-2
    assert main(["inspect", str(run), "tokens", "ab<|endoftext|>"]) == 0
    assert "<|endoftext|>" in capsys.readouterr().out
    assert main(["report", str(run), "-o", str(tmp_path / "r.html"), "--points", "50", "--no-tsne"]) == 0
    text_run = tmp_path / "text-run"  # a text file tokenized by the registered name
    assert (
        main(["train", str(root / "story.txt"), "--tokenizer", "chars", "--out", str(text_run), *small, "--quiet"]) == 0
    )
    assert json.loads((text_run / "config.json").read_text())["tokenizer_record"]["source"] == "chars"


def test_data_of_a_tokenizer_that_is_not_registered_says_how_to_register_it(chars, corpus, tmp_path):
    root, _ = corpus
    tokembed.prepare_corpus([root / "story.txt"], tmp_path / "shards", tokenizer="chars", workers=1)
    record = json.loads((tmp_path / "shards" / "manifest.json").read_text())["tokenizer"]
    tokembed.tokenizer.unregister_tokenizer("chars")
    with pytest.raises(ValueError, match=r"made with chars .*tokenizer 'chars' is not available.*register_tokenizer"):
        tokembed.tokenizer.tokenizer_from_record(record)


def test_options_are_recorded_and_rebuild_it(chars, tmp_path):
    abc = tokembed.get_tokenizer("chars", alphabet="abc ")
    assert abc.n_vocab == 6 and abc.encode_ordinary("cab d") == [2, 0, 1, 3, 4]
    ident = tokembed.tokenizer.tokenizer_identity(abc)
    assert ident.options == (("alphabet", "abc "),) and ident.source == "chars"
    assert tokembed.tokenizer.tokenizer_from_record(ident.to_dict()) is abc
    with pytest.raises(ValueError, match=r"tokenizer 'chars' takes no option size='3'"):
        tokembed.get_tokenizer("chars", size="3")


def test_registration_errors_name_the_fix(chars):
    with pytest.raises(ValueError, match=r"'chars' is already registered; pass replace=True"):
        tokembed.register_tokenizer("chars", build_chars)
    with pytest.raises(ValueError, match=r"'gpt2' is built into tokembed"):
        tokembed.register_tokenizer("gpt2", build_chars)
    with pytest.raises(ValueError, match=r"name 'my/tok' is not usable"):
        tokembed.register_tokenizer("my/tok", build_chars)
    with pytest.raises(ValueError, match=r"must be callable"):
        tokembed.register_tokenizer("x", "not a builder")


class HalfATokenizer:  # what the documentation listed before: tiktoken's core without identity and special tokens
    name, n_vocab, eot_token = "half", 10, 9

    def encode_ordinary(self, text):
        return [0] * len(text)


def test_an_object_that_lacks_members_is_refused_naming_them(tmp_path):
    tokembed.register_tokenizer("half", HalfATokenizer)
    try:
        with pytest.raises(TypeError, match=r"lacks special_tokens, encode, decode, decode_bytes, .*identity"):
            tokembed.get_tokenizer("half")
        (tmp_path / "t.txt").write_text("hello")
        with pytest.raises(TypeError, match=r"HalfATokenizer.*lacks special_tokens"):
            tokembed.prepare_corpus([tmp_path / "t.txt"], tmp_path / "o", tokenizer="half", workers=1)
        with pytest.raises(TypeError, match=r"lacks special_tokens"):
            tokembed.EmbeddingTable(np.zeros((10, 2), dtype=np.float32), HalfATokenizer())
        with pytest.raises(
            TypeError, match=r"prepare takes a tokenizer's name or file, got <.*CharTokenizer.*register"
        ):
            tokembed.prepare_corpus([tmp_path / "t.txt"], tmp_path / "o", tokenizer=CharTokenizer(), workers=1)
    finally:
        tokembed.tokenizer.unregister_tokenizer("half")


def test_a_plain_tiktoken_encoding_is_adapted_with_the_same_identity():
    import tiktoken

    ours = tokembed.get_tokenizer("gpt2")
    plain = tiktoken.Encoding(
        "gpt2", pat_str=ours.split_pattern, mergeable_ranks=ours.mergeable_ranks, special_tokens=ours.special_tokens
    )
    adapted = tokembed.get_tokenizer(plain)
    assert isinstance(adapted, tiktoken.Encoding) and isinstance(adapted, tokembed.Tokenizer)
    assert adapted.identity().hash == ours.identity().hash and adapted.special_tokens == {ENDOFTEXT: 50256}
    assert tokembed.get_tokenizer(plain) is adapted  # one view per encoding
    table = tokembed.EmbeddingTable(np.zeros((50257, 2), dtype=np.float32), plain)
    assert table.label(50256) == ENDOFTEXT and table.ids(" the") == [262]


def test_tiktoken_tokenizers_pickle_with_their_record(tmp_path):
    import pickle

    import tiktoken

    from tokembed.tokenizer.openai import PATTERNS

    path = tmp_path / "mine.tiktoken"
    enc = tokembed.get_tokenizer("gpt2")
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in list(enc.mergeable_ranks.items())[:400]))
    for tok in (enc, tokembed.get_tokenizer(path, pattern="gpt2")):
        again = pickle.loads(pickle.dumps(tok))
        assert isinstance(again, tiktoken.Encoding) and again.identity() == tok.identity()
        assert again.encode_ordinary("hello world") == tok.encode_ordinary("hello world")
    assert dict(tokembed.get_tokenizer(path, pattern="gpt2").identity().options) == {"pattern": "gpt2"}
    assert PATTERNS["gpt2"] == enc.split_pattern


PLUGIN = """
from test_tokenizer_protocol import CharTokenizer

def build():
    tok = CharTokenizer()
    tok.name = "chars-plugin"
    return tok
"""


@pytest.mark.slow
def test_an_installed_package_declares_one_the_command_finds_without_an_import(tmp_path, story):
    site = tmp_path / "site"
    (site / "chars_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "chars_plugin.py").write_text(PLUGIN)
    (site / "chars_plugin-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: chars-plugin\nVersion: 1.0\n"
    )
    (site / "chars_plugin-1.0.dist-info" / "entry_points.txt").write_text(
        "[tokembed.tokenizers]\nchars-plugin = chars_plugin:build\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(Path(__file__).parent)])}
    run = lambda *argv: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "tokembed", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    listed = run("tokenizers", "--json")
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["name"] == "chars-plugin")
    assert row["package"] == "chars-plugin 1.0" and row["where"] == "entry point chars_plugin:build"
    (tmp_path / "s.txt").write_text(story[:2000])
    done = run("prepare", str(tmp_path / "s.txt"), "--out", str(tmp_path / "o"), "--tokenizer", "chars-plugin", "-q")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["tokenizer"]["source"] == "chars-plugin" and manifest["tokenizer"]["n_vocab"] == 99
    checked = run("check", str(tmp_path / "o"))
    assert checked.returncode == 0, checked.stderr + checked.stdout


@pytest.mark.slow
def test_workers_started_by_spawn_register_it_again(chars, corpus, tmp_path, monkeypatch):
    root, docs = corpus
    tokembed.prepare_corpus([root / "docs.jsonl"], tmp_path / "fork", tokenizer="chars", workers=1, shard_mb=0.004)
    monkeypatch.setenv("TOKEMBED_START_METHOD", "spawn")  # macOS and Windows: nothing is inherited
    tokembed.prepare_corpus([root / "docs.jsonl"], tmp_path / "spawn", tokenizer="chars", workers=2, shard_mb=0.004)
    assert _decoded(tmp_path / "spawn") == _decoded(tmp_path / "fork")
    tokembed.register_tokenizer("chars", lambda: CharTokenizer(), replace=True)  # a lambda cannot travel
    with pytest.raises(ValueError, match=r"'chars' was registered with <function .*cannot be sent to worker processes"):
        tokembed.prepare_corpus([root / "docs.jsonl"], tmp_path / "lambda", tokenizer="chars", workers=2)


@pytest.mark.slow
def test_ray_tasks_register_it_again(chars, corpus, tmp_path):
    ray = pytest.importorskip("ray")
    root, _ = corpus
    tokembed.prepare_corpus([root / "docs.jsonl"], tmp_path / "local", tokenizer="chars", workers=1, shard_mb=0.004)
    here = {"env_vars": {"PYTHONPATH": str(Path(__file__).parent)}}  # Ray's workers import the builder's module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=here)
    try:
        tokembed.prepare_corpus(
            [root / "docs.jsonl"], tmp_path / "ray", tokenizer="chars", engine="ray", shard_mb=0.004
        )
    finally:
        ray.shutdown()
    assert _decoded(tmp_path / "ray") == _decoded(tmp_path / "local")


DOCS = Path(__file__).resolve().parents[1] / "docs" / "tokenizers.md"


def test_the_documented_example_runs_as_written(tmp_path, monkeypatch, story):
    text = DOCS.read_text(encoding="utf-8")
    code = text.split("A complete example", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "story.txt").write_text(story.lower()[:3000], encoding="utf-8")
    try:
        exec(compile(code, str(DOCS), "exec"), {})
        tok = tokembed.get_tokenizer("chars")
        manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
        assert manifest["tokenizer"]["source"] == "chars" and manifest["tokenizer"]["n_vocab"] == tok.n_vocab
        assert tokembed.tokenizer.tokenizer_identity(tokembed.get_tokenizer("chars", alphabet="abc ")).options == (
            ("alphabet", "abc "),
        )
    finally:
        tokembed.tokenizer.unregister_tokenizer("chars")


def test_the_documented_table_lists_every_built_in_tokenizer():
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    named = [line.split("`")[1] for line in rows]
    assert [n for n in named if n in tokembed.tokenizer.registry.BUILTIN] == list(tokembed.tokenizer.registry.BUILTIN)


def test_a_registered_name_works_wherever_a_tokenizer_is_taken(chars):
    from tokembed.data.windows import SlidingWindowDataset, encode_text

    assert encode_text("ab<|endoftext|>", "chars").tolist() == [*chars.encode_ordinary("ab"), chars.eot_token]
    windows = SlidingWindowDataset("abcdefgh", max_length=4, tokenizer="chars")
    assert windows.eot_token == chars.eot_token and windows[0][0].tolist() == chars.encode_ordinary("abcd")
    bytes_windows = SlidingWindowDataset("abcdefgh", max_length=4, tokenizer="bytes")
    assert bytes_windows.eot_token == 256  # a name, resolved: not GPT-2's 50256
