"""Several runs in one process (`train.runs_per_process`): their chats are sampled together through a slot-mode
engine, each run learns its own adapter, and every run folder is what a run trained alone would write."""

import json

import pytest
import torch
from safetensors.torch import load_file

from talktosolve.config import make_config
from talktosolve.experiment.assemble import views_respect_arms
from talktosolve.experiment.train import train_runs
from talktosolve.protocol import protocol_of
from talktosolve.store import read_jsonl
from talktosolve.task.tasks import load_problems


def config(model_dir, device="cpu", **train):
    # On a GPU the learner is not compiled: two trainings then run the same kernels (compiled ones are chosen
    # by the shapes a process met first), so their adapters can be compared bit for bit.
    gpu = {"compile": "off"} if device == "cuda" else {}
    return make_config("micro", {
        "device": device,
        "model": {"name_or_path": str(model_dir), "finetune": "lora", "lora_r": 4, **gpu},
        "data": {"n_train": 16, "n_test": 8}, "eval": {"n_problems": 4},
        "chat": {"max_message_tokens": 6, "max_final_tokens": 5},
        "train": {"steps": 2, "problems_per_step": 2, "checkpoint_every": 1, "runs_per_process": 2, **train},
    })


def rewards_by_arm(monkeypatch):
    """A random model never answers right, so every advantage would be 0. Stand-in rewards: the chat arm's
    depend on its answers (a learning signal), the cut arm's are always 0 (no signal: AdamW leaves it exactly
    at its initialisation, which shows whether another run's update ever leaked into it)."""
    import talktosolve.team.reward

    def score(chats, protocol):
        for c in chats:
            right = c.arm.name == "chat" and len(c.turns[-1].text) % 2 == 1
            c.answers = {seat: None for seat in protocol.seats}
            c.correct = {seat: right for seat in protocol.seats}
            c.reward = float(right)

    monkeypatch.setattr(talktosolve.team.reward, "score_chats", score)


@pytest.mark.slow
def test_two_runs_in_one_process_write_two_complete_runs(tiny_model_dir, tmp_path, monkeypatch):
    rewards_by_arm(monkeypatch)
    cfg = config(tiny_model_dir, lr=1e-2)
    train_set, _, _ = load_problems(cfg)
    runs = [("chat", 0, tmp_path / "chat-s0"), ("cut", 1, tmp_path / "cut-s1")]
    train_runs(cfg, runs, train_set, progress=False)
    for (arm, seed, out), (*_, other) in zip(runs, runs[::-1]):
        written = json.loads((out / "config.json").read_text())
        assert written["train"]["runs_per_process"] == 2 and written["trained_with"] == [str(other)]
        metrics = read_jsonl(out / "metrics.jsonl")
        assert [m["step"] for m in metrics] == [0, 1] and all(m["perf/shared_runs"] == 2 for m in metrics)
        chats = read_jsonl(out / "transcripts.jsonl")
        assert len(chats) == 2 * 2 * 4 and {c["arm"] for c in chats} == {arm}
        assert (out / "done.json").exists() and (out / "final" / "adapter_model.safetensors").exists()
    # Each run played its own problems (its seed's stream), in its own arm: the cut run never saw its partner.
    firsts = [[c["problem_id"] for c in read_jsonl(out / "transcripts.jsonl") if c["step"] == 0] for *_, out in runs]
    assert firsts[0] != firsts[1]
    files = [out / "transcripts.jsonl" for *_, out in runs]
    assert views_respect_arms(files, protocol_of(cfg.chat), cfg.chat)
    chat_w = load_file(str(runs[0][2] / "final" / "adapter_model.safetensors"))
    cut_w = load_file(str(runs[1][2] / "final" / "adapter_model.safetensors"))
    assert any(t.abs().max() > 0 for k, t in chat_w.items() if "lora_B" in k), "the chat run learned"
    assert all(t.abs().max() == 0 for k, t in cut_w.items() if "lora_B" in k), "the cut run had no signal"
    assert any(not torch.equal(chat_w[k], cut_w[k]) for k in chat_w if "lora_A" in k), "own initialisations"
    before = [(out / "metrics.jsonl").read_bytes() for *_, out in runs]
    train_runs(cfg, runs, train_set, progress=False)  # done: a no-op
    assert [(out / "metrics.jsonl").read_bytes() for *_, out in runs] == before


def two_chat_runs(root):
    """Two learning runs (chat seeds 0 and 1) as train_runs takes them, in folders under `root`."""
    return [("chat", 0, root / "chat-s0"), ("chat", 1, root / "chat-s1")]


def assert_same_runs(got_runs, ref_runs):
    """Each run of `got_runs` finished as its twin in `ref_runs` did: the same transcripts and final adapter."""
    for (*_, got), (*_, ref) in zip(got_runs, ref_runs):
        assert read_jsonl(got / "transcripts.jsonl") == read_jsonl(ref / "transcripts.jsonl")
        a = load_file(str(ref / "final" / "adapter_model.safetensors"))
        b = load_file(str(got / "final" / "adapter_model.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_shared_runs_resume_exactly_even_when_one_is_ahead(tiny_model_dir, tmp_path, monkeypatch):
    """Stopped after step 1 (checkpoints at 1), then rerun to 2 steps: the same folders as an uninterrupted run;
    the same after a kill between the runs' checkpoints of a step. And a run whose checkpoint is ahead of a
    partner with none (no step in common) waits for it, then both finish."""
    rewards_by_arm(monkeypatch)
    cfg = config(tiny_model_dir, lr=1e-2)
    train_set, _, _ = load_problems(cfg)

    train_runs(cfg, two_chat_runs(tmp_path / "ref"), train_set, progress=False)
    short = config(tiny_model_dir, lr=1e-2, steps=1)
    train_runs(short, two_chat_runs(tmp_path / "resumed"), train_set, progress=False)
    # The same run config but for the steps: make them resumable as 2-step runs.
    for *_, out in two_chat_runs(tmp_path / "resumed"):
        (out / "done.json").unlink()
        (out / "config.json").unlink()
    train_runs(cfg, two_chat_runs(tmp_path / "resumed"), train_set, progress=False)
    assert_same_runs(two_chat_runs(tmp_path / "resumed"), two_chat_runs(tmp_path / "ref"))

    # Killed between the two runs' checkpoints of step 2: the first has it, the second does not. Both resume from
    # step 1, their newest common checkpoint, and replay step 2 together: the same folders as never stopping.
    import shutil

    killed = two_chat_runs(tmp_path / "killed")
    train_runs(cfg, killed, train_set, progress=False)
    for *_, out in killed:
        (out / "done.json").unlink()
        shutil.rmtree(out / "final")
    shutil.rmtree(killed[1][2] / "checkpoints" / "step-000002")
    for log in ("metrics.jsonl", "transcripts.jsonl"):
        path = killed[1][2] / log
        path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if '"step": 1' not in line))
    train_runs(cfg, killed, train_set, progress=False)
    assert_same_runs(killed, two_chat_runs(tmp_path / "ref"))

    ahead = two_chat_runs(tmp_path / "ahead")
    train_runs(short, ahead[:1], train_set, progress=False)  # chat-s0 alone, 1 step: a checkpoint at step 1
    (ahead[0][2] / "done.json").unlink()
    (ahead[0][2] / "config.json").unlink()
    train_runs(cfg, ahead, train_set, progress=False)
    first = read_jsonl(ahead[0][2] / "metrics.jsonl")
    second = read_jsonl(ahead[1][2] / "metrics.jsonl")
    assert [m["step"] for m in first] == [0, 1] and [m["step"] for m in second] == [0, 1]
    assert second[0]["perf/shared_runs"] == 1 and second[1]["perf/shared_runs"] == 2
    assert all((out / "done.json").exists() for *_, out in ahead)


def test_runs_per_process_settings_are_checked():
    from talktosolve.config import ConfigError

    with pytest.raises(ConfigError, match="runs_per_process"):
        make_config("micro", {"train": {"runs_per_process": 2}, "model": {"finetune": "full"}})
    with pytest.raises(ConfigError, match="not both"):
        make_config("micro", {"train": {"runs_per_process": 2}, "model": {"finetune": "lora"}, "parallel_runs": 2})
    with pytest.raises(ConfigError, match="at least 1"):
        make_config("micro", {"train": {"runs_per_process": 0}})


def test_the_train_command_trains_one_run(tiny_model_dir, tmp_path, capsys):
    from talktosolve.cli import main

    args = ["train", "--preset", "micro", "--arm", "chat", "--seed", "0", "--out", str(tmp_path / "run"), "--quiet",
            "--set", f"model.name_or_path={tiny_model_dir}", "--set", "model.finetune=lora",
            "--set", "train.runs_per_process=2"]
    assert main(args) == 2
    assert "talktosolve recipe" in capsys.readouterr().err


@pytest.mark.parametrize("device", [pytest.param("cpu", marks=pytest.mark.slow),
                                    pytest.param("cuda", marks=pytest.mark.gpu)])
def test_shared_runs_keep_the_sampler_between_steps_unless_release_sampler_and_train_the_same(tiny_model_dir,
                                                                                             tmp_path, monkeypatch,
                                                                                             device):
    """Before each step's learning, runs sharing a process keep their engine's KV pool and graphs (the next step's
    calls reuse them; on a GPU, CUDA graphs captured in the step before); with `train.release_sampler` they free
    it. Either way the runs write the same chats and adapters, and the pool is freed when training ends."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from talktosolve.experiment.step import Loop
    from talktosolve.sampling.fast_engine import StaticEngine

    rewards_by_arm(monkeypatch)
    loop_release, engine_release, inside, freed = Loop.release, StaticEngine.release, [], []

    def loop_release_spy(self):
        inside.append(True)
        try:
            loop_release(self)
        finally:
            inside.pop()

    def engine_release_spy(self, weights=False):
        if inside:  # freed by the loop's release before learning, not by a pool that had to grow
            freed.append(weights)
        engine_release(self, weights)

    engines, init = [], StaticEngine.__init__

    def init_spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        engines.append(self)

    monkeypatch.setattr(Loop, "release", loop_release_spy)
    monkeypatch.setattr(StaticEngine, "release", engine_release_spy)
    monkeypatch.setattr(StaticEngine, "__init__", init_spy)
    cfg = config(tiny_model_dir, device, lr=1e-2)
    train_set, _, _ = load_problems(cfg)
    train_runs(cfg, two_chat_runs(tmp_path / "kept"), train_set, progress=False)
    assert freed == []
    assert len(engines) == 1 and engines[0].pool is None and not engines[0].graphs, "freed when training ends"
    train_runs(config(tiny_model_dir, device, lr=1e-2, release_sampler=True), two_chat_runs(tmp_path / "freed"),
               train_set, progress=False)
    assert freed == [False] * cfg.train.steps, "freed once a step"
    assert_same_runs(two_chat_runs(tmp_path / "freed"), two_chat_runs(tmp_path / "kept"))


@pytest.mark.slow
def test_a_sigterm_in_the_last_step_finishes_the_runs_and_still_stops(tiny_model_dir, tmp_path, monkeypatch):
    """A SIGTERM during the last step leaves no step to keep: both runs finish (final weights, done.json) and
    train_runs still raises Stopped, so that a recipe does not go on to its evaluations; rerunning is a no-op."""
    import os
    import signal

    from talktosolve.experiment.step import Loop
    from talktosolve.experiment.stopping import Stopped

    rewards_by_arm(monkeypatch)
    cfg = config(tiny_model_dir, lr=1e-2, steps=2)
    train_set, _, _ = load_problems(cfg)
    learn, sent = Loop.learn, []

    def learn_then_sigterm(self, step, *args, **kwargs):
        if step == cfg.train.steps - 1 and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        return learn(self, step, *args, **kwargs)

    monkeypatch.setattr(Loop, "learn", learn_then_sigterm)
    runs = two_chat_runs(tmp_path)
    with pytest.raises(Stopped, match=r"after the last step \(1 of 2\)") as info:
        train_runs(cfg, runs, train_set, progress=False)
    assert sent and info.value.code == 128 + signal.SIGTERM
    for *_, out in runs:
        assert (out / "done.json").exists() and (out / "final" / "adapter_model.safetensors").exists()
        assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0, 1]
    before = [(out / "metrics.jsonl").read_bytes() for *_, out in runs]
    train_runs(cfg, runs, train_set, progress=False)  # finished: a no-op
    assert [(out / "metrics.jsonl").read_bytes() for *_, out in runs] == before


@pytest.mark.slow
def test_a_sigterm_keeps_each_shared_run_at_the_step_and_resuming_equals_uninterrupted(tiny_model_dir, tmp_path,
                                                                                      monkeypatch):
    """Two learning runs in one process, checkpoints every 2 steps, a SIGTERM during step 0: both stop when step 0
    ends, each with its own weights and optimizer at step 1 (swapped in before saving), and going on gives the
    folders of a run never stopped."""
    import os
    import signal

    import talktosolve.team.reward
    from talktosolve.experiment.stopping import Stopped

    rewards_by_arm(monkeypatch)
    cfg = config(tiny_model_dir, lr=1e-2, steps=3, checkpoint_every=2)
    train_set, _, _ = load_problems(cfg)

    train_runs(cfg, two_chat_runs(tmp_path / "ref"), train_set, progress=False)
    score, sent = talktosolve.team.reward.score_chats, []

    def score_then_sigterm(chats, protocol):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        score(chats, protocol)

    monkeypatch.setattr(talktosolve.team.reward, "score_chats", score_then_sigterm)
    stopped = two_chat_runs(tmp_path / "stopped")
    with pytest.raises(Stopped, match="after step 0 of 3") as info:
        train_runs(cfg, stopped, train_set, progress=False)
    assert info.value.code == 128 + signal.SIGTERM
    for *_, out in stopped:
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000001"]
        assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [0]
    monkeypatch.setattr(talktosolve.team.reward, "score_chats", score)
    train_runs(cfg, stopped, train_set, progress=False)
    for *_, ref in two_chat_runs(tmp_path / "ref"):
        a = load_file(str(ref / "final" / "adapter_model.safetensors"))
        assert any(t.abs().max() > 0 for k, t in a.items() if "lora_B" in k), "the run learned"
    assert_same_runs(stopped, two_chat_runs(tmp_path / "ref"))
