#!/usr/bin/env bash
# GPU smoke test, for a machine with an NVIDIA GPU and SGLang installed (not CI, not the tests):
# two real SGLang servers with a small model and --load-format dummy (no weights downloaded), the real smg
# gateway, and pearl_sched's adapter driving colocated → 1P1D, a prefill↔decode flip, and a memory
# release/resume — printing what it did and how long each step took.
#
#   pip install "sglang[all]>=0.5.21" mooncake-transfer-engine   # the role flip needs the mooncake backend
#   bash scripts/setup.sh && MODEL=Qwen/Qwen3-0.6B bash scripts/gpu_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export MODEL="${MODEL:-Qwen/Qwen3-0.6B}"
export PEARL_SCHED_SMG="${PEARL_SCHED_SMG:-$PWD/.smg/bin/smg}"
python=${PYTHON:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
exec "$python" - <<'PY'
import os, tempfile, time
from pathlib import Path

from pearl_sched import Mode, Role, Workload, Zone
from pearl_sched.adapters.gateway import Gateway
from pearl_sched.adapters.http import SGLangServerClient
from pearl_sched.adapters.journal import Journal
from pearl_sched.adapters.launcher import SGLANG, SubprocessLauncher
from pearl_sched.adapters.rollout import RolloutClient
from pearl_sched.adapters.sglang import SGLangCluster, SlotSpec
from pearl_sched.control import Assignment

work = Path(tempfile.mkdtemp(prefix="pearl-sched-smoke-"))
slots = [SlotSpec(f"w{i}", (f"g{i}",), (0,), 31000 + 10 * i, Zone.DEDICATED, bootstrap_port=31001 + 10 * i)
         for i in range(2)]  # both on GPU 0, each with a small memory share
workload = Workload(batch_size=8, unfinished=8, turns=2, appended_tokens_per_turn=64,
                    generated_tokens_per_turn=32, env_time_per_turn_s=1.0, kv_bytes_per_token=1)
gateway = Gateway(port=30990, log_dir=work).start()
cluster = SGLangCluster(
    slots=slots, launcher=SubprocessLauncher(SGLANG, log_dir=work), gateway=gateway,
    model_path=os.environ["MODEL"], workload=workload, journal=Journal(work / "journal.jsonl"),
    enable_memory_saver=True, drain_s=10.0,
    extra_args=("--load-format", "dummy", "--mem-fraction-static", "0.35", "--disable-cuda-graph"),
)

def timed(what, fn):
    start = time.monotonic(); out = fn(); print(f"{what:<42} {time.monotonic() - start:7.2f} s", flush=True); return out

def one_request():
    client = RolloutClient(cluster.gateway.url)
    out = client.generate(list(range(1, 33)), 16); client.close()
    return len(out.output_ids)

C, P, D = Role.COLOCATED, Role.PREFILL, Role.DECODE
try:
    timed("start colocated (1 server)", lambda: cluster.apply(Assignment(Mode.COLOCATED, {"w0": C})))
    print("  generated", timed("one request through the gateway", one_request), "tokens")
    timed("switch to 1P1D (restart + gateway PD mode)",
          lambda: cluster.apply(Assignment(Mode.DISAGGREGATED, {"w0": P, "w1": D})))
    print("  generated", timed("one PD request (bootstrap, KV transfer)", one_request), "tokens")
    with SGLangServerClient(f"http://127.0.0.1:{slots[0].port}") as c:
        print("  role switch supported:", c.supports_role_switch())
    timed("flip: 1P1D → 1D1P (/pd_role_switch or restart)",
          lambda: cluster.apply(Assignment(Mode.DISAGGREGATED, {"w0": D, "w1": P})))
    print("  generated", timed("one PD request after the flip", one_request), "tokens")
    with SGLangServerClient(f"http://127.0.0.1:{slots[1].port}") as c:
        timed("release memory of w1 (idle)", lambda: c.release_memory(None))
        timed("resume memory of w1", lambda: c.resume_memory(None))
    print("  generated", timed("one request after resume", one_request), "tokens")
finally:
    cluster.shutdown()
    cluster.gateway.stop()
    print("logs:", work)
PY
