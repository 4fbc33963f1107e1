#!/usr/bin/env bash
# Python 3.10 support, checked statically (no 3.10 interpreter can be installed on these machines): mypy --strict
# with --python-version 3.10 over the package (3.11-only stdlib names such as enum.StrEnum, typing.Self and
# tomllib fail here), and ruff, whose target-version in pyproject.toml is py310.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MYPY_EXTRA_ARGS="--python-version 3.10" bash "$root/scripts/typecheck.sh"
cd "$root"
python -m ruff check --target-version py310 .
