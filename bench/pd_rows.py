"""The disaggregated SGLang rows of bench/validate.py, one line each: measured against replayed, and the replay's own
counters (where a request's time to first token went, how busy each role was, what the decode pool did).

``python bench/pd_rows.py [--all] [--rows N]`` replays the disaggregated rows whose deployment is recorded exactly
as ``bench/validate.py --modes disagg`` does (its loaders, reused as they are) and prints, for the KV-bound rows
(``--all``: every row)::

    pd-row id=<row id> model=<m> gpu=<g> isl=<n> osl=<n> c=<n> prefill=<workers>x(tp<n>,adp<n>) decode=<…>
      measured_ttft_s=<x> replay_ttft_s=<x> measured_tpot_ms=<x> replay_tpot_ms=<x> measured_e2e_s=<x>
      replay_e2e_s=<x> e2e_err_pct=<x> prealloc_wait_s=<x> prefill_queue_s=<x> prefill_run_s=<x> transfer_s=<x>
      join_wait_s=<x> prefill_busy=<f> decode_busy=<f> mean_rank_batch=<x> max_rank_batch=<n>
      rank_capacity=<n> retractions=<n> resumes=<n> pool_peak=<f>

(one line in the output). The five ``…_s`` phases add up to the replayed TTFT
(:class:`pearl_sched.sim.replay.DisaggReplayResult`); ``rank_capacity`` is how many requests of mean length
(ISL + OSL as the harness draws them) one decode rank's pool holds; ``pool_peak`` the largest share of a decode
rank's pool in use, preallocations included. docs/validation.md reads these lines for the KV-bound rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.validate import disagg_rows, recorded_concurrency, sglang_silicon_rows


def main(argv: list[str] | None = None) -> int:
    """Print one ``pd-row`` line per replayed disaggregated row (KV-bound ones unless ``--all``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every replayed disaggregated row, not only the KV-bound")
    parser.add_argument("--rows", type=int, default=0, help="only the first N replayed rows (0: all)")
    args = parser.parse_args(argv)
    rows = [r for r in sglang_silicon_rows() if r["mode"] == "disagg" and recorded_concurrency(r) is not None]
    by_id = {r["id"]: r for r in rows}
    # twins are looked up among all disaggregated rows, so the cut happens after the replay
    replayed, _ = disagg_rows(rows, {})
    if args.rows:
        replayed = replayed[: args.rows]
    for item in replayed:
        if item.roles is None or ("kvbound" not in item.row.dataset and not args.all):
            continue
        prefill, decode = item.roles
        res = item.replay()
        row, src = item.row, by_id[item.row.row_id]
        mean_len = item.harness.mean_osl(item.isl) + item.harness.mean_osl(item.osl)
        p_layout = f"{prefill.workers}x(tp{getattr(prefill.steps, 'tp', '?')},adp{prefill.ranks})"
        d_layout = f"{decode.workers}x(tp{getattr(decode.steps, 'tp', '?')},adp{decode.ranks})"
        print(
            f"pd-row id={row.row_id} model={src['model_path']} gpu={src['system']} isl={item.isl} osl={item.osl}"
            f" c={item.concurrency} prefill={p_layout} decode={d_layout}"
            f" measured_ttft_s={row.measured_ttft_s:.3f} replay_ttft_s={res.ttft_s:.3f}"
            f" measured_tpot_ms={row.measured_tpot_s * 1e3:.1f} replay_tpot_ms={res.tpot_s * 1e3:.1f}"
            f" measured_e2e_s={row.measured_e2e_s:.2f} replay_e2e_s={res.e2e_s:.2f}"
            f" e2e_err_pct={(res.e2e_s / row.measured_e2e_s - 1) * 100:+.1f}"
            f" prealloc_wait_s={res.prealloc_wait_s:.3f} prefill_queue_s={res.prefill_queue_s:.3f}"
            f" prefill_run_s={res.prefill_run_s:.3f} transfer_s={res.transfer_s:.3f} join_wait_s={res.join_wait_s:.3f}"
            f" prefill_busy={res.prefill_busy:.2f} decode_busy={res.decode_busy:.2f}"
            f" mean_rank_batch={res.mean_decode_rank_batch:.1f} max_rank_batch={res.max_decode_rank_batch}"
            f" rank_capacity={decode.pool_tokens / mean_len:.1f} retractions={res.retractions} resumes={res.resumes}"
            f" pool_peak={res.max_used_tokens / res.pool_tokens:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
