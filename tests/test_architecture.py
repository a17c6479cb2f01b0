"""The house stays as docs/architecture.md draws it: layers import downward only (checked
by import-linter's contracts in pyproject.toml), no import cycle, the workload apart,
callers ask schedulers for capabilities (never their names), modules small and each
saying its job in its first line."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scalestudy"
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed "
                                "(pip install -e '.[test]')")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"),
                           "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_the_contracts_hold() -> None:
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "broken"), [
    ("core/errors.py", "import scalestudy.cli  # upward", "layers import downward only"),
    ("execute/diagnose.py", "import scalestudy.execute.status  # a cycle",
     "no import cycle between sibling modules"),
    ("workload/names.py", "import scalestudy.core.grid  # the guest reaching home",
     "the workload runs on compute nodes"),
])
def test_the_contracts_catch_what_they_forbid(tmp_path: Path, module: str, line: str,
                                              broken: str) -> None:
    shutil.copytree(PACKAGE, tmp_path / "scalestudy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / "scalestudy" / module
    target.write_text(target.read_text() + f"\n{line}\n")
    done = lint(tmp_path)
    assert done.returncode == 1
    assert re.search(re.escape(broken) + r".*BROKEN", done.stdout), done.stdout


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_says_its_job_first_and_stays_small() -> None:
    for path in modules():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and doc.strip(), f"{path}: no module docstring"
        assert len(path.read_text().splitlines()) <= 450, f"{path} is over ~400 lines"


def names_compared(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Where a module compares a value with one of `names` (==, !=, in, not in, a
    match case) or asks isinstance of a scheduler class: (line, the code)."""
    found = []

    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                named(n) for n in (node.left, *node.comparators)):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.MatchValue) and named(node.value):
            found.append((node.value.lineno, ast.unparse(node.value)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "isinstance" and len(node.args) == 2 \
                and "Scheduler" in ast.unparse(node.args[1]) \
                and ast.unparse(node.args[1]) != "Scheduler":
            found.append((node.lineno, ast.unparse(node)))
    return found


def scheduler_and_engine_names() -> set[str]:
    from scalestudy.execute.packing.engines import ENGINES
    from scalestudy.site import schedulers

    return set(schedulers.names()) | set(ENGINES)


def test_no_caller_compares_a_scheduler_or_engine_name() -> None:
    """Callers ask a scheduler or a pack engine what it can do, never which one it is:
    outside site/schedulers/, no module compares anything with their names."""
    names = scheduler_and_engine_names()
    assert {"slurm", "pbs", "flux", "local", "steps"} <= names
    wrong = []
    for path in modules():
        if PACKAGE / "site" / "schedulers" in path.parents:
            continue
        for line, code in names_compared(ast.parse(path.read_text()), names):
            wrong.append(f"{path.relative_to(ROOT)}:{line}: {code}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("code", [
    'if scheduler.name == "slurm": pass',
    'ok = engine in ("steps", "x")',
    'ok = "pbs" != name',
    'match kind:\n    case "flux":\n        pass',
    "ok = isinstance(s, SlurmScheduler)",
])
def test_the_name_check_finds_each_way_of_asking(code: str) -> None:
    assert names_compared(ast.parse(code), scheduler_and_engine_names())


def test_every_package_ships() -> None:
    """pyproject's explicit package list names every package directory (a missing one
    works in an editable install and is absent from a wheel)."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in PACKAGE.rglob("__init__.py")}
    assert found - listed == set()


#: What a module may import inside a function instead of at its top: the heavy libraries,
#: and what loads them (so that `scalestudy --help` and the light commands stay fast).
HEAVY = {"torch", "numpy", "pandas", "matplotlib", "sqlalchemy", "submitit", "psycopg",
         "deepspeed", "horovod", "scipy"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_imports(tree: ast.Module) -> set[str]:
    """The modules a module imports when it is imported (not under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, ast.Import):
                found |= {a.name for a in n.names}
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                found |= {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
    return found


def lazy_imports_of_light_modules() -> list[str]:
    """Function-level imports of the package's own modules that load nothing heavy
    (neither they, their packages' __init__, nor what those import at their top)."""
    trees = {_module_name(p): ast.parse(p.read_text()) for p in modules()}
    tops = {name: _top_imports(tree) for name, tree in trees.items()}
    # a package's names imported on first use (scalestudy.study's _WHERE, PEP 562): the
    # name reaches the module that defines it
    for name, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "_WHERE":
                for key, value in ast.literal_eval(node.value).items():
                    tops[f"{name}.{key}"] = {value}

    known: dict[str, bool] = {}

    def heavy(name: str) -> bool:
        """Whether importing `name` loads a heavy library: any module it reaches through
        its packages and top-level imports (one walk per module asked about)."""
        if name not in known:
            todo, seen = [name], {name}
            while todo:
                current = todo.pop()
                if current.split(".")[0] in HEAVY:
                    known[name] = True
                    break
                parts = current.split(".")
                for m in (*(".".join(parts[:i]) for i in range(1, len(parts))),
                          *tops.get(current, ())):
                    if m not in seen:
                        seen.add(m)
                        todo.append(m)
            else:
                known[name] = False
        return known[name]

    wrong = []
    for name, tree in trees.items():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                        (node.module or "").startswith("scalestudy"):
                    subs = [f"{node.module}.{a.name}" for a in node.names
                            if f"{node.module}.{a.name}" in trees or
                            f"{node.module}.{a.name}" in tops]
                    if not any(heavy(m) for m in subs or [node.module or ""]):
                        wrong.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return wrong


def test_only_heavy_modules_are_imported_inside_functions() -> None:
    """A module imports what it needs at its top; an import inside a function is kept for
    a heavy library (or what loads one). The schedulers' registry loads its backends
    when first asked (each backend imports the registry it registers in)."""
    wrong = [w for w in lazy_imports_of_light_modules()
             if not w.startswith("scalestudy.site.schedulers:")]
    assert not wrong, "\n".join(wrong)
