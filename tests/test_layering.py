"""The dependency direction of docs/architecture.md, checked on the source: the core never reaches into the
solvers package beyond its registry and solve entry points, and the solvers never import the planner.

Imports are read with ``ast`` (every ``import``/``from ... import`` anywhere in a module, including those
inside functions), so the rule holds whatever is installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = sorted(
    [ROOT / "pearl_sched" / n for n in ("state.py", "planner.py", "transition.py", "problem.py")]
    + list((ROOT / "pearl_sched").glob("makespan*.py"))
)
SOLVERS = sorted((ROOT / "solvers").glob("*.py"))
REGISTRY = {
    "get_backend",
    "available_backends",
    "solve_class_problem",
    "enumerate_configurations",
    "ratio_sweep",
    "evaluate_lanes",
    "predict_bound_s",
    "predict_lane_filter",
    "CutPool",
}
"""What the core may take from ``pearl_sched.solvers``: the backend registry, the solve entry points and their
arguments (``CutPool``: a plan() call's cuts, handed to ``solve_class_problem``)."""


def imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, imported names, line) for every import statement in ``path``; names empty for ``import x``."""
    found: list[tuple[str, tuple[str, ...], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}:{node.lineno}: relative import"
            found.append((node.module or "", tuple(a.name for a in node.names), node.lineno))
    return found


def test_the_checked_files_exist() -> None:
    names = {p.name for p in CORE}
    assert {"state.py", "planner.py", "transition.py", "problem.py", "makespan.py", "makespan_improved.py"} <= names
    assert all(p.is_file() for p in CORE)
    assert {"formulation.py", "enumeration.py", "__init__.py"} <= {p.name for p in SOLVERS}


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_core_uses_only_the_solver_registry(path: Path) -> None:
    for module, names, line in imports(path):
        if module == "pearl_sched.solvers":
            extra = set(names) - REGISTRY
            assert not extra, f"{path.name}:{line} imports {sorted(extra)} from pearl_sched.solvers"
        else:
            assert not module.startswith("pearl_sched.solvers."), f"{path.name}:{line} imports {module}"
            assert not module.startswith("solvers"), f"{path.name}:{line} imports {module}"


def test_the_problem_module_imports_no_solver() -> None:
    modules = {m for m, _, _ in imports(ROOT / "pearl_sched" / "problem.py")}
    assert not {m for m in modules if m.startswith(("pearl_sched.solvers", "solvers"))}


@pytest.mark.parametrize("path", SOLVERS, ids=lambda p: p.name)
def test_solvers_do_not_import_the_planner(path: Path) -> None:
    for module, _, line in imports(path):
        for upward in ("pearl_sched.planner", "pearl_sched.transition", "pearl_sched.control", "pearl_sched.sim"):
            assert not module.startswith(upward), f"solvers/{path.name}:{line} imports {module}"


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    """The checker itself: a core-style module reaching into the formulation is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from pearl_sched.solvers.formulation import ClassProblem\n")
    assert imports(bad) == [("pearl_sched.solvers.formulation", ("ClassProblem",), 2)]
    with pytest.raises(AssertionError, match=r"imports pearl_sched\.solvers\.formulation"):
        test_core_uses_only_the_solver_registry(bad)
    bad.write_text("from pearl_sched.solvers import ClassProblem, get_backend\n")
    with pytest.raises(AssertionError, match=r"imports \['ClassProblem'\] from pearl_sched.solvers"):
        test_core_uses_only_the_solver_registry(bad)
