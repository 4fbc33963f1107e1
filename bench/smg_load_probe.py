"""What the installed smg gateway does with its workers' load reports: prints what it observed.

Runs the real ``smg`` (``.smg/bin/smg``, as :class:`~pearl_sched.adapters.gateway.Gateway` launches it, policy
``cache_aware``, ``RUST_LOG=smg=debug``) against fake SGLang servers (:mod:`~pearl_sched.adapters.fake_sglang`)
whose ``/v1/loads`` figures the probe sets, and reports (docs/simulator.md, "The gateway"):

1. which load route smg reads and how often (the fakes record every read);
2. overload protection: where new prompts go while one worker reports 8 waiting requests, then 7, then KV usage 0.8;
3. the miss ranking: where new prompts go when the workers report different token work and throughput;
4. the warm-up slice: where misses and hits go after a third worker joins two that hold the prompts.

Run: ``.venv/bin/python bench/smg_load_probe.py [--only poll,overload,rank,warmup]``. Takes about two minutes
(it waits out smg's load polls).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PEARL_SCHED_SMG", str(ROOT / ".smg" / "bin" / "smg"))  # scripts/setup.sh installs it there

from pearl_sched.adapters.fake_sglang import FakeConfig, FakeSGLangServer  # noqa: E402
from pearl_sched.adapters.gateway import Gateway, Registration  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Probe:
    """One smg process (cache_aware, debug log) and its fakes."""

    def __init__(self, workers: int, log_dir: Path, name: str) -> None:
        self.fakes = [FakeSGLangServer(FakeConfig(port=free_port(), token_time_s=0.0)).start() for _ in range(workers)]
        # smg's own defaults, overload protection included (pearl_sched's Gateway turns it off by default)
        self.gateway = Gateway(
            port=free_port(), policy="cache_aware", log_dir=log_dir, api_key=None, overload_protection=True
        )
        self.log = log_dir / f"smg-{name}.log"
        argv = self.gateway.argv()
        argv[argv.index("--log-level") + 1] = "debug"
        env = dict(os.environ, RUST_LOG="smg=debug")
        self.handle = self.log.open("wb")
        self.process = subprocess.Popen(argv, stdout=self.handle, stderr=subprocess.STDOUT, env=env)
        self.gateway.process = self.process
        deadline = time.monotonic() + 30
        while True:
            try:
                self.gateway.client.workers()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.start = time.monotonic()
        for fake in self.fakes:
            self.add(fake)

    def add(self, fake: FakeSGLangServer) -> None:
        self.gateway.register(fake.url, Registration("regular"))

    def index(self, url: str) -> int:
        return [f.url for f in self.fakes].index(url.rstrip("/"))

    def send(self, text: str) -> int:
        """One /generate (1 token) through smg; the index of the fake that served it."""
        before = [f.state.requests_total for f in self.fakes]
        body = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 1}}).encode()
        req = urllib.request.Request(
            self.gateway.url + "/generate", data=body, headers={"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=30).read()
        after = [f.state.requests_total for f in self.fakes]
        return next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a)

    def branches(self, since: int) -> list[str]:
        text = self.log.read_text(errors="replace")[since:]
        return [m.group(0)[:240] for m in re.finditer(r"[^\n]*(?:selection|overload|warm)[^\n]*", text, re.I)]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.handle.close()
        for fake in self.fakes:
            fake.stop()


def words(seed: int, n: int = 400) -> str:
    return " ".join(f"w{seed}x{i}" for i in range(n))


def poll(log_dir: Path) -> None:
    p = Probe(2, log_dir, "poll")
    try:
        time.sleep(32)
        for i, fake in enumerate(p.fakes):
            reads = [(round(t - p.start, 1), path) for t, path in fake.load_reads]
            print(f"poll worker={i} reads={reads}")
    finally:
        p.close()


def overload(log_dir: Path) -> None:
    """Worker 0 is made the expected-wait scorer's choice (fast, or the others slow), then over a threshold:
    prompts leave it only if the veto applies (just under the threshold, they stay)."""
    p = Probe(3, log_dir, "overload")
    fast = {"gen_throughput": 100_000.0}
    slow = {"num_waiting_reqs": 7}  # 7 x 1024 / 2000 = 3.6 s each
    try:
        for label, first, others in (
            ("waiting=8 fast", {"num_waiting_reqs": 8, **fast}, {"token_usage": 0.79}),
            ("waiting=7 fast", {"num_waiting_reqs": 7, **fast}, {"token_usage": 0.79}),
            ("token_usage=0.8", {"token_usage": 0.8}, slow),
            ("token_usage=0.79", {"token_usage": 0.79}, slow),
        ):
            p.fakes[0].load_override = first
            p.fakes[1].load_override = p.fakes[2].load_override = others
            time.sleep(11)  # one load poll (10 s) later
            chosen = Counter(p.send(words(abs(hash(label)) % 10_000 + k)) for k in range(6))
            print(f"overload worker0={label} others={others} misses_to={dict(sorted(chosen.items()))}")
    finally:
        p.close()


def rank(log_dir: Path) -> None:
    p = Probe(3, log_dir, "rank")
    try:
        # worker 0: much token work, worker 1: little, worker 2: medium; all idle in the gateway's own count
        for fake, used in zip(p.fakes, (200_000, 1_000, 50_000), strict=True):
            fake.load_override = {"num_used_tokens": used, "num_running_reqs": used // 1000, "gen_throughput": 1000.0}
        time.sleep(11)
        mark = len(p.log.read_text(errors="replace"))
        chosen = [p.send(words(5000 + k)) for k in range(6)]
        print(f"rank used_tokens=(200000,1000,50000) misses_to={chosen}")
        for line in p.branches(mark)[:6]:
            print(f"rank log: {line}")
    finally:
        p.close()


def warmup(log_dir: Path) -> None:
    p = Probe(2, log_dir, "warmup")
    try:
        prompts = [words(7000 + k) for k in range(8)]
        for text in prompts:
            p.send(text)
        new = FakeSGLangServer(FakeConfig(port=free_port(), token_time_s=0.0)).start()
        p.fakes.append(new)
        p.add(new)
        mark = len(p.log.read_text(errors="replace"))
        misses = [p.send(words(8000 + k)) for k in range(8)]
        hits = [p.send(prompts[k % 8] + " more") for k in range(16)]
        print(f"warmup misses_to={misses}")
        print(f"warmup hits_to={hits}")
        for line in p.branches(mark)[:30]:
            print(f"warmup log: {line}")
    finally:
        p.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="poll,overload,rank,warmup")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="smg-load-probe-"))
    print(f"# smg {subprocess.run([Gateway(port=1).argv()[0], '--version'], capture_output=True, text=True).stdout}")
    for name in args.only.split(","):
        {"poll": poll, "overload": overload, "rank": rank, "warmup": warmup}[name](log_dir)
    print(f"# logs in {log_dir}")


if __name__ == "__main__":
    main()
