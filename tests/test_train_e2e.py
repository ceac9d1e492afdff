"""End to end on a tiny random Qwen2 model: `talktosolve train` for 2 steps, then the run folder is checked."""

import json

import pytest
import torch
from safetensors.torch import load_file

from talktosolve.cli import main
from talktosolve.store import read_jsonl

SETTINGS = ["data.n_train=16", "data.n_test=8", "train.steps=2", "train.problems_per_step=2",
            "train.checkpoint_every=1", "chat.max_message_tokens=6", "chat.max_final_tokens=5",
            "eval.n_problems=4", "eval.batch_chats=8"]


def train_args(model_dir, out, arm="chat", finetune="lora", extra=()):
    args = ["train", "--preset", "micro", "--arm", arm, "--seed", "0", "--out", str(out), "--quiet",
            "--set", f"model.name_or_path={model_dir}", "--set", f"model.finetune={finetune}",
            "--set", "model.lora_r=4"]
    for s in SETTINGS + list(extra):
        args += ["--set", s]
    return args


def run_train(model_dir, out, arm="chat", finetune="lora", extra=()):
    assert main(train_args(model_dir, out, arm, finetune, extra)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["chat", "cut"])
def test_train_two_steps_writes_a_complete_run(tiny_model_dir, tmp_path, arm):
    out = tmp_path / "run"
    run_train(tiny_model_dir, out, arm)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["arm"] == arm and cfg["train"]["steps"] == 2 and cfg["model"]["lora_r"] == 4
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    for key in ("train/reward", "train/acc_A", "train/acc_B", "talk/send", "talk/ask", "loss/policy",
                "loss/grad_norm", "perf/tokens", "perf/seconds"):
        assert key in metrics[0]
    assert not {"train/acc_a", "train/acc_b"} & set(metrics[0])
    chats = read_jsonl(out / "transcripts.jsonl")
    assert len(chats) == 2 * 2 * 4  # steps x problems x chats
    for m in metrics:
        rows = [c for c in chats if c["step"] == m["step"]]
        assert m["train/acc_A"] == sum(c["correct"]["A"] for c in rows) / len(rows)
    for c in chats:
        assert [m["speaker"] for m in c["messages"]] == ["A", "B", "A", "B"]
        assert all(m["tokens"] <= (6 if m["turn"] < 2 else 5) for m in c["messages"])  # token limits
        assert c["reward"] == (c["correct"]["A"] + c["correct"]["B"]) / 2
        assert all("view" in m for m in c["messages"])
        assert c["arm"] == arm and c["hidden"] == []
        assert c["hands"] == {"A": c["facts"][0::2], "B": c["facts"][1::2]}  # both arms deal round-robin
    # advantages are centred within each problem's group of 4 chats
    for step in (0, 1):
        rows = [c for c in chats if c["step"] == step]
        for p in {c["problem_id"] for c in rows}:
            assert abs(sum(c["advantage"] for c in rows if c["problem_id"] == p)) < 1e-9
    assert (out / "final" / "adapter_model.safetensors").exists()
    assert (out / "done.json").exists()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    from talktosolve.config import make_config
    from talktosolve.experiment.assemble import views_respect_arms
    from talktosolve.protocol import protocol_of

    chat_cfg = make_config("micro", {"chat": {"max_message_tokens": 6, "max_final_tokens": 5}}).chat
    assert views_respect_arms([out / "transcripts.jsonl"], protocol_of(chat_cfg), chat_cfg)


def test_three_seats_train_with_their_own_turns_limits_and_reward(tiny_model_dir, tmp_path):
    """A team of three (turns A, B, C, A, B, C, each its own limit): every seat speaks in order, is dealt every
    third fact, is graded, and has its own accuracy metric; the reward is the mean of the three."""
    from talktosolve.micro.task import make_problems, problem_text
    from talktosolve.task.data import write_problems
    from talktosolve.task.split import split_problem

    seats = ("A", "B", "C")
    problems = [p for p in make_problems("train", 400, seed=0) if split_problem(problem_text(p), seats).eligible]
    assert len(problems) >= 24
    built = tmp_path / "built"
    write_problems(built / "train.jsonl", problems[:16])
    write_problems(built / "test.jsonl", problems[16:24])
    limits = [6, 5, 4, 5, 4, 3]
    out = tmp_path / "run"
    run_train(tiny_model_dir, out, extra=["data.task=gsm8k", f"data.gsm8k={built}", "chat.seats=A,B,C",
                                          "chat.order=A,B,C,A,B,C", f"chat.turn_tokens={','.join(map(str, limits))}"])
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert {"train/acc_A", "train/acc_B", "train/acc_C"} <= set(metrics[0])
    chats = read_jsonl(out / "transcripts.jsonl")
    assert len(chats) == 2 * 2 * 4
    for c in chats:
        assert [m["speaker"] for m in c["messages"]] == ["A", "B", "C", "A", "B", "C"]
        assert all(m["tokens"] <= limits[m["turn"]] for m in c["messages"])
        assert c["hands"] == {seat: c["facts"][k::3] for k, seat in enumerate(seats)}
        assert set(c["correct"]) == set(seats)
        assert c["reward"] == pytest.approx(sum(c["correct"].values()) / 3)
    assert (out / "done.json").exists()


@pytest.mark.slow
def test_adapter_changed_and_rerun_is_a_no_op(tiny_model_dir, tmp_path, monkeypatch):
    import talktosolve.team.reward

    monkeypatch.setattr(talktosolve.team.reward, "grade_many", odd_length_is_right)
    out = tmp_path / "run"
    # A larger learning rate so a 2-step update is visible in every LoRA B matrix.
    run_train(tiny_model_dir, out, extra=["train.lr=1e-2"])
    weights = load_file(str(out / "final" / "adapter_model.safetensors"))
    lora_b = [t for k, t in weights.items() if "lora_B" in k]
    assert lora_b and any(t.abs().max() > 0 for t in lora_b), "LoRA B starts at zero and must move"
    before = (out / "metrics.jsonl").read_bytes()
    run_train(tiny_model_dir, out, extra=["train.lr=1e-2"])
    assert (out / "metrics.jsonl").read_bytes() == before


@pytest.mark.slow
def test_full_finetune_writes_safetensors(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    run_train(tiny_model_dir, out, finetune="full")
    assert (out / "final" / "model.safetensors").exists()


def odd_length_is_right(finals, golds):
    """A stand-in grader: a random model never answers right, so every advantage would be 0 and nothing would
    be learned; with this one the learner moves the adapter, and the rest is the real pipeline."""
    return [len(f) % 2 == 1 for f in finals]


def without_times(rows):
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]


def assert_same_run(got, ref):
    """`got` finished the run `ref` did: the same adapter (one that moved), metrics but for times, transcripts."""
    a = load_file(str(ref / "final" / "adapter_model.safetensors"))
    b = load_file(str(got / "final" / "adapter_model.safetensors"))
    assert any(t.abs().max() > 0 for k, t in a.items() if "lora_B" in k), "the adapter must have moved"
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert without_times(read_jsonl(got / "metrics.jsonl")) == without_times(read_jsonl(ref / "metrics.jsonl"))
    assert read_jsonl(got / "transcripts.jsonl") == read_jsonl(ref / "transcripts.jsonl")


@pytest.mark.slow
def test_resume_from_checkpoint_equals_uninterrupted(tiny_model_dir, tmp_path, monkeypatch):
    import talktosolve.model.checkpoint as checkpoint
    import talktosolve.team.reward

    monkeypatch.setattr(talktosolve.team.reward, "grade_many", odd_length_is_right)
    whole, part = tmp_path / "whole", tmp_path / "part"
    run_train(tiny_model_dir, whole, extra=["train.lr=1e-2"])
    # The same command stopped right after step 1's checkpoint, as a kill there would, then run again.
    real_save = checkpoint.save

    def save_then_stop(run_dir, parts, step, **kw):
        real_save(run_dir, parts, step, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", save_then_stop)
    assert main(train_args(tiny_model_dir, part, extra=["train.lr=1e-2"])) == 130  # interrupted
    assert [r["step"] for r in read_jsonl(part / "metrics.jsonl")] == [0] and not (part / "final").exists()
    monkeypatch.setattr(checkpoint, "save", real_save)
    run_train(tiny_model_dir, part, extra=["train.lr=1e-2"])
    assert_same_run(part, whole)


def test_key_differences_name_each_setting_arm_and_seed_that_differ_and_nothing_for_an_unreadable_config():
    from talktosolve.config import make_config
    from talktosolve.experiment.train import key_differences

    cfg = make_config("micro", {"train": {"lr": 1e-3}})
    stored = {"arm": "chat", "seed": 0, **make_config("micro", {"train": {"lr": 1e-2}}).to_dict()}
    assert key_differences(stored, cfg, "chat", 0) == ["train.lr: 0.01 in the folder, 0.001 now"]
    assert key_differences(stored, cfg, "cut", 1) == ["arm: 'chat' in the folder, 'cut' now",
                                                      "seed: 0 in the folder, 1 now",
                                                      "train.lr: 0.01 in the folder, 0.001 now"]
    assert key_differences({**stored, "train": {"a_setting_since_removed": 1}}, cfg, "chat", 0) == []


@pytest.mark.slow
def test_a_run_folder_of_another_config_is_refused_naming_the_settings_that_differ(tiny_model_dir, tmp_path, capsys):
    part = tmp_path / "part"
    run_train(tiny_model_dir, part, extra=["train.steps=1"])
    capsys.readouterr()
    # Same folder, more steps: a different config, so it must refuse rather than mix runs, and say what differs.
    assert main(train_args(tiny_model_dir, part)) == 2
    err = capsys.readouterr().err.strip()
    assert "different config (train.steps: 1 in the folder, 2 now)" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_metrics_mirror_to_tensorboard(tiny_model_dir, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    args = ["train", "--preset", "micro", "--arm", "chat", "--out", str(out), "--quiet", "--log", "tensorboard",
            "--set", f"model.name_or_path={tiny_model_dir}"]
    for s in SETTINGS:
        args += ["--set", s]
    assert main(args) == 0
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/reward")] == [0, 1]


def test_learning_rate_is_a_function_of_the_step():
    from talktosolve.config import TrainConfig
    from talktosolve.experiment.step import learning_rate

    t = TrainConfig(lr=1e-3, warmup_steps=4)
    assert [learning_rate(t, s) for s in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert learning_rate(TrainConfig(lr=1e-3), 0) == 1e-3


def test_step_problems_walk_seeded_epochs():
    from talktosolve.experiment.step import step_problems

    problems = list(range(12))
    epoch0 = [p for t in range(3) for p in step_problems(problems, 0, t, 4)]
    assert sorted(epoch0) == problems, "an epoch visits every problem once"
    assert epoch0 == [p for t in range(3) for p in step_problems(problems, 0, t, 4)], "same seed, same stream"
    assert epoch0 != [p for t in range(3) for p in step_problems(problems, 1, t, 4)]
    straddle = step_problems(problems, 0, 2, 5)  # items 10..14: the end of epoch 0, then epoch 1
    epoch1 = step_problems(problems, 0, 1, 12)  # items 12..23
    assert straddle == epoch0[10:] + epoch1[:3]
    assert sorted(epoch1) == problems and epoch1 != epoch0, "each epoch is its own permutation"


@pytest.mark.slow
def test_release_sampler_frees_the_engine_each_step_and_trains_the_same_run(tiny_model_dir, tmp_path, monkeypatch):
    import talktosolve.team.reward
    from talktosolve.sampling.fast_engine import StaticEngine

    monkeypatch.setattr(talktosolve.team.reward, "grade_many", odd_length_is_right)
    plain, freed = tmp_path / "plain", tmp_path / "freed"
    run_train(tiny_model_dir, plain, extra=["train.lr=1e-2"])
    calls = []
    real = StaticEngine.release

    def counted(self, weights=False):
        calls.append(weights)
        real(self, weights)

    monkeypatch.setattr(StaticEngine, "release", counted)
    run_train(tiny_model_dir, freed, extra=["train.lr=1e-2", "train.release_sampler=true"])
    assert calls.count(True) == 3, "one release with the weights after each step's sampling, one at the end"
    a = load_file(str(plain / "final" / "adapter_model.safetensors"))
    b = load_file(str(freed / "final" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert without_times(read_jsonl(freed / "metrics.jsonl")) == without_times(read_jsonl(plain / "metrics.jsonl"))
    assert read_jsonl(freed / "transcripts.jsonl") == read_jsonl(plain / "transcripts.jsonl")


@pytest.mark.slow
def test_ctrl_c_stops_after_the_step_with_a_checkpoint_there_and_resuming_equals_uninterrupted(
        tiny_model_dir, tmp_path, monkeypatch, capsys):
    """Checkpoints every 2 steps; Ctrl-C during step 0. The run stops when step 0 ends, with a checkpoint at step 1
    that the cadence would not have written, and the same command then finishes it as if never stopped."""
    import os
    import signal

    import talktosolve.team.reward

    monkeypatch.setattr(talktosolve.team.reward, "grade_many", odd_length_is_right)
    extra = ["train.lr=1e-2", "train.steps=3", "train.checkpoint_every=2"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    run_train(tiny_model_dir, whole, extra=extra)
    pressed = []

    def grade_then_ctrl_c(finals, golds):
        if not pressed:
            pressed.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        return odd_length_is_right(finals, golds)

    monkeypatch.setattr(talktosolve.team.reward, "grade_many", grade_then_ctrl_c)
    assert main(train_args(tiny_model_dir, part, extra=extra)) == 130
    assert "stopped by SIGINT after step 0 of 3, every run's checkpoint saved at step 1: rerun the same command" \
        in capsys.readouterr().err
    assert [r["step"] for r in read_jsonl(part / "metrics.jsonl")] == [0]
    assert (part / "checkpoints" / "step-000001" / "state.json").exists() and not (part / "final").exists()
    monkeypatch.setattr(talktosolve.team.reward, "grade_many", odd_length_is_right)
    run_train(tiny_model_dir, part, extra=extra)
    assert_same_run(part, whole)
