"""Per-role weights (`model.adapters=per_role`): each role learns from its own seat's messages only, a run keeps
one set of weights per seat and resumes exactly, evaluation seats each role's weights in its seat (or swapped),
and the `tiny-roles` recipe reports the role swap beside the shared arm."""

import copy
import json

import pytest
import torch
from safetensors.torch import load_file

from talktosolve.cli import main
from talktosolve.config import ConfigError, make_config
from talktosolve.store import read_jsonl


def _chats(tiny_model_dir):
    """A step's chats of the tiny model (3 problems x 2 chats), with rewards that give every chat an advantage."""
    from transformers import AutoModelForCausalLM

    from talktosolve.arms import ARMS
    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import load_tokenizer
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.factory import make_engine
    from talktosolve.sampling.rollout import Player, play_chats

    cfg = make_config("micro", {"model": {"name_or_path": str(tiny_model_dir)},
                                "chat": {"max_message_tokens": 6, "max_final_tokens": 8},
                                "train": {"chats_per_problem": 2, "lr": 0.01}})
    tok = load_tokenizer(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    protocol = protocol_of(cfg.chat)
    player = Player(make_engine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id), tok)
    chats = play_chats(make_problems("train", 3, seed=0), ARMS["chat"], {s: player for s in protocol.seats},
                       protocol, cfg.chat, chats_per_problem=2, seed=5)
    for i, c in enumerate(chats):
        c.reward = float(i % 2)
    return cfg, tok, model, protocol, chats


def test_a_roles_update_is_the_update_on_its_own_seats_messages_alone(tiny_model_dir):
    from talktosolve.experiment.step import learn_role
    from talktosolve.learning.grpo import Sample, group_advantages, grpo_update

    cfg, tok, model, protocol, chats = _chats(tiny_model_dir)
    role_a, reference = copy.deepcopy(model), copy.deepcopy(model)
    stats = learn_role(role_a, torch.optim.AdamW(role_a.parameters(), lr=cfg.train.lr), chats, cfg.train,
                   tok.pad_token_id, "cpu", protocol.n_turns, None, ("A",))
    adv = [a for g in group_advantages([[c.reward for c in chats[i:i + 2]] for i in range(0, len(chats), 2)])
           for a in g]
    mine = [Sample(t.prompt_ids, t.completion_ids, a, ci) for ci, (c, a) in enumerate(zip(chats, adv))
            for t in c.turns if t.speaker == "A"]
    grpo_update(reference, torch.optim.AdamW(reference.parameters(), lr=cfg.train.lr), mine,
                pad_id=tok.pad_token_id, n_tokens=sum(len(s.completion_ids) for s in mine),
                chats_per_microbatch=cfg.train.chats_per_microbatch, grad_clip=cfg.train.grad_clip, device="cpu",
                microbatch_tokens=cfg.train.microbatch_tokens, messages_per_chat=protocol.n_turns)
    assert stats.samples == len(mine) and stats.tokens == sum(len(s.completion_ids) for s in mine)
    after = dict(role_a.named_parameters())
    assert all(torch.equal(p, after[n]) for n, p in reference.named_parameters())
    assert any(not torch.equal(p, after[n]) for n, p in model.named_parameters())


def test_a_role_whose_seats_were_all_frozen_makes_no_update(tiny_model_dir):
    from talktosolve.experiment.step import learn_role

    cfg, tok, model, protocol, chats = _chats(tiny_model_dir)
    before = {n: p.clone() for n, p in model.named_parameters()}
    assert learn_role(model, torch.optim.AdamW(model.parameters(), lr=cfg.train.lr), chats, cfg.train,
                  tok.pad_token_id, "cpu", protocol.n_turns, ["A"] * len(chats), ("A",)) is None
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def _train(out, extra=()):
    args = ["train", "--preset", "tiny", "--arm", "chat", "--seed", "0", "--out", str(out), "--quiet",
            "--set", "model.adapters=per_role", "--set", "train.lr=3e-3"]
    for item in extra:
        args += ["--set", item]
    return main(args)


@pytest.mark.slow
def test_a_per_role_run_keeps_one_set_of_weights_per_seat_and_resumes_exactly(tmp_path, monkeypatch):
    import talktosolve.model.checkpoint as checkpoint

    whole, part = tmp_path / "whole", tmp_path / "part"
    assert _train(whole) == 0
    done = json.loads((whole / "done.json").read_text())
    assert done["roles"] == ["A", "B"]
    a = load_file(str(whole / "final" / "A" / "model.safetensors"))
    b = load_file(str(whole / "final" / "B" / "model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a), "the roles learned from different messages"
    assert sorted(p.name for p in (whole / "checkpoints" / "step-000002").iterdir()) == ["A", "B", "state.json"]

    real_save = checkpoint.save

    def save_then_stop(run_dir, parts, step, **kw):
        real_save(run_dir, parts, step, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_stop)
    assert _train(part) == 130
    monkeypatch.setattr(checkpoint, "save", real_save)
    assert _train(part) == 0
    for role in ("A", "B"):
        x = load_file(str(whole / "final" / role / "model.safetensors"))
        y = load_file(str(part / "final" / role / "model.safetensors"))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    strip = [{k: v for k, v in r.items() if "seconds" not in k} for r in read_jsonl(whole / "metrics.jsonl")]
    assert strip == [{k: v for k, v in r.items() if "seconds" not in k} for r in read_jsonl(part / "metrics.jsonl")]
    assert json.loads((part / "done.json").read_text())["weights_checksum"] == done["weights_checksum"]

    from talktosolve.experiment.evaluate import load_players

    cfg = make_config("tiny")
    players = load_players(cfg, {"A": str(whole), "B": str(whole)})
    swapped = load_players(cfg, {"A": str(whole), "B": str(whole)}, {"A": "B", "B": "A"})

    def weights(player):
        return {n: p for n, p in player.engine.model.named_parameters()}

    key = next(k for k in a if not torch.equal(a[k], b[k]))
    assert torch.equal(weights(players["A"])[key], a[key]) and torch.equal(weights(players["B"])[key], b[key])
    assert torch.equal(weights(swapped["A"])[key], b[key]) and torch.equal(weights(swapped["B"])[key], a[key])
    swap = tmp_path / "swap"
    assert main(["eval", "--preset", "tiny", "--a", str(whole), "--b", str(whole), "--role", "A=B", "--role", "B=A",
                 "--out", str(swap), "--quiet"]) == 0
    assert json.loads((swap / "summary.json").read_text())["roles"] == {"A": "B", "B": "A"}


def test_per_role_weights_must_name_the_seat_they_play(tmp_path):
    from talktosolve.model.policy import ModelError, trained_weights

    for role in ("A", "B"):
        (tmp_path / "final" / role).mkdir(parents=True)
        (tmp_path / "final" / role / "model.safetensors").write_bytes(b"")
    assert trained_weights(tmp_path, "B") == tmp_path / "final" / "B"
    with pytest.raises(ModelError, match="none for seat `C`"):
        trained_weights(tmp_path, "C")
    with pytest.raises(ModelError, match="say which seat"):
        trained_weights(tmp_path, None)


def test_per_role_settings_that_cannot_work_fail_in_one_line():
    with pytest.raises(ConfigError, match="model.adapters is `each`"):
        make_config("micro", {"model": {"adapters": "each"}})
    with pytest.raises(ConfigError, match="one run at a time"):
        make_config("micro", {"model": {"adapters": "per_role", "finetune": "lora"},
                              "train": {"runs_per_process": 2}})
    with pytest.raises(ConfigError, match="variant.adapters"):
        make_config("micro", {"variant": {"name": "roles", "adapters": "per-role"}})


def test_a_shared_run_keeps_the_key_it_had_before_per_role_weights_existed():
    from talktosolve.experiment.evaluate import eval_key
    from talktosolve.experiment.train import run_config

    assert "adapters" not in run_config(make_config("micro"), "chat", 0)["model"]
    per_role = make_config("micro", {"model": {"adapters": "per_role"}})
    assert run_config(per_role, "chat", 0)["model"]["adapters"] == "per_role"
    assert eval_key(make_config("micro"), "chat", {"A": None, "B": None}) == eval_key(per_role, "chat",
                                                                                   {"A": None, "B": None})


@pytest.fixture(scope="module")
def roles_recipe(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-roles") / "rec"
    assert main(["recipe", "--preset", "tiny-roles", "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_roles_recipe_reports_the_role_swap_beside_the_shared_arm(roles_recipe):
    from talktosolve.experiment.results import ResultsError, find_eval, validate_results

    out, results = roles_recipe
    validate_results(results)
    v = results["variant"]
    assert (v["name"], v["adapters"]) == ("roles", "per_role") and "role_swap" not in results["arms"]["chat"]
    name, swap = find_eval(results, "chat", "role_swap", "roles-s1")
    assert name == "swap-roles-s1" and swap["roles"] == {"A": "B", "B": "A"}
    assert v["seeds"]["1"]["role_swap"] == swap["accuracy"]
    team = [find_eval(results, "chat", "team", f"roles-s{s}")[1]["accuracy"] for s in (0, 1)]
    swaps = [v["seeds"][str(s)]["role_swap"] for s in (0, 1)]
    assert v["role_swap"]["delta"] == pytest.approx((team[0] - swaps[0] + team[1] - swaps[1]) / 2)
    assert json.loads((out / "evals" / name / "summary.json").read_text())["roles"] == {"A": "B", "B": "A"}
    assert "## Role swap" in (out / "report.md").read_text()
    broken = json.loads(json.dumps(results))
    del broken["evals"][name]
    with pytest.raises(ResultsError, match=r"playing roles \['B', 'A'\]"):
        validate_results(broken)


@pytest.mark.gpu
def test_per_role_lora_with_base_partners_on_the_gpu_resumes_equal_to_uninterrupted(tmp_path, monkeypatch):
    """CUDA graphs, one static engine per role and the frozen partner's own: a run killed after its first
    checkpoint and rerun ends with the same adapters and metrics as one never stopped. The learner's layers are
    not compiled here: a resumed process compiles them for its first step's shapes, where the one never stopped
    runs the kernels it compiled for several (other reduction orders, other last bits)."""
    import talktosolve.model.checkpoint as checkpoint

    extra = ["device=cuda", "model.finetune=lora", "model.lora_r=8", "train.partners=0.5", "train.steps=4",
             "train.checkpoint_every=2", "model.compile=off"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert _train(whole, extra) == 0
    real_save = checkpoint.save

    def save_then_stop(run_dir, parts, step, **kw):
        real_save(run_dir, parts, step, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_stop)
    assert _train(part, extra) == 130
    monkeypatch.setattr(checkpoint, "save", real_save)
    assert _train(part, extra) == 0
    adapters = {}
    for run in (whole, part):
        adapters[run] = {role: load_file(str(run / "final" / role / "adapter_model.safetensors")) for role in "AB"}
    a, b = adapters[whole]["A"], adapters[whole]["B"]
    assert any(not torch.equal(a[k], b[k]) for k in a), "the roles learned from different messages"
    for role in "AB":
        x, y = adapters[whole][role], adapters[part][role]
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    strip = [{k: v for k, v in r.items() if k.startswith(("train/", "talk/", "loss/"))}
             for r in read_jsonl(whole / "metrics.jsonl")]
    assert strip == [{k: v for k, v in r.items() if k.startswith(("train/", "talk/", "loss/"))}
                     for r in read_jsonl(part / "metrics.jsonl")]
    rows = read_jsonl(whole / "transcripts.jsonl")
    assert sum(r["partner_seat"] is not None for r in rows) == len(rows) // 2
