"""The whole recipe in one resumable command: data, base evals, train x (arm, seed), evals, cross-play,
the paired comparison, `results.json` and the report.

    out/
      config.json                 the config of the recipe (every field)
      data/                       built problems (GSM8K) and their eligibility
      runs/{arm}-s{seed}/         one training run each (see talktosolve.experiment.train)
      pool/{arm}/                 with train.pool_chats: the untrained team on the training set (`pool.py`)
      evals/{name}/               chats.jsonl + summary.json per evaluation (see talktosolve.experiment.evaluate)
      results.json                every figure and check, computed from the folders above
      report.md, report.html, plots/

With `train.runs_per_process=N` the runs train N at a time in this process, in fixed groups of the (arm, seed)
order (see `train.train_runs`); with `parallel_runs=N`, N at a time in separate processes.

Each stage's output carries the config key that produced it (`done.json`, `summary.json`), so a rerun skips
what is finished under the same config, resumes a training run from its last checkpoint, and redoes what a
changed setting made stale.

The plan (`plan.py`: which runs a config trains, which evaluations it makes) and the assembly of results.json
(`assemble.py`) live apart; this module runs the stages in order. Each evaluation runs as soon as the runs it
seats are trained; with `eval.batch_evals=N` (N > 1) every run trains first and the evaluations then run N at a
time in shared engine passes (`evaluate.evaluate_teams`), each still written to its own folder. Where every run
trains before the evaluations (those, `parallel_runs` or `train.runs_per_process` above 1), the teams of one model
in every seat go first (`plan.headline_first`), so a recipe stopped during its evaluations holds the comparison.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path

from talktosolve.config import Config
from talktosolve.cpu_pins import is_cpu_run, late, pin_cpu
from talktosolve.experiment.assemble import build_results
from talktosolve.experiment.evaluate import Team, evaluate_teams
from talktosolve.experiment.plan import (
    EvalSpec,
    Line,
    headline_first,
    recipe_evals,
    replayed_teams,
    run_name,
    trained_lines,
)
from talktosolve.experiment.train import train, train_runs
from talktosolve.protocol import Protocol, protocol_of
from talktosolve.store import write_json
from talktosolve.task.tasks import load_problems


def run_recipe(cfg: Config, out: Path, *, preset: str = "custom", progress: bool = True,
               loggers_for=None) -> dict:
    """Run (or resume) the recipe into `out`; returns results.json's content. A CPU run is pinned to one numeric
    path first (`cpu_pins`: the CLI does it before torch loads; here a warning says when torch came first)."""
    if is_cpu_run(cfg.device):
        pin_cpu()
        missed = late()
        if missed:
            warnings.warn(missed, stacklevel=2)
    out = Path(out)
    resuming = (out / "config.json").is_file()
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(out / "config.json", {"preset": preset, **cfg.to_dict()})
    protocol = protocol_of(cfg.chat)
    if resuming:
        import sys

        print(f"resuming {out}: {found_done(cfg, out, protocol)}", file=sys.stderr)
    train_set, test_set, eligibility = load_problems(cfg, out / "data")
    test_set = test_set[: cfg.eval.n_problems]

    def team(spec: EvalSpec) -> Team:
        seats = {seat: None if run is None else str(out / "runs" / run) for seat, run in zip(protocol.seats, spec.seats)}
        return Team(out / "evals" / spec.name, spec.arm, seats, spec.role_map(protocol.seats), f"eval {spec.name}")

    # With eval.batch_evals > 1 every run trains first and the evaluations then share engine passes; else each
    # evaluation runs as soon as the runs it seats are trained.
    together = cfg.eval.batch_evals > 1

    def ev(spec: EvalSpec) -> dict:
        return evaluate_teams(cfg, [team(spec)], test_set, progress=progress)[0]

    lines = trained_lines(cfg)
    if cfg.parallel_runs > 1:
        train_in_parallel(lines, cfg, out, train_set, progress)
    elif cfg.train.runs_per_process > 1:
        k = cfg.train.runs_per_process
        # Fixed groups: a rerun resumes the same. The arms' runs group as they did before variants existed.
        for group_lines in ([line for line in lines if line.name in cfg.arms],
                            [line for line in lines if line.name not in cfg.arms]):
            runs = [(line, seed) for line in group_lines for seed in cfg.seeds]
            for group in (runs[i:i + k] for i in range(0, len(runs), k)):
                train_runs(group[0][0].cfg, [(line.arm, s, out / "runs" / run_name(line.name, s)) for line, s in group],
                           train_set, progress=progress, pool_dir=out / "pool",
                           loggers=[loggers_for(run_name(line.name, s)) if loggers_for else () for line, s in group])
    specs = recipe_evals(cfg, protocol)
    evals: dict[EvalSpec, dict] = {}
    for spec in specs:
        if all(run is None for run in spec.seats) and not together:
            evals[spec] = ev(spec)
    # Runs trained above (in parallel, or several to a process) are done before any evaluation: theirs go after,
    # the teams' own first, as evaluations played together do.
    later = together or cfg.parallel_runs > 1 or cfg.train.runs_per_process > 1
    trained: set[str] = set()
    for line in lines:
        for seed in cfg.seeds:
            name = run_name(line.name, seed)
            loggers = loggers_for(name) if loggers_for else ()
            train(line.cfg, line.arm, seed, out / "runs" / name, train_set, progress=progress, loggers=loggers,
                  pool_dir=out / "pool")
            trained.add(name)
            # Each evaluation as soon as every run it seats is trained.
            for spec in specs:
                if spec not in evals and name in spec.seats and set(spec.seats) - {None} <= trained and not later:
                    evals[spec] = ev(spec)
    pending = [spec for spec in headline_first(specs) if spec not in evals]
    if together:
        evals.update(zip(pending, evaluate_teams(cfg, [team(spec) for spec in pending], test_set, progress=progress)))
    else:
        for spec in pending:
            evals[spec] = ev(spec)
    evals = {spec: evals[spec] for spec in specs}
    influence = replay_teams(cfg, out, specs, evals, progress) if cfg.eval.influence else None
    results = build_results(cfg, out, evals, train_set + test_set, eligibility, preset, influence)
    results["run"]["started"] = started
    results["run"]["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    from talktosolve.experiment.report import write_report
    from talktosolve.experiment.results import validate_results

    validate_results(results)
    write_json(out / "results.json", results)
    write_report(results, out)
    return results


def replay_teams(cfg: Config, out: Path, specs: list[EvalSpec], evals: dict, progress: bool) -> dict:
    """The influence stage: every team evaluation (one model in every seat: the untrained team and each trained
    run) replayed with messages ablated (`talktosolve.experiment.replay`); `{EvalSpec: influence.json's content}`."""
    import sys

    from talktosolve.experiment.replay import chosen_positions, estimate_seconds, replay_influence, replayed_messages

    protocol = protocol_of(cfg.chat)
    teams = replayed_teams(specs)
    chosen = chosen_positions(protocol, None)
    # Announced: only the replays that will run (a rerun reads the finished ones back).
    pending = [spec for spec in teams if not is_replayed(cfg, out, spec, evals[spec])]
    if pending:
        n_chats = min(cfg.eval.influence_problems, cfg.eval.n_problems) * cfg.eval.chats_per_problem
        messages = replayed_messages(protocol, chosen, n_chats, len(cfg.eval.influence_kinds))
        seconds = sum(estimate_seconds(evals[spec], protocol, messages) for spec in pending)
        print(f"influence: {len(pending)} evaluation{'s' if len(pending) > 1 else ''} x {messages} replayed messages, "
              f"about {seconds:.0f} s at the evaluations' own pace (eval.influence=false skips it)", file=sys.stderr)
    return {spec: replay_influence(cfg, out / "evals" / spec.name, progress=progress,
                                   label=f"influence {spec.name}") for spec in teams}


def is_replayed(cfg: Config, out: Path, spec: EvalSpec, summary: dict) -> bool:
    """Whether the evaluation's influence replays are finished under this config (as `replay_influence` tells)."""
    from talktosolve.experiment.replay import chosen_positions, influence_key
    from talktosolve.store import read_json

    done = out / "evals" / spec.name / "influence" / "influence.json"
    turns = [p.turn for p in chosen_positions(protocol_of(cfg.chat), None)]
    return done.is_file() and read_json(done).get("key") == influence_key(cfg, summary, turns)


def found_done(cfg: Config, out: Path, protocol: Protocol) -> str:
    """What a rerun finds finished under this config: runs trained, evaluations and influence replays done (each
    stage's record holds the key of the config that made it, as the stage itself checks)."""
    from talktosolve.experiment.evaluate import eval_key, is_current
    from talktosolve.experiment.train import is_done
    from talktosolve.store import read_json

    runs = [(line, s) for line in trained_lines(cfg) for s in cfg.seeds]
    trained = sum(is_done(out / "runs" / run_name(line.name, s), line.cfg, line.arm, s) for line, s in runs)
    specs = recipe_evals(cfg, protocol)

    def key(spec: EvalSpec) -> str:  # as the evaluation itself keys it (`evaluate.evaluate_teams`)
        seats = {seat: None if run is None else str(out / "runs" / run)
                 for seat, run in zip(protocol.seats, spec.seats)}
        return eval_key(cfg, spec.arm, seats, spec.role_map(protocol.seats))

    done = {spec for spec in specs if is_current(out / "evals" / spec.name, key(spec))}
    text = f"{trained} of {len(runs)} runs trained, {len(done)} of {len(specs)} evaluations done"
    if cfg.eval.influence:
        teams = replayed_teams(specs)
        replayed = sum(spec in done and is_replayed(cfg, out, spec, read_json(out / "evals" / spec.name /
                                                                              "summary.json")) for spec in teams)
        text += f", {replayed} of {len(teams)} influence replays done"
    return text


def train_in_parallel(lines: list[Line], cfg: Config, out: Path, train_set: list, progress: bool) -> None:
    """Train the lines' pending runs `cfg.parallel_runs` at a time, each a `talktosolve train` process.

    Each process resumes or skips its run exactly as the sequential path would (same config, same folder), so
    the recipe's own loop then finds every run done. Each of the `parallel_runs` slots holds one process at a
    time; on a multi-GPU host slot k sees only GPU k mod count, so concurrent runs never share a GPU when there
    are enough of them. With a training pool, each arm's pre-pass is played here first, into the recipe's
    `pool/`, and every process reads it from there (as the sequential path does).
    """
    import os
    import queue
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from talktosolve.experiment.train import TrainingError, is_done, training_pools

    pending = [(line, s) for line in lines for s in cfg.seeds
               if not is_done(out / "runs" / run_name(line.name, s), line.cfg, line.arm, s)]
    if not pending:
        return
    config_files = {}
    for line in {line.name: line for line, _ in pending}.values():
        # Each line's own config (a pre-pass another line of its arm played is read, not played again).
        training_pools(line.cfg, [line.arm], train_set, out / "pool", progress)
        config_files[line.name] = out / ("train_config.json" if line.name == line.arm
                                         else f"train_config-{line.name}.json")
        write_json(config_files[line.name], line.cfg.to_dict())
    gpus = torch.cuda.device_count() if cfg.device in ("auto", "cuda") else 0
    slots: queue.Queue = queue.Queue()
    for k in range(cfg.parallel_runs):
        slots.put(k)

    def run(line: Line, seed: int) -> bool:
        slot = slots.get()
        try:
            env = dict(os.environ)
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
            else:  # share the cores: oversubscribed OpenMP threads spin and slow every process down
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cfg.parallel_runs))
            cmd = [sys.executable, "-m", "talktosolve.cli", "train", "--preset", str(config_files[line.name]),
                   "--arm", line.arm, "--seed", str(seed), "--out", str(out / "runs" / run_name(line.name, seed)),
                   "--pool", str(out / "pool"), "--quiet"]
            return subprocess.run(cmd, env=env).returncode == 0
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(cfg.parallel_runs) as pool:
        ok = list(pool.map(lambda job: run(*job), pending))
    failed = [run_name(line.name, s) for (line, s), good in zip(pending, ok) if not good]
    if failed:
        raise TrainingError(f"parallel training failed for {', '.join(failed)}; rerun the recipe to resume them "
                            "(or set parallel_runs=1 to see the error in this process).")


