"""Every test that starts torchrun, Ray or Chromium, or kills a process, carries ``@pytest.mark.slow``.

``make test-fast`` (``pytest -m "not slow"``) stays fast only if the marker is there; this reads each test
file's syntax tree (nothing is run) and names the unmarked tests. A test "reaches" a launcher when its body,
a module-level helper it calls (transitively), a fixture of its module or of conftest.py it takes, or a
module-level constant it reads mentions one of:

- the program names ``"torchrun"``, ``"chromium"``, ``"chromium-browser"`` (a string that is exactly that);
- ``ray.init`` (a local Ray cluster);
- ``SIGKILL`` or ``killpg`` (kill -9, or a signal to a whole process group);
- ``start_swift`` (the S3 server of tests/remote/, through its ``swift``/``s3`` fixtures).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PROGRAMS = {"torchrun", "chromium", "chromium-browser"}
NAMES = {"SIGKILL", "killpg", "start_swift"}


def _launches(node: ast.AST) -> bool:
    """Whether ``node`` itself (not the functions it calls) mentions a launcher."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in PROGRAMS:
            return True
        if isinstance(n, ast.Attribute) and (
            n.attr in NAMES or (n.attr == "init" and isinstance(n.value, ast.Name) and n.value.id == "ray")
        ):
            return True
        if isinstance(n, ast.Name) and n.id in NAMES:
            return True
    return False


def _is_slow_mark(node: ast.AST) -> bool:
    """``pytest.mark.slow`` (or ``pytest.mark.slow(...)``) anywhere in ``node``."""
    return any(isinstance(n, ast.Attribute) and n.attr == "slow" for n in ast.walk(node))


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def _module_parts(tree: ast.Module) -> tuple[dict[str, ast.FunctionDef], set[str], bool]:
    """The module's functions by name, its constants that mention a launcher, and whether ``pytestmark`` is slow."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    launching_names: set[str] = set()
    module_slow = False
    for n in tree.body:
        if isinstance(n, ast.Assign):
            targets = {t.id for t in n.targets if isinstance(t, ast.Name)}
            if "pytestmark" in targets and _is_slow_mark(n.value):
                module_slow = True
            if _launches(n.value):
                launching_names |= targets
    return functions, launching_names, module_slow


def _launching_functions(
    functions: dict[str, ast.FunctionDef], names: set[str], shared: dict[str, ast.FunctionDef] | None = None
) -> set[str]:
    """The functions that reach a launcher, directly or through each other: the module's helpers by any mention,
    fixtures (the module's, and conftest's ``shared``) by being taken as an argument (a local variable that happens
    to share a conftest fixture's name, like ``s3``, is no use of it)."""
    everything = {**(shared or {}), **functions}

    def direct(fn: ast.FunctionDef) -> bool:
        body = ast.Module(body=fn.body, type_ignores=[])
        return _launches(body) or any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(body))

    def uses(fn: ast.FunctionDef) -> set[str]:
        called = {n.id for n in ast.walk(ast.Module(body=fn.body, type_ignores=[])) if isinstance(n, ast.Name)}
        return (called & set(functions)) | ({a.arg for a in fn.args.args} & set(everything))

    found = {name for name, fn in everything.items() if direct(fn)}
    while True:
        more = {name for name, fn in everything.items() if name not in found and uses(fn) & found}
        if not more:
            return found
        found |= more


def unmarked_launchers(source: str, shared_fixtures: dict[str, ast.FunctionDef] | None = None) -> list[str]:
    """The test functions in ``source`` that reach a launcher but are not marked slow."""
    tree = ast.parse(source)
    functions, names, module_slow = _module_parts(tree)
    if module_slow:
        return []
    launching = _launching_functions(functions, names, shared_fixtures)
    bad = []
    for name, fn in functions.items():
        if not name.startswith("test") or _is_fixture(fn):
            continue
        marked = any(_is_slow_mark(d) for d in fn.decorator_list)
        if name in launching and not marked:
            bad.append(name)
    return bad


def _conftest_fixtures() -> dict[str, ast.FunctionDef]:
    """The fixtures of every conftest.py (tests/ and its folders: tests/remote/ starts the S3 server)."""
    found: dict[str, ast.FunctionDef] = {}
    for path in sorted(TESTS.glob("**/conftest.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and _is_fixture(n)}
    return found


def test_every_test_that_starts_a_launcher_or_kills_a_process_is_marked_slow():
    shared = _conftest_fixtures()
    bad = {
        path.name: found
        for path in sorted(TESTS.glob("**/test_*.py"))
        if path.name != Path(__file__).name  # this file names the launchers it looks for
        and (found := unmarked_launchers(path.read_text(encoding="utf-8"), shared))
    }
    assert not bad, f"mark these @pytest.mark.slow (they start torchrun, Ray or Chromium, or kill a process): {bad}"


CASES = {
    "torchrun through a helper and a constant": (
        """
import sys
from pathlib import Path
TORCHRUN = Path(sys.executable).with_name("torchrun")
def run(n):
    subprocess.run([str(TORCHRUN), "--nproc_per_node", str(n)])
def test_two_ranks():
    run(2)
""",
        ["test_two_ranks"],
    ),
    "kill -9 in the test": (
        """
def test_killed(tmp_path):
    os.killpg(proc.pid, signal.SIGKILL)
""",
        ["test_killed"],
    ),
    "ray through a fixture": (
        """
@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2)
    yield
    ray.shutdown()
def test_engine(local_ray, tmp_path):
    prepare_corpus([], tmp_path, engine="ray")
def test_no_ray(tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
""",
        ["test_engine"],
    ),
    "chromium through two helpers": (
        """
def chromium():
    return shutil.which("chromium")
def render(page):
    return subprocess.Popen([chromium(), page])
def test_page():
    render("x.html")
def test_docstring_only():
    '''Not a launch: a program named in a longer text, like torchrun --nproc_per_node 2.'''
""",
        ["test_page"],
    ),
    "marked tests pass": (
        """
@pytest.mark.slow
def test_killed():
    os.kill(pid, signal.SIGKILL)
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_signals(sig):
    os.killpg(pid, sig)
""",
        [],
    ),
    "a slow module passes": (
        """
pytestmark = pytest.mark.slow
def test_killed():
    os.killpg(pid, signal.SIGKILL)
""",
        [],
    ),
}


@pytest.mark.parametrize("source, expected", CASES.values(), ids=CASES.keys())
def test_the_check_finds_unmarked_launchers_and_only_those(source, expected):
    assert unmarked_launchers(source) == expected


def test_a_conftest_fixture_that_launches_counts():
    shared = {
        "cluster": ast.parse("@pytest.fixture\ndef cluster():\n    ray.init()\n    yield\n").body[0],
    }
    assert unmarked_launchers("def test_x(cluster):\n    pass\n", shared) == ["test_x"]
    assert unmarked_launchers("def test_x(tmp_path):\n    pass\n", shared) == []


def test_a_test_that_takes_the_s3_server_counts():
    fixtures = _conftest_fixtures()  # tests/remote/conftest.py's too: s3 takes swift, which starts the server
    assert {"swift", "s3"} <= set(fixtures)
    assert unmarked_launchers("def test_x(s3):\n    pass\n", fixtures) == ["test_x"]
    assert unmarked_launchers("@pytest.mark.slow\ndef test_x(s3):\n    pass\n", fixtures) == []
    assert unmarked_launchers("def test_x():\n    s3, d3 = 1, 2\n", fixtures) == []  # a variable, not the fixture
