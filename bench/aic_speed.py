"""Cost of one aiconfigurator-core step-time call through :class:`~pearl_sched.profiles.aic_engine.AicStepTimes`.

Prints ``aic_speed kind=<prefill|decode|mixed> cold_us=<x> warm_us=<y>``: cold = first call at each point (the
compiled engine itself), warm = the memoised call a long simulation makes. Run: ``python bench/aic_speed.py``.
"""

from __future__ import annotations

import random
import time

from pearl_sched.profiles.aic_engine import AicStepTimes


def main() -> None:
    steps = AicStepTimes("qwen3-8b", "h200_sxm", tp=2)
    rng = random.Random(0)
    points = {
        "prefill": [(rng.randint(64, 16384), rng.randint(1, 4), rng.randint(0, 30000)) for _ in range(2000)],
        "decode": [(rng.randint(1, 256), rng.uniform(100, 60000)) for _ in range(2000)],
        "mixed": [
            (rng.randint(64, 8192), 1, rng.randint(0, 30000), rng.randint(1, 256), rng.uniform(100, 60000))
            for _ in range(2000)
        ],
    }
    calls = {"prefill": steps.prefill_s, "decode": steps.decode_s, "mixed": steps.mixed_s}
    print(f"aic_speed source={steps.source!r}")
    for kind, args in points.items():
        fn = calls[kind]
        start = time.perf_counter()
        for a in args:
            fn(*a)
        cold = (time.perf_counter() - start) / len(args) * 1e6
        start = time.perf_counter()
        for _ in range(5):
            for a in args:
                fn(*a)
        warm = (time.perf_counter() - start) / (5 * len(args)) * 1e6
        print(f"aic_speed kind={kind} cold_us={cold:.1f} warm_us={warm:.2f}")


if __name__ == "__main__":
    main()
