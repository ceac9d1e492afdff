"""Pool the seeds of several recipe folders of one config into one chat-vs-cut comparison: comparison.json.

A recipe compares its arms over its own seeds; the same recipe run again into a second folder with other seeds
(`--set seeds=3,4,5`) adds seeds to both arms. This reads each folder's evaluations (`evals/NAME/summary.json`, the
per-problem scores) and pools them as `talktosolve compare` does (`stats.paired_delta_report`, after the same
check that every evaluation covers the same problems), so the pooled figure is the one that command prints over
the same folders; the file names that command. Beside it: each arm's pooled accuracy (`stats.mean_ci_report`),
each folder's own comparison, and per seed the team's accuracy, send, use and cross-play, and the untrained pair
of each folder (all from its `results.json`). A folder may be a recipe's own or a committed copy holding
`results.json` and those evaluations' `summary.json` files.

    python bench/pool_seeds.py runs/paper runs/paper-3-5 --out comparison.json
"""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import numpy as np

from talktosolve.stats import mean_ci_report, paired_delta_report
from talktosolve.store import read_json

ARMS = ("chat", "cut")


def team(results: dict, name: str) -> dict:
    """An evaluation's accuracy, interval and talk, as results.json holds them."""
    e = results["evals"][name]
    return {"accuracy": e["accuracy"], "lo": e["lo"], "hi": e["hi"], "send": e["talk"]["send"],
            "use": e["talk"]["use"], "tokens_per_message": e["tokens_per_message"]}


def read_folder(folder: Path) -> dict:
    """One recipe folder: per arm, {seed: (eval folder, scores, figures)}, and its untrained pair's figures."""
    if not (folder / "results.json").is_file():
        raise SystemExit(f"{folder} holds no results.json: pool finished recipe folders (or copies of their "
                         "results.json and evals/*/summary.json).")
    results = read_json(folder / "results.json")
    missing = [a for a in ARMS if a not in results["arms"]]
    if missing:
        raise SystemExit(f"{folder}/results.json has no arm {', '.join(missing)}; this pools chat against cut.")
    arms = {}
    for arm in ARMS:
        arms[arm] = {}
        for seed, fig in results["arms"][arm]["seeds"].items():
            name = f"{arm}-s{seed}"
            if not (folder / "evals" / name / "summary.json").is_file():
                raise SystemExit(f"{folder} holds no evals/{name}/summary.json, whose per-problem scores the "
                                 "pooled interval needs; copy it from the recipe folder.")
            summary = read_json(folder / "evals" / name / "summary.json")
            if abs(summary["accuracy"] - results["evals"][name]["accuracy"]) > 1e-12:
                raise SystemExit(f"{folder}: evals/{name}/summary.json and results.json disagree on its accuracy; "
                                 "copy both from the same recipe folder.")
            figures = {**team(results, name), "cross_play": fig["cross_play"],
                       "cross_play_others": fig["cross_play_others"]}
            arms[arm][seed] = (folder / "evals" / name, summary, figures)
    untrained = {arm: team(results, f"base-{arm}") for arm in ARMS}
    return {"arms": arms, "untrained": untrained, "gpu_seconds": results["run"]["gpu_seconds"]}


def scores(entries: list[tuple[Path, dict, dict]], ids: list[str]) -> np.ndarray:
    """[seeds, problems], refusing an evaluation of other problems (as `talktosolve compare` does)."""
    for where, summary, _ in entries:
        if summary["problem_ids"] != ids:
            raise SystemExit(f"{where} was evaluated on other problems than the first evaluation; pooling needs "
                             "the same ones (recipes of one config).")
    return np.array([summary["scores"] for _, summary, _ in entries])


def compare(arms: dict[str, list]) -> dict:
    ids = arms["chat"][0][1]["problem_ids"]
    return paired_delta_report(scores(arms["chat"], ids), scores(arms["cut"], ids))


def pool(folders: list[Path], out: Path) -> dict:
    named = [f.resolve() for f in folders]
    twice = sorted({str(f) for f, real in zip(folders, named) if named.count(real) > 1})
    if twice:
        raise SystemExit(f"{', '.join(twice)}: named twice; pool each folder once.")
    read = {f: read_folder(f) for f in folders}
    base = out.parent.resolve()
    label = {f: real.relative_to(base).as_posix() if real.is_relative_to(base) else str(f)
             for f, real in zip(folders, named)}
    pooled: dict[str, list] = {arm: [] for arm in ARMS}
    seeds: dict[str, dict] = {arm: {} for arm in ARMS}
    for f, r in read.items():
        for arm in ARMS:
            for seed, entry in r["arms"][arm].items():
                if seed in seeds[arm]:
                    raise SystemExit(f"{f}: seed {seed} of the {arm} arm is also in another folder; pool folders "
                                     "of different seeds.")
                seeds[arm][seed] = entry[2]
                pooled[arm].append(entry)
    ids = pooled["chat"][0][1]["problem_ids"]
    arms = {}
    for arm in ARMS:
        rep = mean_ci_report(scores(pooled[arm], ids))
        arms[arm] = {"accuracy": rep["mean"], "lo": rep["lo"], "hi": rep["hi"], "n_seeds": rep["n_seeds"],
                     "seeds": dict(sorted(seeds[arm].items(), key=lambda kv: int(kv[0])))}
    command = ["talktosolve", "compare", "--chat", *[str(e[0]) for e in pooled["chat"]],
               "--cut", *[str(e[0]) for e in pooled["cut"]]]
    return {
        "folders": [label[f] for f in folders],
        "command": shlex.join(command),
        "comparison": compare(pooled),
        "arms": arms,
        "untrained": {label[f]: r["untrained"] for f, r in read.items()},
        "by_folder": {label[f]: compare({arm: list(r["arms"][arm].values()) for arm in ARMS})
                      for f, r in read.items()},
        "gpu_seconds": {label[f]: r["gpu_seconds"] for f, r in read.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+", help="recipe folders of one config, each with other seeds")
    ap.add_argument("--out", type=Path, required=True, help="the comparison.json to write")
    args = ap.parse_args()
    found = pool(args.folders, args.out)
    args.out.write_text(json.dumps(found, indent=2) + "\n")
    c = found["comparison"]
    print(f"chat - cut = {c['delta']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}] (95%, {c['method']}; "
          f"{c['n_seeds_a']} vs {c['n_seeds_b']} seeds, {c['n_problems']} problems)\nwrote {args.out}")


if __name__ == "__main__":
    main()
