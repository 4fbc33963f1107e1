"""pearl_sched inside the RL frameworks' own loops (docs/adapters.md#rl-frameworks).

* :mod:`pearl_sched.integrations.lending` — what they share: PEARL's Eq. 7 (the borrow gate of
  :mod:`pearl_sched.policies`) over measured rollout throughput, and the toggle cost learnt from each lend;
* :mod:`pearl_sched.integrations.verl` — a policy in verl's dynamic-schedule registry (the ``verl`` extra),
  and a replica pool driving verl's load balancer (``add_servers`` / ``remove_servers``) and replica
  sleep / wake-up / abort;
* :mod:`pearl_sched.integrations.roll` — ROLL's partial-GPU mode: ``expand_sampler`` only when lending pays,
  ``shrink_sampler`` to give the GPUs back;
* :mod:`pearl_sched.integrations.slime` — slime attached to servers and a gateway pearl_sched runs
  (``--rollout-external-engine-addrs``, ``--sglang-router-ip/port``), or its ``--sglang-config`` server
  groups generated from a plan.

Each module imports its framework only where the framework's own classes are needed (verl); the others speak
to the framework's objects through the calls they make, so they import without it. The core never imports
this package.
"""
