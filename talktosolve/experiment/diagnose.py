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
* `signal` (training only): the share of groups (a step's chats of one problem) whose rewards differ, so that
  some advantage is non-zero: the groups GRPO can learn from. With informative groups every group a step drew
  counts, including those beyond the `problems_per_step` it learned from.
* `tokens[t]`, `truncated[t]`: the mean length of message t and the share of them stopped at their limit.

Each run ends with a *verdict* in words (`verdict`): the first rule of `RULES` that its figures meet, with the
figures that met it (`why`), and as `notes` the other rules they meet. The rules read the run's first and last
spans of steps (where it started and where it ended up), its best span, and its whole-run signal; each threshold
is a named constant below.

`talktosolve diagnose FOLDER` prints them for a run, an evaluation or every run and evaluation of a recipe, with
a legend of the columns and each run's verdict, and writes them to `FOLDER/diagnosis.json`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from talktosolve.learning.informative import informative
from talktosolve.protocol import Protocol
from talktosolve.store import read_json, read_jsonl, write_json


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
    """The share of groups (chats of one problem at one step) whose rewards differ. Read from the rewards, not the
    advantages: with informative groups, a group drawn beyond those the step learned from has no advantage
    recorded, and counting only advantages would cap the share at the groups learned from over those drawn."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for c in chats:
        groups[(c.get("step"), c["problem_id"])].append(c["reward"])
    return sum(informative(r) for r in groups.values()) / len(groups) if groups else None


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


# ------------------------------------------------------------------------------------------------ verdicts

NOISE = 0.05
"""A change of a span's mean reward smaller than this is taken for chance: a span holds some hundreds of chats,
whose mean team reward moves by 0.02-0.03 from one span to the next without any learning."""

LEARNING_GAIN = 0.10
"""`learning`: the last span's mean reward is at least this much above the first span's (twice `NOISE`) ..."""

LEARNING_RATIO = 2.0
"""... or, from a weak start (a first span under `NOISE`: a team right fewer than 5 times in 100), at least this
many times the first span's and `NOISE` above it. From 0.03, a rise of `LEARNING_GAIN` would ask the team to
more than quadruple; doubling by `NOISE` or more is already more than chance moves a span."""

KEPT_SHARE = 0.5
"""A run whose best span rose `NOISE` or more above its first and whose last span fell `NOISE` or more below its
best has `learned then lost` when the last span keeps less than this share of that gain; keeping more, it is still
`learning`."""

COLLAPSED_TOKENS = 4.0
"""`collapsed messages`: in the last span every message but the finals is this many tokens or fewer on average
(a word or two, often only the end-of-turn token) ..."""

COLLAPSED_BOXED = 0.05
"""... and at most this share of the final answers is boxed: the team has stopped talking and answering."""

GUESS_TOKENS = 16.0
"""`guessed finals`: in the last span every seat's final message is this many tokens or fewer on average, room
for `The answer is \\boxed{42}.` and no working ..."""

GUESS_BOXED = 0.5
"""... while at least this share of the final answers is boxed: a bare guess in the grader's form, right about
as often as a guess is."""

RAMBLING_SHARE = 0.6
"""`rambling to the limit`: in the last span at least this share of the final messages stopped at their token
limit: cut off mid-working, a final is graded on whatever it boxed before the cut. Messages at their limit are not
enough alone: a learning run's messages often fill their limit too."""

SIGNAL_FLOOR = 0.2
"""`no signal`: over the whole run, fewer than this share of groups had rewards that differ (a non-zero
advantage). GRPO learns only from those; on Qwen2.5-Coder-1.5B the runs that learned started at 0.18-0.24 in
their first span and rose past 0.6, the one that stalled had 0.25 over the run, and those that never started
0.06-0.17."""


def _steps(b: dict) -> str:
    return f"steps {b['steps'][0]}-{b['steps'][1]}"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _reward_path(run: dict) -> tuple[dict, dict, dict] | None:
    """(first, best, last) spans of a run, or None with fewer than 2 spans (nothing to compare)."""
    bins = [b for b in run["bins"] if b["reward"] is not None]
    if len(bins) < 2:
        return None
    return bins[0], max(bins, key=lambda b: b["reward"]), bins[-1]


def _lost(run: dict) -> bool:
    path = _reward_path(run)
    if path is None:
        return False
    first, best, last = (b["reward"] for b in path)
    gain = best - first
    return gain >= NOISE and best - last >= NOISE and last - first < KEPT_SHARE * gain


def _finals_of(b: dict, finals: list[int], key: str) -> list[float]:
    return [b[key][t] for t in finals if t < len(b[key]) and b[key][t] is not None]


def too_short(run: dict) -> str | None:
    if _reward_path(run) is None:
        return f"{len(run['bins'])} span of steps: nothing to compare its reward with"
    return None


def collapsed_messages(run: dict) -> str | None:
    last, finals = run["bins"][-1], run.get("finals") or []
    talk = [t for t in range(len(last["tokens"])) if t not in finals] or list(range(len(last["tokens"])))
    tokens = [last["tokens"][t] for t in talk if last["tokens"][t] is not None]
    if not tokens or max(tokens) > COLLAPSED_TOKENS or last["boxed"] is None or last["boxed"] > COLLAPSED_BOXED:
        return None
    return (f"messages of {' and '.join(f'{x:.1f}' for x in tokens)} tokens, {_pct(last['boxed'])} of final "
            f"answers boxed, in {_steps(last)}")


def learned_then_lost(run: dict) -> str | None:
    if not _lost(run):
        return None
    first, best, last = _reward_path(run)
    return (f"reward {first['reward']:.3f} in {_steps(first)}, {best['reward']:.3f} in {_steps(best)}, "
            f"{last['reward']:.3f} in {_steps(last)}")


def _rose(first: float, last: float) -> bool:
    """The reward rose by more than chance: by `LEARNING_GAIN`, or from a weak start by a factor of
    `LEARNING_RATIO` and at least `NOISE`."""
    gain = last - first
    return gain >= LEARNING_GAIN or (first < NOISE and gain >= NOISE and last >= LEARNING_RATIO * first)


def learning(run: dict) -> str | None:
    path = _reward_path(run)
    if path is None or _lost(run) or not _rose(path[0]["reward"], path[2]["reward"]):
        return None
    first, _, last = path
    signal = "" if first["signal"] is None or last["signal"] is None else \
        f"; groups with a signal {_pct(first['signal'])} to {_pct(last['signal'])}"
    return f"reward {first['reward']:.3f} in {_steps(first)} to {last['reward']:.3f} in {_steps(last)}{signal}"


def guessed_finals(run: dict) -> str | None:
    last, finals = run["bins"][-1], run.get("finals")
    tokens = _finals_of(last, finals or [], "tokens")
    if not tokens or max(tokens) > GUESS_TOKENS or last["boxed"] is None or last["boxed"] < GUESS_BOXED:
        return None
    return (f"finals of {' and '.join(f'{x:.0f}' for x in tokens)} tokens, {_pct(last['boxed'])} boxed, "
            f"in {_steps(last)}")


def rambling_to_the_limit(run: dict) -> str | None:
    last, finals = run["bins"][-1], run.get("finals")
    stopped = _finals_of(last, finals or [], "truncated")
    if not stopped or sum(stopped) / len(stopped) < RAMBLING_SHARE:
        return None
    talk = [x for t, x in enumerate(last["truncated"]) if t not in finals and x is not None]
    said = f"messages {' and '.join(_pct(x) for x in talk)}, " if talk else ""
    return f"at their token limit in {_steps(last)}: {said}finals {' and '.join(_pct(x) for x in stopped)}"


def no_signal(run: dict) -> str | None:
    if run.get("signal") is None or run["signal"] >= SIGNAL_FLOOR:
        return None
    return f"{_pct(run['signal'])} of groups had rewards that differ over the run (under {_pct(SIGNAL_FLOOR)})"


def stalled(run: dict) -> str | None:
    first, _, last = _reward_path(run)
    signal = "" if run.get("signal") is None else f"; {_pct(run['signal'])} of groups had a signal over the run"
    weak = f" (from under {NOISE:.2f}: under {LEARNING_RATIO:.0f}x or {NOISE:.2f})" if first["reward"] < NOISE else ""
    return (f"reward {first['reward']:.3f} in {_steps(first)} and {last['reward']:.3f} in {_steps(last)}, a rise "
            f"under {LEARNING_GAIN:.2f}{weak}{signal}")


RULES = [("too short", too_short), ("collapsed messages", collapsed_messages),
         ("learned then lost", learned_then_lost), ("learning", learning), ("guessed finals", guessed_finals),
         ("rambling to the limit", rambling_to_the_limit), ("no signal", no_signal)]
"""The verdicts in the order they are tried; a run's verdict is the first whose rule returns its figures (a
sentence; None: the rule does not hold). What leaves nothing to compare or read comes first (too short, a team
that stopped answering), then how the reward went where it moved (lost, learning), then what the messages became
(what a run that did not learn shows), then the missing signal they leave behind."""

FALLBACK = ("stalled", stalled)
"""The verdict when no rule holds: the reward did not rise as `learning` asks, though enough groups carried a
signal."""


def verdict(run: dict) -> dict:
    """A run's verdict from its figures (`training_figures`, with `finals`): {verdict, why, notes}, where `notes`
    are the later rules that also hold ({verdict, why}, in `RULES` order)."""
    found = [{"verdict": name, "why": why} for name, rule in RULES if (why := rule(run)) is not None]
    if not found:
        found = [{"verdict": FALLBACK[0], "why": FALLBACK[1](run)}]
    first, *notes = found
    return {"verdict": first["verdict"], "why": first["why"], "notes": notes}


def final_turns(chats: list[dict], config: dict | None = None) -> list[int]:
    """The turns whose answers are graded: the protocol's finals when the run's config is at hand, else each
    speaker's last turn in the first chat (the protocol's default), else the last turn of each answering seat."""
    chat = (config or {}).get("chat")
    if chat and chat.get("seats") and chat.get("order"):
        return list(Protocol.build(chat["seats"], chat["order"], chat["max_final_tokens"], chat["max_message_tokens"],
                                   chat.get("turn_tokens") or (), chat.get("final_turns") or ()).finals)
    messages = chats[0]["messages"] if chats else []
    speakers = [m.get("speaker") for m in messages]
    if messages and None not in speakers:
        return sorted(max(t for t, s in enumerate(speakers) if s == seat) for seat in set(speakers))
    return list(range(len(messages) - len(chats[0]["answers"]), len(messages))) if messages else []


def diagnose(folder: Path, bins: int = 4) -> dict:
    """The figures of every run (`runs/*/transcripts.jsonl`, or the folder's own) and evaluation
    (`evals/*/chats.jsonl`, or the folder's own) under `folder`, by name; each run with its graded turns
    (`finals`) and its verdict (`verdict`, `why`, `notes`)."""
    folder = Path(folder)
    runs = sorted(folder.glob("runs/*/transcripts.jsonl")) or sorted(folder.glob("transcripts.jsonl"))
    evals = sorted(folder.glob("evals/*/chats.jsonl")) or sorted(folder.glob("chats.jsonl"))
    out = {"runs": {}, "evals": {}}
    for path in runs:
        chats = read_jsonl(path)
        if chats:
            config = path.parent / "config.json"
            run = training_figures(chats, bins)
            run["finals"] = final_turns(chats, read_json(config) if config.is_file() else None)
            out["runs"][path.parent.name] = {**run, **verdict(run)}
    for path in evals:
        chats = read_jsonl(path)
        if chats:
            out["evals"][path.parent.name] = chat_figures(chats)
    return out


def _f(x, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _lengths(fig: dict) -> str:
    return " ".join(f"{_f(t, 0)}({_f(c, 2)})" for t, c in zip(fig["tokens"], fig["truncated"]))


LEGEND = [("steps", "the span of training steps a line covers: the run cut into equal spans (--bins)"),
          ("reward", "the mean team reward of the chats (an evaluation's: its accuracy)"),
          ("signal", "the share of groups (one problem's chats at one step) whose rewards differ (a non-zero "
                     "advantage): the only ones GRPO learns from; with informative groups, of all groups drawn"),
          ("boxed", "the share of final answers with a balanced \\boxed{}: the only ones the grader reads"),
          ("right|boxed", "the share of the boxed final answers that are right"),
          ("tokens", "each message in turn order: its mean length in tokens and, in brackets, the share of them "
                     "stopped at their token limit")]
"""What each column of `table` measures, one line each."""


def legend(diagnosis: dict) -> list[str]:
    """The legend lines of the columns `table` shows (the training-only ones when a run is shown)."""
    shown = [(c, text) for c, text in LEGEND if diagnosis["runs"] or c not in ("steps", "signal")]
    finals = next((run.get("finals") for run in diagnosis["runs"].values() if run.get("finals")), None)
    if finals:
        shown[-1] = (shown[-1][0], shown[-1][1] + "; the finals (graded) are messages "
                     + " and ".join(str(t + 1) for t in finals))
    return ["columns:"] + [f"  {c:<11}  {text}" for c, text in shown]


def verdict_lines(diagnosis: dict) -> list[str]:
    """Each run's verdict and why, then its notes (the other rules its figures meet)."""
    lines = []
    for name, run in diagnosis["runs"].items():
        if "verdict" not in run:
            continue
        lines.append(f"{name:<8}  {run['verdict']}: {run['why']}")
        lines += [f"{'':<8}    also {note['verdict']}: {note['why']}" for note in run["notes"]]
    return (["verdicts (the first rule that holds; docs/design.md lists them):"] + lines) if lines else []


def table(diagnosis: dict) -> str:
    """The diagnosis as text: a run's line per span of steps, then a line per evaluation, the legend of the
    columns and each run's verdict."""
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
    verdicts = verdict_lines(diagnosis)
    lines += ["", *legend(diagnosis)] + (["", *verdicts] if verdicts else [])
    return "\n".join(lines)


def write_diagnosis(folder: Path, found: dict) -> Path:
    """`diagnose(folder)`'s answer, written atomically to `folder/diagnosis.json`; returns its path."""
    path = Path(folder) / "diagnosis.json"
    write_json(path, found)
    return path
