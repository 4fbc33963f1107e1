"""Adapters that carry plans out on real clusters and trainers.

The SGLang cluster adapter, the gateway manager, the trainer adapter and the control loop live here
(issue 5). The core never imports this package; adapters may import everything.
"""
