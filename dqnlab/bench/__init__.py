"""Benchmarks: one module per benchmark, each returning plain data (rows, dicts) that
``python -m dqnlab bench ...`` prints as a table or JSON and writes to the results store (:mod:`.store`).

``game`` (the game's speed: the compiled core beside the NumPy rules, and beside gymnasium-2048),
``update`` (the legacy per-transition loop against the batched update), ``scaling`` (each scheme at each worker count),
``interrupt`` (seconds from Ctrl-C to the prompt, each scheme),
``acting`` (vectorised acting), ``peers`` (beside Stable-Baselines3, whose adapter is
``sb3``), ``learner`` (the update beside the machine's matrix-product speed), ``learning``
(how strong a player each configuration makes per minute); ``timing`` and ``report`` hold
the measuring and reporting tools they share, ``store``
the results store.
"""

from .acting import bench_acting
from .game import bench_game, bench_rules
from .interrupt import bench_interrupt
from .learner import bench_learner, learner_markdown
from .learning import bench_learning, learning_markdown
from .peers import bench_peers, peers_markdown
from .scaling import bench_scaling
from .timing import warm_up
from .update import bench_update

__all__ = ["bench_rules", "bench_game", "bench_update", "bench_scaling", "bench_interrupt", "bench_acting", "bench_peers",
           "bench_learner", "bench_learning", "peers_markdown", "learner_markdown", "learning_markdown",
           "warm_up"]
