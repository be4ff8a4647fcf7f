"""Nothing opens a network connection, and `import tokembed` stays light."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import HEAVY, imported_modules

GUARD = textwrap.dedent(
    """
    import socket
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled by the test")
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", GUARD + textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )


def test_import_and_chapter_walk_open_no_connection(tmp_path):
    story = tmp_path / "story.txt"
    story.write_text("I HAD always thought Jack Gisburn rather a cheap genius. " * 20)
    out = _run(
        f"""
        import sys
        import tokembed
        from tokembed.demo import chapter_walk
        enc = tokembed.get_tokenizer("gpt2")
        assert enc.encode("hello world") == [31373, 995]
        facts = chapter_walk(open({str(story)!r}).read())
        assert facts["shapes"]["input_embeddings"] == [8, 4, 256]
        print("attempts", len(attempts))
        """
    )
    assert out.returncode == 0, out.stderr
    assert "attempts 0" in out.stdout


@pytest.mark.parametrize(
    "code, needs",
    [
        ("import tokembed", set()),
        # the torch-free stages: prepare, check, stats and the shard readers
        ("import tokembed.shards.prepare, tokembed.shards.reader, tokembed.shards.check, tokembed.data.stats", set()),
        # every `tokembed ...` call builds the whole parser: each command module imports the library in its func
        ("from tokembed.cli import build_parser; build_parser()", {"tokembed.cli.train"}),
    ],
    ids=["tokembed", "shards", "cli-parser"],
)
def test_import_is_light(tmp_path, code, needs):
    proc, modules = imported_modules(tmp_path, code)
    assert proc.returncode == 0, proc.stderr
    assert needs <= modules
    assert sorted(modules & set(HEAVY)) == []


@pytest.mark.slow  # a fresh interpreter imports every module, the trainer integrations too: ~4 s
def test_every_public_name_resolves_to_what_it_names():
    # The public names load lazily; a submodule named like a public function would shadow it.
    out = _run(
        """
        import importlib, pkgutil, tokembed
        for m in pkgutil.walk_packages(tokembed.__path__, "tokembed."):
            if m.name != "tokembed.__main__":  # that one runs the CLI
                importlib.import_module(m.name)
        import types
        bad = [n for n in tokembed.__all__ if isinstance(getattr(tokembed, n), types.ModuleType)]
        print("modules", bad, callable(tokembed.train), callable(tokembed.evaluate))
        """
    )
    assert out.returncode == 0, out.stderr
    assert "modules [] True True" in out.stdout


def test_every_tokenizer_and_the_fast_path_build_with_no_connection(tmp_path):
    # A tokenizer.json built from GPT-2's files, and each named tokenizer with prepare's fast encoder.
    out = _run(
        f"""
        import tokembed
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from tokembed.tokenizer import gpt2_files
        from tokembed.tokenizer.fast import TokenEncoder
        vocab_bpe, encoder_json = gpt2_files()
        hf = Tokenizer(models.BPE.from_file(str(encoder_json), str(vocab_bpe)))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.save({str(tmp_path / "tokenizer.json")!r})
        names = tokembed.available_tokenizers() + [{str(tmp_path)!r}]
        for name in names:
            enc = tokembed.get_tokenizer(name, eot="<|endoftext|>" if name == {str(tmp_path)!r} else None)
            TokenEncoder(enc).encode_ordinary("hello world")
        print("built", len(names), "attempts", len(attempts))
        """
    )
    assert out.returncode == 0, out.stderr
    assert "built 7 attempts 0" in out.stdout
