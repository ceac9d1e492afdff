"""The assembly of results.json (schema 2, docs/results.md) from what the recipe's stages wrote: each
evaluation's summary, the influence replays, the run folders' records and the transcripts' arm check.

It reads finished folders and computes; it trains and samples nothing (the recipe, `recipe.py`, runs the stages;
the plan, `plan.py`, says which there are).
"""

from __future__ import annotations

import platform
from pathlib import Path

from talktosolve import __version__
from talktosolve.arms import ARMS, comparison_name
from talktosolve.config import Config
from talktosolve.cpu_pins import record
from talktosolve.experiment.crossplay import against_arm, cross_seed_matrix
from talktosolve.experiment.plan import EvalSpec, Line, run_name, trained_lines
from talktosolve.experiment.results import seed_checks
from talktosolve.protocol import Protocol, protocol_of, swapped_roles
from talktosolve.stats import mean_ci, paired_delta_report, run_delta_report
from talktosolve.store import read_jsonl
from talktosolve.task.tasks import split_checks
from talktosolve.team.chat import Seat, view
from talktosolve.team.influence import includes_zero


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
