"""Message-ablation replay: an unchanged replay repeats the recorded chat, an ablated message never reaches its
listeners, a scripted policy gives the influence worked out by hand, and bad input writes nothing."""

import json
import re
import shutil

import pytest

from talktosolve.arms import ARMS
from talktosolve.cli import main
from talktosolve.config import make_config
from talktosolve.experiment.evaluate import batches, eval_key, evaluate, summarize
from talktosolve.experiment.replay import replay_influence
from talktosolve.protocol import protocol_of
from talktosolve.sampling.rollout import Player, play_chats
from talktosolve.store import write_json, write_text
from talktosolve.task.data import Problem
from talktosolve.task.numbers import numbers_in
from talktosolve.team import reward


class CharTokenizer:
    """One id per character (0 is the stop and the pad), with a plain chat template."""

    chat_template = "plain"
    pad_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}\n" for m in messages) + "<assistant>"

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[ord(c) for c in t] for t in texts]}

    def batch_decode(self, rows, skip_special_tokens=False):
        return ["".join(chr(i) for i in row if i or not skip_special_tokens) for row in rows]


class ScriptedEngine:
    """A team member that says `I have <its numbers>` (B adds a marker naming its problem) and, on its final
    turn, boxes its own numbers plus (if `listens`) those of every partner message that begins `I have`."""

    stop_ids = [0]

    def __init__(self, listens: bool):
        self.listens, self.prompts = listens, []

    def generate(self, prompts, max_new_tokens, generator=None, *, session=None):
        out = []
        for ids in prompts:
            text = "".join(map(chr, ids))
            self.prompts.append(text)
            name = re.search(r"You are (\w+)\.", text).group(1)
            own = [int(v) for line in text.splitlines() if line.startswith("- ") for v in numbers_in(line)]
            if text.endswith("Answer in \\boxed{}.\n<assistant>"):
                heard = [int(v) for m in re.findall(r"\b[A-Z] says: (I have [^\n]*)", text) for v in numbers_in(m)]
                terms = own + (heard if self.listens else [])
                reply = f"{' + '.join(map(str, terms))} = \\boxed{{{sum(terms)}}}"
            else:
                reply = f"I have {' '.join(map(str, own))}" + (f" Q{chr(65 + own[0] % 26) * 3}" if name == "B" else "")
            out.append([ord(c) for c in reply] + [0])
        return out


N = 6


def problems(n: int = N) -> list[Problem]:
    return [Problem(f"p{i}", "How many shells does Mia have now?", [f"Mia has {11 + i} shells.", f"Mia finds {30 + i} shells."],
                    str(41 + 2 * i)) for i in range(n)]


def micro_cfg(**eval_fields):
    return make_config("micro", {"data": {"n_test": N}, "eval": {"n_problems": N, "chats_per_problem": 2,
                                                                  **eval_fields}})


def record(folder, cfg, engine) -> None:
    """A finished evaluation folder of the scripted team, as `evaluate` writes one."""
    protocol = protocol_of(cfg.chat)
    player = Player(engine, CharTokenizer())
    chats = []
    for batch, seed in batches(cfg, problems()):
        played = play_chats(batch, ARMS["chat"], {"A": player, "B": player}, protocol, cfg.chat,
                            chats_per_problem=cfg.eval.chats_per_problem, seed=seed)
        reward.score_chats(played, protocol)
        chats += played
    transcripts = [c.transcript() for c in chats]
    summary = summarize(chats, transcripts, cfg.eval.chats_per_problem, protocol)
    summary.update(seconds=1.0, key=eval_key(cfg, "chat", {"A": None, "B": None}), arm="chat",
                   seats={"A": "base", "B": "base"})
    write_text(folder / "chats.jsonl", "".join(json.dumps(t) + "\n" for t in transcripts))
    write_json(folder / "config.json", cfg.to_dict())
    write_json(folder / "summary.json", summary)


def scripted(tmp_path, listens: bool):
    cfg = micro_cfg()
    record(tmp_path, cfg, ScriptedEngine(listens))
    engine = ScriptedEngine(listens)
    result = replay_influence(cfg, tmp_path, progress=False, players={"A": Player(engine, CharTokenizer()),
                                                                      "B": Player(engine, CharTokenizer())})
    return result, engine, {(e["turn"], e["kind"]): e for e in result["figures"]}


def test_a_listening_script_gives_the_influence_worked_out_by_hand(tmp_path):
    result, _, got = scripted(tmp_path, listens=True)
    assert result["reproduced"] == 1.0
    for kind in ("remove", "replace", "renumber"):
        # A's first message and B's are each what the other's answer needs: without it, every answer is wrong.
        for turn in (0, 1):
            assert got[turn, kind]["drop"]["mean"] == 1.0 and got[turn, kind]["flip"]["mean"] == 1.0
        # A's final message opens with its sum, not `I have`: B's answer ignores it.
        assert got[2, kind]["drop"] == {"mean": 0.0, "lo": 0.0, "hi": 0.0} and got[2, kind]["flip"]["mean"] == 0.0
    assert got[0, "renumber"]["follow"]["mean"] == 1.0 and got[1, "renumber"]["follow"]["mean"] == 1.0
    assert got[2, "renumber"]["follow"]["mean"] == 0.0


def test_a_deaf_script_has_no_influence(tmp_path):
    _, _, got = scripted(tmp_path, listens=False)
    for entry in got.values():
        assert entry["drop"]["mean"] == 0.0 and entry["flip"]["mean"] == 0.0


def test_an_ablated_message_never_reaches_its_listener(tmp_path):
    _, engine, _ = scripted(tmp_path, listens=True)
    # A's final turn (2) is re-sampled in the 4 passes of position 0 (B's message 1 unchanged) and of position 1
    # (control, remove, replace, renumber of B's message 1), 12 chats each: 96 prompts.
    finals = [p for p in engine.prompts if p.startswith("<system>You are A.") and p.endswith("\\boxed{}.\n<assistant>")]
    assert len(finals) == 8 * 2 * N
    seen = {"marker and number": 0, "marker only": 0, "neither": 0}
    for p in finals:
        b = int(re.search(r"Mia has (\d+) shells", p).group(1)) + 19  # B's own number on this problem
        marker = f"Q{chr(65 + b % 26) * 3}"
        has_number = re.search(rf"\b{b}\b", p) is not None
        if marker in p:
            seen["marker and number" if has_number else "marker only"] += 1
        else:
            assert not has_number  # what is hidden or replaced leaves no trace of B's message
            seen["neither"] += 1
    # removed and replaced: 24 prompts hold no word of B's message; renumbered: 12 hold its words, not its number.
    assert seen == {"marker and number": 5 * 2 * N, "marker only": 2 * N, "neither": 2 * 2 * N}


@pytest.fixture(scope="module")
def micro_eval(tmp_path_factory):
    """A real evaluation of the micro base at near-zero temperature (greedy), on 6 problems."""
    from talktosolve.task.tasks import load_problems

    folder = tmp_path_factory.mktemp("micro-eval")
    cfg = make_config("micro", {"data": {"n_test": N}, "chat": {"temperature": 1e-4}, "eval": {"n_problems": N}})
    _, test, _ = load_problems(cfg, folder / "data")
    evaluate(cfg, test, folder / "eval", progress=False)
    return cfg, folder / "eval"


def test_an_unchanged_greedy_replay_repeats_the_recorded_chat(micro_eval, tmp_path):
    cfg, folder = micro_eval
    copy = tmp_path / "eval"
    shutil.copytree(folder, copy)
    # 4 of the evaluation's 6 problems: other batches than the recorded ones, still the same chats when greedy.
    cfg = make_config(str(copy / "config.json"), {"eval": {"influence_problems": 4}})
    result = replay_influence(cfg, copy, progress=False)
    assert result["reproduced"] == 1.0 and result["n_problems"] == 4
    rows = [json.loads(line) for line in (copy / "influence" / "replays.jsonl").read_text().splitlines()]
    recorded = {(c["problem_id"], c["chat"]): c for c in map(json.loads, (copy / "chats.jsonl").read_text().splitlines())}
    control = [r for r in rows if r["pass"] == "control"]
    assert len(control) == 3 * 4 * 2  # 3 positions x 4 problems x 2 chats
    assert all(m["text"] == recorded[r["problem_id"], r["chat"]]["messages"][m["turn"]]["text"]
               for r in control for m in r["messages"])


def _fails_cleanly(capsys, folder, *args) -> str:
    rc = main(["influence", "--eval", str(folder), "--quiet", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert not (folder / "influence").exists()
    return err[0]


def test_bad_input_gets_one_clear_line_and_writes_nothing(micro_eval, tmp_path, capsys):
    _, folder = micro_eval
    copy = tmp_path / "eval"
    shutil.copytree(folder, copy)
    assert "evaluated under another config" in _fails_cleanly(capsys, copy, "--set", "model.name_or_path=micro-teams")
    assert "past the chat's end" in _fails_cleanly(capsys, copy, "--turns", "7")
    assert "no listener" in _fails_cleanly(capsys, copy, "--turns", "3")
    text = (copy / "chats.jsonl").read_text()
    (copy / "chats.jsonl").write_text(text[: len(text) - 40])
    assert "truncated" in _fails_cleanly(capsys, copy)
    (copy / "config.json").unlink()
    assert "--preset" in _fails_cleanly(capsys, copy)


@pytest.mark.gpu
def test_replays_on_the_gpu_repeat_the_recorded_chat_and_hide_nothing_from_the_cut_check(tmp_path):
    """On the GPU (the static engine's CUDA graphs): an evaluation's whole batch replayed unchanged repeats the
    recorded chat under temperature-1 sampling, a greedy replay of part of it does too, and in the cut arm no
    ablation moves an answer."""
    import torch

    from talktosolve.task.tasks import load_problems

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    for temperature, replayed, arm in ((1.0, N, "chat"), (1e-4, 4, "chat"), (1.0, N, "cut")):
        cfg = make_config("micro", {"data": {"n_test": N}, "chat": {"temperature": temperature}, "device": "cuda",
                                    "eval": {"n_problems": N, "influence_problems": replayed}})
        folder = tmp_path / f"{arm}-{temperature}"
        _, test, _ = load_problems(cfg, folder / "data")
        evaluate(cfg, test, folder, arm=arm, progress=False)
        result = replay_influence(cfg, folder, progress=False)
        assert result["reproduced"] == 1.0, (temperature, replayed, arm)
        if arm == "cut":
            assert all(f["drop"]["mean"] == 0 and f["flip"]["mean"] == 0 for f in result["figures"])
