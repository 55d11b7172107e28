"""Learning curves: each scheme's beside serial's, as ``bench learning`` measured them (the scheme
notebooks 02-07, from its results file); and notebook 08's: the network families' learning curves,
what prioritized replay and n-step returns change, and what the n-tuple field's learning methods
change (small ``bench learning`` runs), with temporal coherence's step sizes drawn from a run's
checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..bench.learning import POINTS, learning_curve, parse_variant, time_to_player, versus_serial
from ..bench.learning import learning_figure as draw_learning_curves
from ..bench.report import machine_info
from ..bench.store import load
from ..config import TrainConfig, family_preset
from .budgets import Budget, chosen
from .reading import plain_log_ticks
from .trials import RunsProgress, legend_or_no_data, new_figure

__all__ = ["learning_config", "learning_data", "learning_figure", "REPLAY_VARIANTS", "replay_data", "METHOD_VARIANTS",
           "methods_data", "step_sizes", "step_size_figure", "scheme_learning", "versus_serial"]

#: The replay variants notebook 08 compares (:func:`dqnlab.bench.learning.parse_variant`).
REPLAY_VARIANTS = ("plain", "prioritized", "n_step=3", "prioritized+n_step=3")
#: Those of them a smoke run trains: plain replay, and both changes at once (every code path of the others).
_SMOKE_REPLAY_VARIANTS = ("plain", "prioritized+n_step=3")
#: The n-tuple field's learning methods notebook 08 compares on the ``ntuple`` preset (plain TD(0)): temporal
#: coherence at lr 1, the field's meta step size of 1 (the ``default`` preset), optimistic initial values, both
#: after a TD phase (OTD+TC), and two stages past the 8192 tile.
METHOD_VARIANTS = ("plain", "optimizer=tc+lr=1.0", "initial_value=320000",
                   "optimizer=tc+lr=1.0+initial_value=320000+tc_start=1000000+tc_td_lr=0.1",
                   "optimizer=tc+lr=1.0+stages=8192")
#: Those of them a smoke run trains: plain, and every method at once (on the smoke settings' small tables).
_SMOKE_METHOD_VARIANTS = ("plain", "optimizer=tc+tc_start=20+initial_value=500+stages=64")


def learning_config(network: str = "ntuple", afterstate: bool | None = None, augment_symmetry: bool | None = None,
                    b: Budget | None = None, **overrides: Any) -> TrainConfig:
    """The configuration notebook 08 and its panel train: the family's preset
    (:func:`dqnlab.config.family_preset`) with ``afterstate`` and ``augment_symmetry`` as given (None: the
    preset's; symmetry augmentation is built into ``ntuple``, so it is off there).

    For budget ``b`` (default :func:`~dqnlab.experiments.budgets.chosen`); in smoke mode: the small 17x4-tuple set, small networks and buffers, learning from
    the first few hundred env steps, and a 2 s budget. ``overrides`` replace any field.

    Raises
    ------
    ValueError
        For an unknown network or a combination :class:`~dqnlab.TrainConfig` rejects.
    """
    base = TrainConfig.preset(family_preset(network, afterstate))
    fields: dict[str, Any] = {"total_env_steps": None, "max_seconds": 60.0}
    if afterstate is not None:
        fields["afterstate"] = afterstate
    if augment_symmetry is not None:
        fields["augment_symmetry"] = augment_symmetry and network != "ntuple"
    if network == "ntuple" and afterstate is False:  # Q-values from lookup tables: one table row per action
        fields["lr"] = base.lr / 4
    if (b or chosen()).smoke:
        fields.update(ntuples="17x4", hidden=(32,), channels=8, buffer_size=4_000, batch_size=64,
                      learning_starts=256, n_envs=16, epsilon_decay_steps=2_000, max_seconds=2.0)
        if network == "ntuple":
            fields["lr"] = 0.01
    return base.replace(**{**fields, **overrides})


def learning_data(minutes: float | None = None, games: int | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """Learning curves of the network families (serial: ``ntuple``, ``cnn``, ``mlp`` with
    and without afterstates) and of ``ntuple`` on the ``shared`` scheme with 2 workers
    (lock-free, as Jaskowski 2018 trains n-tuple networks).

    A small :func:`dqnlab.bench.learning.bench_learning`: each run stops at several points
    of its budget (``minutes``, default 3; in smoke mode 1/120 (half a second), with the smoke settings of
    :func:`learning_config`, and without ``cnn`` and the plain ``mlp``; at its end only) and plays ``games``
    greedy games there (default 1,000; 32).
    Returns its result dict (``rows``, ``time_to_player``, ``machine``, ...).
    """
    b = chosen()
    minutes, games, points = _learning_budget(b, minutes, games)
    machine = machine_info()
    runs = [("ntuple", True, "serial", 1, {}), ("cnn", True, "serial", 1, {}), ("mlp", True, "serial", 1, {}),
            ("mlp", False, "serial", 1, {}), ("ntuple", True, "shared", 2, {"lock": False})]
    if b.smoke:  # a second each: enough to see that every kind of run works
        runs = [r for r in runs if r[0] == "ntuple" or r[:2] == ("mlp", True)]
    rows: list[dict[str, Any]] = []
    with RunsProgress(60.0 * minutes * len(runs), f"{len(runs)} learners") as bar:
        for network, afterstate, scheme, workers, options in runs:
            cfg = learning_config(network, afterstate, b=b)
            overrides = {k: v for k, v in cfg.to_dict().items() if k not in ("seed", "max_seconds", "total_env_steps")}
            label = f"{network}{'' if afterstate else ' (no afterstates)'}, {scheme} x{workers}"
            rows += learning_curve(family_preset(network, afterstate), scheme, workers, minutes, points, games,
                                   seed=seed, options=options, overrides=overrides,
                                   callback=bar.run(label, 60.0 * minutes))
    return {"machine": machine, "minutes": minutes, "games": games, "rows": rows,
            "time_to_player": time_to_player(rows)}


def replay_data(minutes: float | None = None, games: int | None = None, seeds: tuple[int, ...] = (0,),
                variants: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Learning curves of the ``ntuple-small`` preset (serial) with each of ``variants``: plain
    replay, prioritized replay, 3-step returns and both (what ``python -m dqnlab bench learning
    --presets ntuple-small --variants plain,prioritized,n_step=3,prioritized+n_step=3`` measures).

    Budget: ``minutes`` per run (default 3; in smoke mode 1/120, with the smoke settings of
    :func:`learning_config`, one point at its end), ``games`` greedy games per point (default 1,000; 32), each of
    ``seeds``; ``variants`` default :data:`REPLAY_VARIANTS` (in smoke mode plain and
    ``prioritized+n_step=3``). Returns the :func:`dqnlab.bench.learning.bench_learning`-shaped dict.

    Raises
    ------
    ValueError
        For a variant that is not ``TrainConfig`` fields (checked before anything trains).
    """
    b = chosen()
    variants = b.pick(REPLAY_VARIANTS, _SMOKE_REPLAY_VARIANTS) if variants is None else variants
    base = learning_config("ntuple", b=b) if b.smoke else TrainConfig.preset("ntuple-small")
    return _variants_data("ntuple-small", base, variants, b, minutes, games, seeds)


def methods_data(minutes: float | None = None, games: int | None = None, seeds: tuple[int, ...] = (0,),
                 variants: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Learning curves of the ``ntuple`` preset (serial, 4x6 tuples, plain TD(0)) with each of the n-tuple field's
    learning methods in ``variants`` (default :data:`METHOD_VARIANTS`: what ``python -m dqnlab bench
    learning --presets ntuple --schemes serial --variants ...`` measures with them; in smoke mode plain and
    every method at once, on the smoke settings' small tables). Budget and result as :func:`replay_data`.

    Raises
    ------
    ValueError
        For a variant that is not ``TrainConfig`` fields (checked before anything trains).
    """
    b = chosen()
    variants = b.pick(METHOD_VARIANTS, _SMOKE_METHOD_VARIANTS) if variants is None else variants
    return _variants_data("ntuple", learning_config("ntuple", b=b), variants, b, minutes, games, seeds)


def _variants_data(preset: str, base: TrainConfig, variants: tuple[str, ...], b: Budget, minutes: float | None,
                   games: int | None, seeds: tuple[int, ...]) -> dict[str, Any]:
    """Serial learning curves of ``preset`` with ``base``'s fields and each of ``variants`` on top, each seed."""
    minutes, games, points = _learning_budget(b, minutes, games)
    extras = [parse_variant(v) for v in variants]
    overrides = {k: v for k, v in base.to_dict().items() if k not in ("seed", "max_seconds", "total_env_steps")}
    for extra in extras:
        base.replace(**extra)
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    with RunsProgress(60.0 * minutes * len(extras) * len(seeds), f"{len(extras) * len(seeds)} runs") as bar:
        for extra, name in zip(extras, variants):
            for seed in seeds:
                rows += learning_curve(preset, "serial", 1, minutes, points, games, seed=seed,
                                       overrides=overrides, variant=extra,
                                       callback=bar.run(f"{name}, seed {seed}", 60.0 * minutes))
    return {"machine": machine, "minutes": minutes, "games": games, "rows": rows,
            "time_to_player": time_to_player(rows)}


def step_sizes(run_dir: str | Path) -> dict[str, Any]:
    """Temporal coherence's step sizes in a run's checkpoint (``optimizer = "tc"``; the first learner's, in a
    scheme of several).

    Returns ``rates`` ``(K,)`` float32, ``|E| / A`` of every table entry trained so far (the fraction of
    ``lr`` it steps at now; one that was never trained steps at 1), ``trained`` ``(K,)`` float32, its ``A``
    (the sum of the magnitudes of its errors: how much training it has had), and ``stage`` ``(K,)`` int64, the
    stage whose tables hold it (``TrainConfig.stages``; 0 for a network of one stage).

    Raises
    ------
    ValueError
        If the run did not learn by temporal coherence (or holds no checkpoint: FileNotFoundError).
    """
    from ..config import resolve_tuples
    from ..runtime.checkpoint import load_checkpoint

    payload = load_checkpoint(run_dir)
    sums = _find_sums(payload.get("state"))
    if payload["config"].get("optimizer") != "tc" or sums is None:
        raise ValueError(f"run_dir {str(run_dir)!r} holds no run trained with optimizer='tc'")
    errors, abs_errors = sums
    trained = np.flatnonzero(abs_errors > 0)
    set_rows = sum(16 ** len(t) for t in resolve_tuples(payload["config"]["ntuples"]))
    return {"rates": np.abs(errors[trained]) / abs_errors[trained], "trained": abs_errors[trained],
            "stage": trained // set_rows, "stages": tuple(payload["config"].get("stages", ()))}


def _find_sums(obj: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Temporal coherence's ``E`` and ``A`` ``(R,)`` float32 from the first optimiser state below ``obj`` that
    holds them (its ``sums``)."""
    if isinstance(obj, dict):
        if "sums" in obj:
            sums = np.asarray(obj["sums"], np.float32).reshape(-1, 2)
            return sums[:, 0], sums[:, 1]
        children = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    else:
        return None
    for child in children:
        found = _find_sums(child)
        if found is not None:
            return found
    return None


def step_size_figure(run_dir: str | Path):
    """08: temporal coherence's step sizes in a run (:func:`step_sizes`): the median step size (a fraction of
    ``lr``) of the entries against how much training they have had (``A``, log bins), one line per stage, and
    how many entries each stage has trained."""
    data = step_sizes(run_dir)
    fig, (left, right) = new_figure(1, 2, figsize=(10, 3.6))
    names = [f"below {data['stages'][0]:,}" if data["stages"] else "all boards"]
    names += [f"from {t:,}" for t in data["stages"]]
    trained = np.maximum(data["trained"], np.float32(1e-12))
    edges = np.logspace(np.log10(trained.min()), np.log10(trained.max()) + 1e-6, 25)
    for k, name in enumerate(names):
        mine = data["stage"] == k
        where = np.digitize(trained[mine], edges) - 1
        used = np.unique(where)
        if len(used):
            medians = [float(np.median(data["rates"][mine][where == i])) for i in used]
            left.plot(np.sqrt(edges[used] * edges[used + 1]), medians, marker=".", label=f"stage {k} ({name})")
    left.set(xscale="log", yscale="log", xlabel="training the entry has had (A: the sum of its |errors|)",
             ylabel="median step size |E| / A (fraction of lr)", title="temporal coherence: the step sizes")
    legend_or_no_data(left, fontsize=8)
    counts = [int((data["stage"] == k).sum()) for k in range(len(names))]
    right.bar([f"stage {k}" for k in range(len(names))], counts)
    right.set(ylabel="table entries trained", title="the stage split")
    return fig


def _learning_budget(b: Budget, minutes: float | None, games: int | None
                     ) -> tuple[float, int, tuple[float, ...]]:
    """``(minutes, games, points)`` of a run of :func:`learning_data` or :func:`replay_data`: those given,
    else ``b``'s (3 minutes, 1,000 games, the points of :data:`~dqnlab.bench.learning.POINTS`; in smoke mode
    ``b.run_s``, 32 games, at the end only: one segment per run)."""
    minutes = b.pick(3.0, b.run_s / 60.0) if minutes is None else minutes
    games = b.pick(1_000, 32) if games is None else games
    return minutes, games, b.pick(POINTS, (1.0,))


def learning_figure(data: dict[str, Any]):
    """Greedy mean score and the share of games reaching 2048, 4096 and 8192 against minutes of training,
    one line per configuration, each in a colour of its own: 08's network families (and ``ntuple`` on 2 workers),
    or a scheme beside serial (:func:`scheme_learning`); minutes in plain numbers."""
    _, axes = new_figure(2, 2, figsize=(10, 6.5))
    fig = draw_learning_curves(data, axes.ravel(), colour_each=True)
    for ax in axes.ravel():
        plain_log_ticks(ax, "x")
    return fig


def scheme_learning(scheme: str | None, results: str | Path) -> dict[str, Any]:
    """The learning curves measured for ``scheme`` (each of its option sets and worker counts) and for
    ``serial``, from a learning record of the results store (:mod:`dqnlab.bench.store`; the repository's
    ``docs/results/learning-schemes.json``, say), or every scheme in it for None.

    Returns
    -------
    dict
        The record (``minutes``, ``games``, ``runs``: the commands, commits and machines) with only those
        ``rows`` and their ``time_to_player``; ``measured``: whether the record has ``scheme`` at all.

    Raises
    ------
    ValueError
        For a name that is not a scheme, or a file that is not a learning record.
    FileNotFoundError
        If ``results`` does not exist.
    """
    from ..schemes import SCHEMES

    if scheme is not None and scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)} or None, got {scheme!r}")
    res = load(results)
    if res["kind"] != "learning":
        raise ValueError(f"results {str(results)!r} is a {res['kind']!r} record, not a learning record")
    rows = [r for r in res["rows"] if scheme is None or r["scheme"] in (scheme, "serial")]
    return {**res, "rows": rows, "time_to_player": time_to_player(rows),
            "measured": scheme is None or any(r["scheme"] == scheme for r in rows)}
