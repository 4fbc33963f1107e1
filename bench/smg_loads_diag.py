"""Which of the gateway's load-report rules moves a segment: pearl_sched with all three, then each switched off.

A diagnosis, not a configuration: the rules are switched on and off by patching ``pearl_sched.sim.router`` in
this process (docs/simulator.md, "The load reports"). "all three" is smg 1.13.0's defaults, the overload veto
included, which pearl_sched's adapters (and so the simulator, by default) switch off.
Run: ``.venv/bin/python bench/smg_loads_diag.py VARIANT SEGMENT`` (SEGMENT an index from 0), e.g.
``swe-qwen3-30b-a3b/32k 0``; one simulation per case.
"""

import collections
import sys

import pearl_sched.sim.router as r
from pearl_sched.shared_data import default_data
from pearl_sched.sim.experiment import run_policy_segment
from pearl_sched.sim.scenario import load_scenario

variant, seg = sys.argv[1], int(sys.argv[2])
scenario = next(v for v in load_scenario(variant.split("/")[0]).expand() if v.name == variant)
orig_least, orig_overloaded, orig_poll = r.Router._least_wait, r.LoadReport.overloaded, r.Router._poll
orig_post_init = r.Router.__post_init__


def protected_post_init(self: r.Router) -> None:
    """Every router of the run with smg's overload protection on (its default; the adapters turn it off)."""
    orig_post_init(self)
    self.overload_protection = True


r.Router.__post_init__ = protected_post_init  # type: ignore[method-assign]
stats: collections.Counter[str] = collections.Counter()
usage: list[float] = []


def counting_poll(self: r.Router, load: dict[int, int], report: object, now_s: float) -> None:
    """The poll, counting how often a report is over a threshold (with all three rules on)."""
    orig_poll(self, load, report, now_s)  # type: ignore[arg-type]
    over = [rep.overloaded for rep in self.reports.values()]
    stats["reports"] += len(over)
    stats["waiting>=8"] += sum(rep.waiting_reqs >= 8 for rep in self.reports.values())
    stats["usage>=0.8"] += sum(rep.token_usage >= 0.8 for rep in self.reports.values())
    stats["overloaded"] += sum(over)
    stats["polls"] += 1
    stats["polls with some (not all) over"] += 0 < sum(over) < len(over)
    stats["polls with all over"] += all(over)
    usage.extend(rep.token_usage for rep in self.reports.values())


r.Router._poll = counting_poll  # type: ignore[method-assign]
cases = {
    "all three": lambda: None,
    "no overload veto": lambda: setattr(r.LoadReport, "overloaded", property(lambda self: False)),
    "no warm-up": lambda: setattr(r, "WARMUP_S", 0.0),
    "in-flight ranking (no scorer)": lambda: setattr(
        r.Router, "_least_wait", lambda self, ws, load: min(ws, key=lambda w: (load[w], w))
    ),
}
for name, apply in cases.items():
    r.Router._least_wait, r.LoadReport.overloaded, r.WARMUP_S = orig_least, orig_overloaded, 60.0
    apply()
    t = run_policy_segment(scenario, "pearl_sched", seg, default_data()).throughput_tok_s
    print(f"diag scenario={variant} segment={seg} case={name!r} throughput_tok_s={t:.0f}", flush=True)
    if name == "all three":
        usage.sort()
        deciles = [round(usage[int(q * (len(usage) - 1))], 3) for q in (0.1, 0.5, 0.9)] if usage else []
        print(f"diag scenario={variant} segment={seg} polls {dict(stats)} kv_usage_p10_p50_p90={deciles}", flush=True)
        r.Router._poll = orig_poll  # type: ignore[method-assign]
