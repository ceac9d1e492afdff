"""The whole recipe in one resumable command: data, base evals, train x (arm, seed), evals, cross-play,
the paired comparison, `results.json` and the report.

    out/
      config.json                 the config of the recipe (every field)
      data/                       built problems (GSM8K) and their eligibility
      runs/{arm}-s{seed}/         one training run each (see talktosolve.train)
      evals/{name}/               chats.jsonl + summary.json per evaluation (see talktosolve.evaluate)
      results.json                every figure and check, computed from the folders above
      report.md, report.html, plots/

With `train.runs_per_process=N` the runs train N at a time in this process, in fixed groups of the (arm, seed)
order (see `train.train_runs`); with `parallel_runs=N`, N at a time in separate processes.

Each stage's output carries the config key that produced it (`done.json`, `summary.json`), so a rerun skips
what is finished under the same config, resumes a training run from its last checkpoint, and redoes what a
changed setting made stale. Evaluation names: `base-{arm}` (the untrained pair), `{arm}-s{seed}` (a trained
model as both copies, in its own arm), `cross-{arm}-s{seed}` (trained A with the untrained base as B).
"""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

from talktosolve import __version__
from talktosolve.config import Config
from talktosolve.evaluate import evaluate
from talktosolve.stats import mean_ci, paired_delta_report
from talktosolve.store import read_jsonl, write_json
from talktosolve.tasks import load_problems, split_checks
from talktosolve.train import train, train_runs

CUT_MARGIN = 0.05
"""The cut arm counts as 'near the base or below' when its accuracy is at most the base pair's + this."""


def run_name(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


def run_recipe(cfg: Config, out: Path, *, preset: str = "custom", progress: bool = True,
               loggers_for=None) -> dict:
    """Run (or resume) the recipe into `out`; returns results.json's content."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(out / "config.json", {"preset": preset, **cfg.to_dict()})
    train_set, test_set, eligibility = load_problems(cfg, out / "data")
    test_set = test_set[: cfg.eval.n_problems]

    def ev(name, arm, a=None, b=None):
        return evaluate(cfg, test_set, out / "evals" / name, arm=arm, player_a=a, player_b=b,
                        progress=progress, label=f"eval {name}")

    if cfg.parallel_runs > 1:
        train_in_parallel(cfg, out)
    elif cfg.train.runs_per_process > 1:
        k = cfg.train.runs_per_process
        runs = [(arm, seed, out / "runs" / run_name(arm, seed)) for arm in cfg.arms for seed in cfg.seeds]
        for group in (runs[i:i + k] for i in range(0, len(runs), k)):  # fixed groups: a rerun resumes the same
            train_runs(cfg, group, train_set, progress=progress,
                       loggers=[loggers_for(run_name(a, s)) if loggers_for else () for a, s, _ in group])
    evals = {f"base-{arm}": ev(f"base-{arm}", arm) for arm in ("chat", "cut")}
    for arm in cfg.arms:
        for seed in cfg.seeds:
            name = run_name(arm, seed)
            run_dir = out / "runs" / name
            loggers = loggers_for(name) if loggers_for else ()
            train(cfg, arm, seed, run_dir, train_set, progress=progress, loggers=loggers)
            evals[name] = ev(name, arm, str(run_dir), str(run_dir))
            evals[f"cross-{name}"] = ev(f"cross-{name}", arm, str(run_dir), None)
    results = build_results(cfg, out, evals, train_set + test_set, eligibility, preset)
    results["run"]["started"] = started
    results["run"]["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    from talktosolve.report import write_report
    from talktosolve.results import validate_results

    validate_results(results)
    write_json(out / "results.json", results)
    write_report(results, out)
    return results


def train_in_parallel(cfg: Config, out: Path) -> None:
    """Train the pending (arm, seed) runs `cfg.parallel_runs` at a time, each a `talktosolve train` process.

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

    from talktosolve.train import TrainingError, is_done

    pending = [(a, s) for a in cfg.arms for s in cfg.seeds if not is_done(out / "runs" / run_name(a, s), cfg, a, s)]
    if not pending:
        return
    config_file = out / "train_config.json"
    write_json(config_file, cfg.to_dict())
    gpus = torch.cuda.device_count() if cfg.device in ("auto", "cuda") else 0
    slots: queue.Queue = queue.Queue()
    for k in range(cfg.parallel_runs):
        slots.put(k)

    def run(arm: str, seed: int) -> bool:
        slot = slots.get()
        try:
            env = dict(os.environ)
            if gpus:
                env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
            else:  # share the cores: oversubscribed OpenMP threads spin and slow every process down
                env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // cfg.parallel_runs))
            cmd = [sys.executable, "-m", "talktosolve.cli", "train", "--preset", str(config_file), "--arm", arm,
                   "--seed", str(seed), "--out", str(out / "runs" / run_name(arm, seed)), "--quiet"]
            return subprocess.run(cmd, env=env).returncode == 0
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(cfg.parallel_runs) as pool:
        ok = list(pool.map(lambda job: run(*job), pending))
    failed = [run_name(a, s) for (a, s), good in zip(pending, ok) if not good]
    if failed:
        raise TrainingError(f"parallel training failed for {', '.join(failed)}; rerun the recipe to resume them "
                            "(or set parallel_runs=1 to see the error in this process).")


def cut_never_sees_partner(chats_files: list[Path], chat_cfg) -> bool:
    """Transcript check: no cut-arm view depends on the partner's words.

    For every message of every cut-arm chat, the view stored in the transcript must equal the view rebuilt with
    each of the partner's messages replaced by junk it cannot contain. Equality means the partner's words were
    nowhere in what the copy saw (a substring search would be fooled by short messages such as `yes`).
    """
    from talktosolve.chat import SPEAKERS, Seat, view

    for path in chats_files:
        for chat in read_jsonl(path):
            if chat["arm"] != "cut":
                continue
            msgs = [m["text"] for m in chat["messages"]]
            seats = {"A": Seat(chat["facts_a"], chat["question"]), "B": Seat(chat["facts_b"], chat["question"])}
            for i, m in enumerate(chat["messages"]):
                me = SPEAKERS[i]
                junk = [t if SPEAKERS[j] == me else f"\x00partner-{j}\x00" for j, t in enumerate(msgs[:i])]
                if m["view"] != view(seats[me], i, junk, "cut", chat_cfg):
                    return False
    return True


def build_results(cfg: Config, out: Path, evals: dict, problems: list, eligibility: dict | None,
                  preset: str) -> dict:
    import numpy as np

    seeds = list(cfg.seeds)
    base = evals["base-chat"]["accuracy"]
    arms = {}
    for arm in cfg.arms:
        matrix = np.array([evals[run_name(arm, s)]["scores"] for s in seeds])  # [S, P]
        acc, lo, hi = mean_ci(matrix)
        per_seed = {}
        for s in seeds:
            m, l, h = mean_ci(np.array([evals[run_name(arm, s)]["scores"]]))
            per_seed[str(s)] = {"accuracy": m, "lo": l, "hi": h,
                                "cross_play": evals[f"cross-{run_name(arm, s)}"]["accuracy"]}
        arms[arm] = {"seeds": per_seed, "accuracy": acc, "lo": lo, "hi": hi}
    comparison = None
    if "chat" in cfg.arms and "cut" in cfg.arms:
        comparison = paired_delta_report(
            np.array([evals[run_name("chat", s)]["scores"] for s in seeds]),
            np.array([evals[run_name("cut", s)]["scores"] for s in seeds]))
    checks = dict(split_checks(problems))
    checks.pop("n_checked")
    cut_files = [out / "evals" / n / "chats.jsonl" for n in evals if evals[n]["arm"] == "cut"]
    cut_files += [out / "runs" / run_name("cut", s) / "transcripts.jsonl" for s in seeds if "cut" in cfg.arms]
    checks["cut_never_sees_partner"] = cut_never_sees_partner(cut_files, cfg.chat)
    checks["interval_excludes_zero"] = bool(comparison and comparison["excludes_zero"])
    if "chat" in cfg.arms:
        checks["chat_beats_base"] = {str(s): evals[run_name("chat", s)]["accuracy"] > base for s in seeds}
        checks["cross_play_below_pair"] = {
            str(s): evals[f"cross-{run_name('chat', s)}"]["accuracy"] < evals[run_name("chat", s)]["accuracy"]
            for s in seeds}
    if "cut" in cfg.arms:
        checks["cut_near_base"] = {str(s): evals[run_name("cut", s)]["accuracy"] <= base + CUT_MARGIN for s in seeds}
    curves = {}
    train_seconds = 0.0
    for arm in cfg.arms:
        for s in seeds:
            rows = read_jsonl(out / "runs" / run_name(arm, s) / "metrics.jsonl")
            train_seconds += sum(r["perf/seconds"] for r in rows)
            curves[run_name(arm, s)] = [{"step": r["step"], "reward": r["train/reward"], "send": r["talk/send"],
                                         "use": r["talk/use"], "ask": r["talk/ask"]} for r in rows]
    return {
        "schema_version": 1,
        "preset": preset,
        "config": cfg.to_dict(),
        "run": run_facts(cfg, train_seconds + sum(e.get("seconds", 0.0) for e in evals.values()), train_seconds),
        "data": {"n_train": cfg.data.n_train, "n_test": cfg.data.n_test,
                 "eligibility": {k: v["by_reason"] for k, v in eligibility["splits"].items()} if eligibility else None},
        "evals": {name: eval_entry(e, out) for name, e in evals.items()},
        "arms": arms,
        "comparison": comparison,
        "checks": checks,
        "curves": curves,
    }


def eval_entry(summary: dict, out: Path) -> dict:
    """An evaluation's figures for results.json: its summary, with a 95% interval over its problems, and its
    players named relative to the recipe folder (so a moved or copied folder gives the same results)."""
    import os

    import numpy as np

    _, lo, hi = mean_ci(np.array([summary["scores"]]))
    entry = {k: v for k, v in summary.items() if k not in ("scores", "problem_ids", "key")}
    entry.update(lo=lo, hi=hi)
    for key in ("player_a", "player_b"):
        if entry[key] != "base":
            entry[key] = os.path.relpath(entry[key], out)
    return entry


def run_facts(cfg: Config, seconds: float, train_seconds: float) -> dict:
    import peft
    import torch
    import transformers

    from talktosolve.policy import resolve_device

    device = resolve_device(cfg.device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "model": cfg.model.name_or_path,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "peft": peft.__version__, "talktosolve": __version__},
        "arms": list(cfg.arms), "seeds": list(cfg.seeds), "steps": cfg.train.steps,
        "device": str(device), "gpu": gpu,
        # Compute time of every stage, summed from the stages' own records (stable when a rerun skips them).
        "wall_seconds": seconds, "train_seconds": train_seconds,
        "gpu_seconds": seconds if gpu else None,
    }
