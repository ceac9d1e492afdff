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

What is trained is a list of `Line`s, each one run per seed: every arm of `arms`, and the `variant` when the
config names one (an arm trained with other settings, e.g. base partners; its runs are `{variant}-s{seed}`).

Evaluations are `EvalSpec` records (an arm, and who plays each seat: a run or the base; `recipe_evals`): the
untrained team in each arm, each trained run in every seat, cross-play (the run in the first seat, the base in
the others) and its other side (the base in the first seat, the run in the others), each in the run's own arm;
with `eval.cross_seed`, each run in the first seat with every other run of its line in the others (the
cross-seed matrix, `crossplay`). Their folder names (`base-chat`, `chat-s0`, `cross-chat-s0`,
`cross-others-chat-s0`, `chat-s0-with-chat-s1`) are for reading only; results.json records each evaluation's
arm and seats. Each evaluation runs as soon as the runs it seats are trained; with `eval.batch_evals=N` (N > 1)
every run trains first and the evaluations then run N at a time in shared engine passes
(`evaluate.evaluate_teams`), each still written to its own folder.
"""

from __future__ import annotations

import dataclasses
import datetime
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path

from talktosolve import __version__
from talktosolve.arms import ARMS, comparison_name
from talktosolve.team.chat import Seat, view
from talktosolve.config import Config
from talktosolve.cpu_pins import is_cpu_run, late, pin_cpu, record
from talktosolve.experiment.crossplay import against_arm, cross_seed_matrix
from talktosolve.experiment.evaluate import Team, evaluate_teams
from talktosolve.team.influence import includes_zero
from talktosolve.stats import mean_ci, paired_delta_report, run_delta_report
from talktosolve.store import read_jsonl, write_json
from talktosolve.protocol import Protocol, protocol_of, swapped_roles
from talktosolve.experiment.results import eval_kind, run_name, seed_checks
from talktosolve.task.tasks import load_problems, split_checks
from talktosolve.experiment.train import train, train_runs


@dataclass(frozen=True)
class EvalSpec:
    """One evaluation of the recipe: an arm, and who plays each seat (a run's name, or None for the base)."""

    arm: str
    seats: tuple[str | None, ...]
    """One entry per seat of the protocol, in its order."""
    roles: tuple[str, ...] | None = None
    """Per-role runs: the seat whose weights each seat plays (a role swap); None: each seat its own."""

    @property
    def name(self) -> str:
        """For display and the folder only; nothing reads an evaluation's identity back from it. Its kind is read
        as results.json's readers read it (`results.eval_kind`)."""
        kind, run = eval_kind({"seats": {k: run or "base" for k, run in enumerate(self.seats)},
                               **({"roles": self.roles} if self.roles else {})})
        if kind == "cross_seed":
            return f"{run}-with-{self.seats[1]}"
        return {"base": f"base-{self.arm}", "team": run, "cross": f"cross-{run}",
                "cross_others": f"cross-others-{run}", "role_swap": f"swap-{run}"}[kind]

    def role_map(self, seats) -> dict[str, str] | None:
        """`{seat: the seat whose weights play it}` (`evaluate`'s `roles`), or None."""
        return None if self.roles is None else dict(zip(seats, self.roles))


@dataclass
class Line:
    """One line of trained runs, one per seed: an arm of the recipe, or its variant (an arm trained otherwise)."""

    name: str
    """The arm's name, or the variant's; its runs are `{name}-s{seed}`."""
    arm: str
    """The arm its runs play in."""
    cfg: Config
    """The config its runs train with."""

    def runs(self, seeds) -> list[str]:
        return [run_name(self.name, s) for s in seeds]

    @property
    def per_role(self) -> bool:
        """Its runs train one set of weights per seat (`model.adapters=per_role`)."""
        return self.cfg.model.adapters == "per_role"


def trained_lines(cfg: Config) -> list[Line]:
    """The recipe's arms, then the variant (when `variant.name` is set), trained with its own settings."""
    lines = [Line(arm, arm, cfg) for arm in cfg.arms]
    v = cfg.variant
    if v.name:
        model = dataclasses.replace(cfg.model, adapters=v.adapters or cfg.model.adapters)
        lines.append(Line(v.name, v.arm, dataclasses.replace(cfg, model=model, train=dataclasses.replace(
            cfg.train, partners=v.partners, partner=v.partner or cfg.train.partner))))
    return lines


def recipe_evals(cfg: Config, protocol: Protocol) -> list[EvalSpec]:
    """The recipe's evaluations: the untrained team in each arm; for each trained run (of every line), the run
    in every seat, the run in the first seat with the base in the others (cross-play), and the base in the first
    seat with the run in the others (the other side), and for a run with per-role weights its role swap
    (`protocol.swapped_roles`); with `eval.cross_seed`, each run in the first seat with each other run of its
    line in the others."""
    n = len(protocol.seats)
    out = [EvalSpec(arm, (None,) * n) for arm in cfg.arms]
    swap = tuple(swapped_roles(protocol.seats).values())
    for line in trained_lines(cfg):
        for run in line.runs(cfg.seeds):
            out += [EvalSpec(line.arm, (run,) * n), EvalSpec(line.arm, (run,) + (None,) * (n - 1)),
                    EvalSpec(line.arm, (None,) + (run,) * (n - 1))]
            if line.per_role:
                out.append(EvalSpec(line.arm, (run,) * n, swap))
    if cfg.eval.cross_seed:
        for line in trained_lines(cfg):
            runs = line.runs(cfg.seeds)
            out += [EvalSpec(line.arm, (a,) + (b,) * (n - 1)) for a in runs for b in runs if a != b]
    return out


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
        train_in_parallel(lines, cfg, out)
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
                if spec not in evals and name in spec.seats and set(spec.seats) - {None} <= trained and not together:
                    evals[spec] = ev(spec)
    if together:
        evals = dict(zip(specs, evaluate_teams(cfg, [team(spec) for spec in specs], test_set, progress=progress)))
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


def replayed_teams(specs: list[EvalSpec]) -> list[EvalSpec]:
    """The evaluations the influence stage replays: one model in every seat (the untrained team, each run)."""
    return [spec for spec in specs if len(set(spec.seats)) == 1 and spec.roles is None]


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
    from talktosolve.store import read_json
    from talktosolve.experiment.train import is_done

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


def train_in_parallel(lines: list[Line], cfg: Config, out: Path) -> None:
    """Train the lines' pending runs `cfg.parallel_runs` at a time, each a `talktosolve train` process.

    Each process resumes or skips its run exactly as the sequential path would (same config, same folder), so
    the recipe's own loop then finds every run done. Each of the `parallel_runs` slots holds one process at a
    time; on a multi-GPU host slot k sees only GPU k mod count, so concurrent runs never share a GPU when there
    are enough of them.
    """
    import os
    import queue
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from talktosolve.experiment.train import TrainingError, is_done

    pending = [(line, s) for line in lines for s in cfg.seeds
               if not is_done(out / "runs" / run_name(line.name, s), line.cfg, line.arm, s)]
    if not pending:
        return
    config_files = {}
    for line in {line.name: line for line, _ in pending}.values():
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
                   "--quiet"]
            return subprocess.run(cmd, env=env).returncode == 0
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(cfg.parallel_runs) as pool:
        ok = list(pool.map(lambda job: run(*job), pending))
    failed = [run_name(line.name, s) for (line, s), good in zip(pending, ok) if not good]
    if failed:
        raise TrainingError(f"parallel training failed for {', '.join(failed)}; rerun the recipe to resume them "
                            "(or set parallel_runs=1 to see the error in this process).")


def views_respect_arms(chats_files: list[Path], protocol: Protocol, chat_cfg) -> bool:
    """Transcript check, for every arm: no seat ever saw what its arm hides from it.

    For every chat, each seat's recorded hand must be exactly what its arm deals it; and for every message, the
    view stored in the transcript must equal the view rebuilt from that hand with every message the arm hides
    from the writer replaced by junk it cannot contain. Equality means the hidden words and facts were nowhere in
    what the seat saw (a substring search would be fooled by short messages such as `yes`)."""
    for path in chats_files:
        for chat in read_jsonl(path):
            arm = ARMS[chat["arm"]].hiding(chat.get("hidden", ()))
            hands = arm.hands(chat["facts"], protocol.seats)
            if chat["hands"] != hands:
                return False
            msgs = [m["text"] for m in chat["messages"]]
            for i, m in enumerate(chat["messages"]):
                me = protocol.speaker(i)
                junk = [t if arm.shows(me, protocol.speaker(j), j) else f"\x00hidden-{j}\x00"
                        for j, t in enumerate(msgs[:i])]
                if m["view"] != view(Seat(hands[me], chat["question"]), i, junk, arm, protocol, chat_cfg):
                    return False
    return True


def build_results(cfg: Config, out: Path, evals: dict, problems: list, eligibility: dict | None,
                  preset: str, influence: dict | None = None) -> dict:
    """results.json (schema 2, docs/results.md) from the evaluations (`{EvalSpec: summary}`), the influence
    replays (`{EvalSpec: influence.json}`, or None when the stage is off) and run folders."""
    import numpy as np

    protocol = protocol_of(cfg.chat)
    n = len(protocol.seats)
    seeds = list(cfg.seeds)

    def find(arm: str, seats: tuple) -> dict:
        return evals[EvalSpec(arm, seats)]

    def pair(arm: str, seed: int) -> dict:
        return find(arm, (run_name(arm, seed),) * n)

    def scores(arm: str):
        return np.array([pair(arm, s)["scores"] for s in seeds])  # [S, P]

    # The untrained team the trained ones are held against: in the chat arm when it ran, else in the arm's own.
    def base(arm: str) -> dict:
        return find("chat" if "chat" in cfg.arms else arm, (None,) * n)

    def sides(line: Line) -> dict:
        """The line's per-problem scores [S, P]: its trained teams, cross-play and the other side."""
        runs = line.runs(seeds)
        return {"team": np.array([find(line.arm, (r,) * n)["scores"] for r in runs]),
                "cross": np.array([find(line.arm, (r,) + (None,) * (n - 1))["scores"] for r in runs]),
                "cross_others": np.array([find(line.arm, (None,) + (r,) * (n - 1))["scores"] for r in runs])}

    swap = tuple(swapped_roles(protocol.seats).values())

    def summary(line: Line) -> dict:
        """A line's trained teams (pooled and per seed) and cross-play; per seed, the trained team minus the base
        team and minus its cross-play (paired over problems: the checks read them); for per-role runs, the role
        swap: per seed, and the trained team minus the swapped one (paired)."""
        team = sides(line)["team"]
        acc, lo, hi = mean_ci(team)
        per_seed = {}
        for s, run in zip(seeds, line.runs(seeds)):
            own, cross = find(line.arm, (run,) * n), find(line.arm, (run,) + (None,) * (n - 1))
            m, l, h = mean_ci(np.array([own["scores"]]))
            per_seed[str(s)] = {"accuracy": m, "lo": l, "hi": h,
                                "cross_play": cross["accuracy"],
                                "cross_play_others": find(line.arm, (None,) + (run,) * (n - 1))["accuracy"],
                                "minus_base": run_delta_report(own["scores"], base(line.arm)["scores"]),
                                "minus_cross_play": run_delta_report(own["scores"], cross["scores"])}
            if line.per_role:
                per_seed[str(s)]["role_swap"] = evals[EvalSpec(line.arm, (run,) * n, swap)]["accuracy"]
        out = {"seeds": per_seed, "accuracy": acc, "lo": lo, "hi": hi}
        if line.per_role:
            swapped = np.array([evals[EvalSpec(line.arm, (r,) * n, swap)]["scores"] for r in line.runs(seeds)])
            out["role_swap"] = paired_delta_report(team, swapped)
        return out

    lines = trained_lines(cfg)
    arms = {line.name: summary(line) for line in lines if line.name in cfg.arms}
    # null where one of its arms was not run
    comparisons = {comparison_name((a, b)): {"a": a, "b": b, **paired_delta_report(scores(a), scores(b))}
                   if a in cfg.arms and b in cfg.arms else None for a, b in cfg.comparisons}
    checks = dict(split_checks(problems, protocol.seats))
    checks.pop("n_checked")
    files = [out / "evals" / spec.name / "chats.jsonl" for spec in evals]
    files += [out / "runs" / run / "transcripts.jsonl" for line in lines for run in line.runs(seeds)]
    checks["views_respect_arms"] = views_respect_arms(files, protocol, cfg.chat)
    checks["interval_excludes_zero"] = {k: None if c is None else c["excludes_zero"] for k, c in comparisons.items()}
    checks.update(seed_checks(arms, seeds))
    influence_entry = influence_results(cfg, protocol, influence) if influence is not None else None
    checks["cut_influence_zero"] = (
        includes_zero([f for name, e in influence_entry["evals"].items() if e["arm"] == "cut" for f in e["figures"]])
        if influence_entry is not None and "cut" in cfg.arms else None)
    curves = {}
    train_seconds = 0.0
    runs = {}
    for line in lines:
        for s, name in zip(seeds, line.runs(seeds)):
            runs[name] = {"arm": line.arm, "seed": s, **({} if line.name in cfg.arms else {"variant": line.name})}
            rows = read_jsonl(out / "runs" / name / "metrics.jsonl")
            train_seconds += sum(r["perf/seconds"] for r in rows)
            curves[name] = [{"step": r["step"], "reward": r["train/reward"], "send": r["talk/send"],
                             "use": r["talk/use"], "ask": r["talk/ask"]} for r in rows]
    extra = {}
    if cfg.eval.cross_seed:
        extra["cross_seed"] = {
            line.name: {"arm": line.arm, **cross_seed_matrix(
                line.runs(seeds), lambda a, b, arm=line.arm: find(arm, (a,) + (b,) * (n - 1))["scores"])}
            for line in lines}
    if cfg.variant.name:
        variant, of = lines[-1], next(line for line in lines if line.name == cfg.variant.arm)
        extra["variant"] = {"name": variant.name, "arm": variant.arm, "partners": cfg.variant.partners,
                            "partner": variant.cfg.train.partner, "adapters": variant.cfg.model.adapters,
                            **summary(variant),
                            "against_arm": against_arm(sides(variant), sides(of))}
    return {
        "schema_version": 2,
        "preset": preset,
        "config": cfg.to_dict(),
        "run": run_facts(cfg, protocol, train_seconds + sum(e.get("seconds", 0.0) for e in evals.values())
                         + sum(r["seconds"] for r in (influence or {}).values()), train_seconds),
        "data": {"n_train": cfg.data.n_train, "n_test": cfg.data.n_test,
                 "eligibility": {k: v["by_reason"] for k, v in eligibility["splits"].items()} if eligibility else None},
        "runs": runs,
        "evals": {spec.name: eval_entry(spec, e, protocol) for spec, e in evals.items()},
        "arms": arms,
        "comparisons": comparisons,
        "checks": checks,
        "curves": curves,
        "influence": influence_entry,
        **extra,
    }


def influence_results(cfg: Config, protocol: Protocol, influence: dict) -> dict:
    """results.json's `influence`: each replayed evaluation's figures, and per arm the untrained team's, the
    trained runs' pooled over seeds, and trained minus untrained (docs/results.md)."""
    from talktosolve.team.influence import Outcome, differences, figures

    writers = {t: protocol.speaker(t) for t in range(protocol.n_turns)}
    outcomes = {spec: [Outcome(**o) for o in rep["outcomes"]] for spec, rep in influence.items()}
    n = len(protocol.seats)
    arms = {}
    for arm in cfg.arms:
        base = outcomes[EvalSpec(arm, (None,) * n)]
        trained = [outcomes[EvalSpec(arm, (run_name(arm, s),) * n)] for s in cfg.seeds]
        arms[arm] = {"base": figures([base], writers), "trained": figures(trained, writers),
                     "trained_minus_base": differences(trained, [base])}
    return {
        "n_problems": min(cfg.eval.influence_problems, cfg.eval.n_problems),
        "kinds": list(cfg.eval.influence_kinds),
        "evals": {spec.name: {"arm": spec.arm, "seats": {seat: run or "base" for seat, run in zip(protocol.seats, spec.seats)},
                              "reproduced": rep["reproduced"], "seconds": rep["seconds"], "figures": rep["figures"]}
                  for spec, rep in influence.items()},
        "arms": arms,
    }


def eval_entry(spec: EvalSpec, summary: dict, protocol: Protocol) -> dict:
    """An evaluation's figures for results.json: its summary, with a 95% interval over its problems, and who sat
    in each seat as a record (`base` or the run's name), so a moved or copied folder gives the same results."""
    import numpy as np

    _, lo, hi = mean_ci(np.array([summary["scores"]]))
    entry = {k: v for k, v in summary.items() if k not in ("scores", "problem_ids", "key", "seats", "roles")}
    entry.update(lo=lo, hi=hi, seats={seat: run or "base" for seat, run in zip(protocol.seats, spec.seats)})
    if spec.roles is not None:
        entry["roles"] = spec.role_map(protocol.seats)
    return entry


def run_facts(cfg: Config, protocol: Protocol, seconds: float, train_seconds: float) -> dict:
    import peft
    import torch
    import transformers

    from talktosolve.model.policy import resolve_device

    device = resolve_device(cfg.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "model": cfg.model.name_or_path,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "peft": peft.__version__, "talktosolve": __version__,
                     # CPU kernels round differently by instruction set, so a CPU run repeats bit for bit only
                     # where this matches.
                     "cpu_capability": torch.backends.cpu.get_cpu_capability()},
        "protocol": protocol.to_json(),
        "arms": list(cfg.arms), "seeds": list(cfg.seeds), "steps": cfg.train.steps,
        "device": str(device), "gpu": gpu,
        # What a CPU run's figures depend on beside the versions: its pins and threads (`cpu_pins`).
        "cpu": record() if device.type == "cpu" else None,
        # Compute time of every stage, summed from the stages' own records (stable when a rerun skips them).
        "wall_seconds": seconds, "train_seconds": train_seconds,
        "gpu_seconds": seconds if gpu else None,
    }
