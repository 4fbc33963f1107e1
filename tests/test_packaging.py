"""The wheel ships one import namespace: every module of the four source folders, importable from outside
the repository, and no top-level ``solvers``/``profiles``/``adapters`` package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "pearl_sched": "pearl_sched",
    "solvers": "pearl_sched/solvers",
    "profiles": "pearl_sched/profiles",
    "adapters": "pearl_sched/adapters",
}


def _expected_modules() -> dict[str, str]:
    """Wheel path → dotted module name, for every .py file in the four folders and their subpackages."""
    expected = {}
    for folder, target in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            wheel_path = f"{target}/{path.relative_to(ROOT / folder).as_posix()}"
            module = wheel_path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            expected[wheel_path] = module
    return expected


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("pearl_sched-*.whl")
    return built


@pytest.mark.slow
def test_wheel_contains_every_module_and_no_stray_top_level_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(set(_expected_modules()) - names)
    assert not missing, f"missing from the wheel: {missing}"
    top_level = {n.split("/")[0] for n in names if not n.startswith("pearl_sched-")}
    assert top_level == {"pearl_sched"}
    assert "pearl_sched/py.typed" in names
    for model in ("qwen3-8b", "qwen3-30b-a3b", "qwen3-32b", "llama-3.1-8b"):
        assert f"pearl_sched/profiles/configs/{model}.json" in names
    assert "pearl_sched/sim/scenarios/e2e.json" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    declared = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "pearl-sched = pearl_sched.cli:main" in declared
    assert "[verl.plugins]\npearl_sched = pearl_sched.integrations.verl" in declared  # verl loads it itself


@pytest.mark.slow
def test_every_module_imports_from_the_wheel_outside_the_repo(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    modules = sorted(set(_expected_modules().values()))
    script = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(site)!r}), (name, module.__file__)\n"
        "for stray in ('solvers', 'profiles', 'adapters'):\n"
        "    try:\n"
        "        importlib.import_module(stray)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise AssertionError(f'top-level {stray} is importable')\n"
        "from pearl_sched.profiles.kernels import shipped_config\n"
        "assert shipped_config('qwen3-30b-a3b').num_experts == 128\n"
        "print('ok', len(sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")
