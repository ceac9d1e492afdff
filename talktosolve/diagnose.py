"""Why a run is or is not learning, read from its own files: the figures to look at before changing anything.

GRPO learns only from groups whose chats scored differently: a problem whose chats all earn the same reward has
every advantage 0 and adds nothing to the update. So when the reward does not climb, the first questions are
whether the copies' final messages can be graded at all (a final without a balanced `\\boxed{}` is wrong), how many
groups carried any signal, and what the messages did meanwhile (their lengths, how many ran into their limit).
This module answers them from a run's `transcripts.jsonl` (every training chat) and an evaluation's
`chats.jsonl`, without a model: per run over bins of training steps, per evaluation over its chats.

Figures (each a share or a mean; None where nothing is defined):

* `reward`: the team reward; `boxed`: the share of final answers with a balanced box (the answer the grader
  reads; `answers[seat]` is None without one); `right_when_boxed`: the share of boxed answers that are right.
* `signal` (training only): the share of groups (a step's chats of one problem) with a non-zero advantage,
  the groups the update learned from.
* `tokens[t]`, `truncated[t]`: the mean length of message t and the share of them stopped at their limit.

`talktosolve diagnose FOLDER` prints them for a run, an evaluation or every run and evaluation of a recipe,
and writes them to `FOLDER/diagnosis.json`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from talktosolve.store import read_jsonl, write_json


def _mean(xs) -> float | None:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else None


def chat_figures(chats: list[dict]) -> dict:
    """The figures of a list of chats (transcript rows): reward, boxed, right_when_boxed, tokens, truncated."""
    answers = [(a, chat["correct"][seat]) for chat in chats for seat, a in chat["answers"].items()]
    boxed = [right for a, right in answers if a is not None]
    turns = max((len(c["messages"]) for c in chats), default=0)
    at = [[c["messages"][t] for c in chats if t < len(c["messages"])] for t in range(turns)]
    return {
        "chats": len(chats),
        "reward": _mean(c["reward"] for c in chats),
        "boxed": len(boxed) / len(answers) if answers else None,
        "right_when_boxed": _mean(map(float, boxed)),
        "tokens": [_mean(m["tokens"] for m in ms) for ms in at],
        "truncated": [_mean(float(m["truncated"]) for m in ms) for ms in at],
    }


def signal(chats: list[dict]) -> float | None:
    """The share of groups (chats of one problem at one step) in which some chat has a non-zero advantage."""
    groups: dict[tuple, bool] = defaultdict(bool)
    for c in chats:
        key = (c.get("step"), c["problem_id"])
        groups[key] = groups[key] or abs(c.get("advantage") or 0.0) > 0
    return sum(groups.values()) / len(groups) if groups else None


def training_figures(chats: list[dict], bins: int = 4) -> dict:
    """A run's figures over all its training chats and over `bins` equal spans of its steps, in step order."""
    steps = sorted({c["step"] for c in chats})
    n = len(steps)
    spans: list[list[dict]] = [[] for _ in range(min(bins, n))]
    index = {s: i * len(spans) // n for i, s in enumerate(steps)}
    for c in chats:
        spans[index[c["step"]]].append(c)

    def figures(part: list[dict]) -> dict:
        taken = [c["step"] for c in part]
        return {"steps": [min(taken), max(taken)], **chat_figures(part), "signal": signal(part)}

    return {**figures(chats), "bins": [figures(part) for part in spans if part]}


def diagnose(folder: Path, bins: int = 4) -> dict:
    """The figures of every run (`runs/*/transcripts.jsonl`, or the folder's own) and evaluation
    (`evals/*/chats.jsonl`, or the folder's own) under `folder`, by name."""
    folder = Path(folder)
    runs = sorted(folder.glob("runs/*/transcripts.jsonl")) or sorted(folder.glob("transcripts.jsonl"))
    evals = sorted(folder.glob("evals/*/chats.jsonl")) or sorted(folder.glob("chats.jsonl"))
    out = {"runs": {}, "evals": {}}
    for path in runs:
        chats = read_jsonl(path)
        if chats:
            out["runs"][path.parent.name] = training_figures(chats, bins)
    for path in evals:
        chats = read_jsonl(path)
        if chats:
            out["evals"][path.parent.name] = chat_figures(chats)
    return out


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _lengths(fig: dict) -> str:
    return " ".join(f"{_f(t, 0)}({_f(c, 2)})" for t, c in zip(fig["tokens"], fig["truncated"]))


def table(diagnosis: dict) -> str:
    """The diagnosis as text: a run's line per span of steps, then a line per evaluation."""
    lines = []
    if diagnosis["runs"]:
        lines += ["training    steps    reward  signal  boxed  right|boxed  tokens per message (share at its limit)",
                  "--------  -------  ------  ------  -----  -----------  ---------------------------------------"]
        for name, run in diagnosis["runs"].items():
            for i, b in enumerate(run["bins"]):
                lines.append(f"{name if i == 0 else '':<8}  {b['steps'][0]:>3}-{b['steps'][1]:<3}  {_f(b['reward']):>6}  "
                             f"{_f(b['signal']):>6}  {_f(b['boxed'], 2):>5}  {_f(b['right_when_boxed']):>11}  "
                             f"{_lengths(b)}")
    if diagnosis["evals"]:
        lines += [""] if lines else []
        lines += ["evaluation            reward  boxed  right|boxed  tokens per message (share at its limit)",
                  "--------------------  ------  -----  -----------  ---------------------------------------"]
        for name, ev in diagnosis["evals"].items():
            lines.append(f"{name:<20}  {_f(ev['reward']):>6}  {_f(ev['boxed'], 2):>5}  "
                         f"{_f(ev['right_when_boxed']):>11}  {_lengths(ev)}")
    return "\n".join(lines)


def write_diagnosis(folder: Path, found: dict) -> Path:
    """`diagnose(folder)`'s answer, written atomically to `folder/diagnosis.json`; returns its path."""
    path = Path(folder) / "diagnosis.json"
    write_json(path, found)
    return path
