"""The house rules, read from the source (ast, nothing is run): data flows one way, functions stay short.

Stages, in the order data flows; a module may import only from its own stage or an earlier one, and
the imports between modules form no cycle:

    0 _atomic, _checks, _paths, _plot   shared primitives
    1 tokenizer, storage        text -> ids; bytes from anywhere (URLs, the block cache)
    2 shards                    ids -> token shards on disk
    3 data                      shards -> windows -> batches
  3.5 integrations              batches -> the trainers people use (HF, torchtitan, litgpt, Megatron)
    4 embeddings                batches -> token + positional embeddings
    5 model                     embeddings -> a GPT, its checkpoints
    6 training                  the loop, evaluation, experiments
    7 inspection                what the embeddings learned
    8 demo, cli, the package    the application
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tokembed"
STAGES = {
    "_atomic": 0, "_checks": 0, "_cpus": 0, "_lazy": 0, "_lock": 0, "_paths": 0, "_plot": 0, "_plugins": 0,
    "tokenizer": 1, "storage": 1, "shards": 2, "data": 3, "integrations": 3.5, "embeddings": 4, "model": 5,
    "training": 6, "inspection": 7,
    "demo": 8, "cli": 8, "__init__": 8, "__main__": 8,
}  # fmt: skip
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> float:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    if top not in STAGES:
        raise AssertionError(f"{module} is in no stage: add its top-level name to STAGES in {__file__}")
    return STAGES[top]


def imported_from(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module of ``from X import ...``, relative forms (``from ..data import plan``) resolved."""
    if not node.level:
        return node.module or ""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, modules: set[str]) -> set[str]:
    """The tokembed modules ``path`` imports (anywhere in it, functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tokembed")
        elif isinstance(node, ast.ImportFrom):
            module = imported_from(node, path)
            if module.split(".")[0] == "tokembed":
                # `from tokembed.shards import reader` imports the module tokembed.shards.reader
                subs = {f"{module}.{a.name}" for a in node.names} & modules
                found.update(subs or {module})
    return found


FILES = sorted(SRC.rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}
GRAPH = {m: imports(p, set(MODULES)) - {m} for m, p in MODULES.items()}


def test_every_import_points_to_an_earlier_or_the_same_stage():
    upward = [
        f"{MODULES[m].relative_to(SRC)} (stage {stage(m)}) imports {MODULES[t].relative_to(SRC)} (stage {stage(t)})"
        for m, targets in GRAPH.items()
        for t in sorted(targets)
        if t in MODULES and stage(t) > stage(m) and m not in ("tokembed",)
    ]
    assert not upward, "imports against the flow of data:\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return path[path.index(t) :] + [t]
            if t in graph and not state.get(t) and (cycle := visit(t)):
                return cycle
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if not state.get(m) and (cycle := visit(m)):
            return cycle
    return None


def test_no_import_cycles():
    # The package __init__ loads its public names lazily (importlib), so it is no edge of the graph.
    cycle = find_cycle({m: {t for t in ts if t != "tokembed"} for m, ts in GRAPH.items()})
    assert cycle is None, "import cycle: " + " -> ".join(str(MODULES[m].relative_to(SRC)) for m in cycle)


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    # relative imports resolve to the modules they name
    check = SRC / "shards" / "check.py"
    rel = ast.parse("from ..inspection import table\nfrom . import format\nfrom .reader import ShardSet")
    assert [imported_from(n, check) for n in rel.body] == [
        "tokembed.inspection",
        "tokembed.shards",
        "tokembed.shards.reader",
    ]
    fake = tmp_path / "x.py"
    fake.write_text("from ..inspection import table\n")
    fake_in_src = SRC / "shards" / fake.name  # resolved as if it sat in shards/
    assert {f"{imported_from(n, fake_in_src)}.table" for n in ast.parse(fake.read_text()).body} & set(MODULES)
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert stage("tokembed.shards.prepare") < stage("tokembed.data.loader") < stage("tokembed.inspection.report")


def function_lengths() -> list[tuple[str, int]]:
    """(file:function, lines) for every function, its docstring not counted."""
    out = []
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                    body = body[1:] or body
                out.append((f"{path.relative_to(SRC)}:{node.name}", node.end_lineno - body[0].lineno + 1))
    return out


def test_no_function_is_longer_than_60_lines():
    long = [f"{name} has {n} lines" for name, n in function_lengths() if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(long)


@pytest.mark.parametrize(
    "name", ["shards", "data", "integrations", "model", "training", "inspection", "embeddings", "cli"]
)
def test_each_stage_is_a_package_with_a_docstring(name):
    init = SRC / name / "__init__.py"
    assert init.is_file()
    assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), f"{init} says nothing about its stage"
