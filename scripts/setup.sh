#!/usr/bin/env bash
# Set up a fresh checkout: .venv with pearl_sched and every extra the tests use (torch as the 2.13.0 CPU build,
# so pip never pulls a multi-GB CUDA one; verl 0.9.1, about 2.5 min and 0.4 GB more), and the smg gateway in
# .smg/, a venv of its own (its grpcio/protobuf pins clash with OR-Tools'). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[dev,torch,ray,verl]"  # verl: the integration tests import its real classes

[ -x .smg/bin/python ] || python3 -m venv .smg
.smg/bin/python -m pip install -q --upgrade pip
.smg/bin/python -m pip install -q smg

# sglang-router, for the test that Gateway.attach works with it as with smg (about 20 s, 150 MB)
[ -x .router/bin/python ] || python3 -m venv .router
.router/bin/python -m pip install -q sglang-router
echo "set up: .venv (pearl_sched), .smg/bin/smg (gateway), .router (sglang-router)"
