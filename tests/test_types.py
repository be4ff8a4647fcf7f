"""The type checker's place in the project (issue 20 item 5).

`make lint` (run before the tests, on CI too) type-checks src/ with mypy, configured in pyproject.toml. These
tests check that arrangement from the files (the Makefile's lint recipe, the config, the public names' imports
for type checkers), that every parameter taking a tokenizer or a source is annotated, and, with mypy itself,
that a user's code sees tokembed's types: a tokenizer written to `tokembed.Tokenizer`'s documentation checks as
one, a class missing a member of the protocol is an error naming it, and a wrong source is an error.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap

import pytest
import tomllib

from conftest import ROOT

SRC = ROOT / "src" / "tokembed"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
MYPY = PYPROJECT["tool"]["mypy"]


def _recipe(target: str) -> list[str]:
    """The command lines of a Makefile target."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_make_lint_runs_mypy_over_src_and_the_tests_run_after_lint():
    assert "$(BIN)/mypy" in _recipe("lint"), "make lint must run mypy"
    for target in ("test", "test-fast"):
        prerequisites = next(
            line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(f"{target}:")
        )
        assert "lint" in prerequisites.split(":", 1)[1].split(), f"make {target} must run lint first"
    # `mypy` without arguments checks what the config names: the package under src/.
    assert MYPY["packages"] == ["tokembed"] and MYPY["mypy_path"] == "src"
    assert MYPY["check_untyped_defs"] and MYPY["warn_unused_ignores"] and MYPY["no_implicit_reexport"]
    assert any(re.match(r"mypy\b", d) for d in PYPROJECT["project"]["optional-dependencies"]["dev"])


def _imported_packages() -> set[str]:
    """The top-level packages src/ imports (anywhere: functions and TYPE_CHECKING blocks too)."""
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_untyped_third_party_packages_are_named_one_by_one():
    """No blanket ignore_missing_imports: each package without type information is named, and src/ imports it
    (a name that matches nothing would hide a typo, or outlive the import it was for)."""
    assert "ignore_missing_imports" not in MYPY
    named = {m.split(".")[0] for o in MYPY["overrides"] if o.get("ignore_missing_imports") for m in o["module"]}
    assert named, "the overrides name the untyped packages"
    imported = _imported_packages()
    for module in sorted(named):
        assert module != "tokembed", "tokembed's own modules are always checked"
        assert module in imported, f"{module} is named in [tool.mypy] but src/ does not import it"


def test_the_extension_points_are_fully_annotated():
    strict = [o for o in MYPY["overrides"] if o.get("disallow_untyped_defs")]
    modules = {m for o in strict for m in o["module"]}
    assert {"tokembed.tokenizer.*", "tokembed.embeddings.*", "tokembed.shards.formats.*"} <= modules


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_every_tokenizer_and_source_parameter_is_annotated():
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            a = fn.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg in {"tokenizer", "source", "sources"} and arg.annotation is None:
                    missing.append(f"{path.relative_to(SRC)}:{fn.lineno} {fn.name}({arg.arg})")
    assert not missing, "parameters without a type:\n" + "\n".join(missing)


LAZY = sorted(
    ".".join(p.relative_to(SRC.parent).parent.parts)
    for p in SRC.rglob("__init__.py")
    if "lazy_attributes(" in p.read_text(encoding="utf-8")
)


def test_the_lazy_packages_are_found():
    assert {"tokembed", "tokembed.embeddings"} <= set(LAZY)


@pytest.mark.parametrize("package", LAZY)
def test_type_checkers_see_every_lazy_public_name(package):
    """A lazy package (PEP 562) hides its names from type checkers; its ``if TYPE_CHECKING:`` block imports
    each public name, as itself, from the module ``_PUBLIC`` loads it from at run time."""
    path = SRC.joinpath(*package.split(".")[1:], "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    public = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "_PUBLIC"
    )
    block = next(
        (n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"), None
    )
    assert block is not None, f"{path.relative_to(ROOT)}: import its public names under `if TYPE_CHECKING:`"
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{ast.unparse(node)}: re-export it as itself (`X as X`)"
            seen[alias.name] = node.module
    expected = {name: m if m.startswith("tokembed.") else f"{package}.{m}" for name, m in public.items()}
    missing = [f"    from {m} import {n} as {n}" for n, m in sorted(expected.items()) if seen.get(n) != m]
    assert not missing, f"add under `if TYPE_CHECKING:` in {path.relative_to(ROOT)}:\n" + "\n".join(missing)
    assert seen == expected, f"{path.relative_to(ROOT)} imports names that are not in _PUBLIC"


def test_the_package_says_it_is_typed():
    """PEP 561: without ``py.typed`` a user's mypy reads nothing of tokembed's annotations."""
    assert (SRC / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["tokembed"]


USER_CODE = """
from __future__ import annotations

from collections.abc import Sequence

import tokembed
from tokembed.tokenizer.base import ENDOFTEXT, TokenizerIdentity, encode_with_specials, vocabulary_hash

ALPHABET = "".join(map(chr, range(32, 127))) + "\\t\\n"


class Chars:  # written from tokembed.Tokenizer's documentation (docs/tokenizers.md)
    name, unk, eot_token, n_vocab = "chars", len(ALPHABET), len(ALPHABET) + 1, len(ALPHABET) + 2
    special_tokens = {ENDOFTEXT: len(ALPHABET) + 1}

    def encode_ordinary(self, text: str) -> list[int]:
        return [ALPHABET.find(c) if c in ALPHABET else self.unk for c in text]

    def encode(self, text: str, *, allowed_special=frozenset(), disallowed_special="all") -> list[int]:
        return encode_with_specials(text, self.special_tokens, self.encode_ordinary, allowed_special, disallowed_special)

    def decode_single_token_bytes(self, token: int) -> bytes:
        return ENDOFTEXT.encode() if token == self.eot_token else ALPHABET[token].encode()

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.decode_single_token_bytes(t) for t in tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors)

    def identity(self) -> TokenizerIdentity:
        h = vocabulary_hash("chars", "", [(c.encode(), i) for i, c in enumerate(ALPHABET)], self.special_tokens.items())
        return TokenizerIdentity(name="chars", n_vocab=self.n_vocab, eot_token=self.eot_token, hash=h)


class NoIdentity:  # everything but identity()
    name, eot_token, n_vocab = "half", 1, 2
    special_tokens = {ENDOFTEXT: 1}

    def encode_ordinary(self, text: str) -> list[int]:
        return [0] * len(text)

    def encode(self, text: str, *, allowed_special=frozenset(), disallowed_special="all") -> list[int]:
        return self.encode_ordinary(text)

    def decode_single_token_bytes(self, token: int) -> bytes:
        return b"x"

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return b"x" * len(tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return "x" * len(tokens)


good: tokembed.Tokenizer = Chars()
bad: tokembed.Tokenizer = NoIdentity()  # line BAD
windows = tokembed.SlidingWindowDataset(text="a b c d e f", max_length=2, tokenizer=Chars())
loader = tokembed.create_dataloader(3.5, max_length=4)  # line SOURCE
reveal_type(loader)
"""


@pytest.mark.slow  # mypy over tokembed and torch: seconds after `make lint` (its cache), about a minute before
def test_a_users_type_checker_sees_tokembeds_types(tmp_path):
    code = textwrap.dedent(USER_CODE)
    lines = code.splitlines()
    bad, source = (
        next(i + 1 for i, line in enumerate(lines) if line.endswith(f"# line {m}")) for m in ("BAD", "SOURCE")
    )
    user = tmp_path / "user_code.py"
    user.write_text(code, encoding="utf-8")
    # From the repository root: the config (mypy_path = src) and the cache that `make lint` leaves there.
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-error-summary", str(user)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    errors = [line for line in out.splitlines() if ": error:" in line]
    notes = [line for line in out.splitlines() if ": note: Revealed type" in line]
    assert [int(e.split(":")[1]) for e in errors] == [bad, source], out
    assert "NoIdentity" in errors[0], out
    assert re.search(r'missing following "Tokenizer" protocol member:\n.*note:\s+identity\n', out), out
    assert "float" in errors[1] and "create_dataloader" in errors[1], out
    assert notes and "tokembed.data.loader.WindowLoader" in notes[0], out
