#!/usr/bin/env bash
# mypy --strict on the one pearl_sched namespace. solvers/, profiles/ and adapters/ are mapped into it by
# setuptools' package-dir, which mypy cannot see from the source tree, so we type-check a link tree that has
# the installed layout (pearl_sched/solvers -> ../solvers, ...).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/pearl_sched"
for entry in "$root"/pearl_sched/*; do ln -s "$entry" "$tree/pearl_sched/"; done
for sub in solvers profiles adapters; do ln -s "$root/$sub" "$tree/pearl_sched/$sub"; done
cd "$tree"
# shellcheck disable=SC2086  # MYPY_EXTRA_ARGS (scripts/check_py310.sh) is a list of flags
python -m mypy --config-file "$root/pyproject.toml" ${MYPY_EXTRA_ARGS:-} -p pearl_sched
