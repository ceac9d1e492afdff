"""Frozen partners (`frozen.py`): a snapshot of the learner refreshed every `train.snapshot_every` steps and kept
in checkpoints (so resuming is exact), and a finished run as the partner, named by its key."""

import json

import pytest
import torch
from safetensors.torch import load_file

from talktosolve.cli import main
from talktosolve.config import ConfigError, make_config
from talktosolve.store import read_jsonl

pytestmark = pytest.mark.slow

SNAPSHOT = ["train.partners=0.5", "train.partner=snapshot", "train.snapshot_every=2", "train.steps=4",
            "train.lr=3e-3"]
LORA = ["model.finetune=lora", "model.lora_r=4", "train.lr=1e-2"]
# Full fine-tuning keeps a frozen copy of the learner for its snapshot; LoRA holds it in a slot of its own engine.
FINETUNES = pytest.mark.parametrize("finetune", [[], LORA], ids=["full", "lora"])
WEIGHTS = {(): "model.safetensors", tuple(LORA): "adapter_model.safetensors"}


def _train(out, extra):
    args = ["train", "--preset", "tiny", "--arm", "chat", "--seed", "0", "--out", str(out), "--quiet"]
    for item in extra:
        args += ["--set", item]
    return main(args)


@FINETUNES
def test_a_snapshot_partner_holds_the_learners_weights_of_the_latest_multiple_of_snapshot_every(tmp_path, finetune):
    assert _train(tmp_path / "run", SNAPSHOT + ["train.checkpoint_every=2"] + finetune) == 0
    ckpts = tmp_path / "run" / "checkpoints"
    at2 = load_file(str(ckpts / "step-000002" / "trainable.safetensors"))
    snap2 = load_file(str(ckpts / "step-000002" / "snapshot.safetensors"))
    snap4 = load_file(str(ckpts / "step-000004" / "snapshot.safetensors"))
    assert snap4.keys() == at2.keys() and all(torch.equal(snap4[k], at2[k]) for k in at2)
    assert any(not torch.equal(snap2[k], at2[k]) for k in at2), "before step 2 it held the initial weights"
    rows = read_jsonl(tmp_path / "run" / "transcripts.jsonl")
    held = {(r["step"], r.get("partner_step")) for r in rows if r["partner_seat"] is not None}
    assert held == {(0, 0), (1, 0), (2, 2), (3, 2)}


@FINETUNES
def test_resume_with_a_snapshot_partner_equals_uninterrupted(tmp_path, monkeypatch, finetune):
    import talktosolve.model.checkpoint as checkpoint

    extra = SNAPSHOT + ["train.checkpoint_every=1"] + finetune
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert _train(whole, extra) == 0
    real_save = checkpoint.save

    def stop_after_step_3(run_dir, parts, step, **kw):
        real_save(run_dir, parts, step, **kw)
        if step == 3:  # its snapshot (step 2's weights) is not the checkpoint's weights
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "save", stop_after_step_3)
    assert _train(part, extra) == 130
    monkeypatch.setattr(checkpoint, "save", real_save)
    assert _train(part, extra) == 0
    a = load_file(str(whole / "final" / WEIGHTS[tuple(finetune)]))
    b = load_file(str(part / "final" / WEIGHTS[tuple(finetune)]))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    strip = [{k: v for k, v in r.items() if "seconds" not in k} for r in read_jsonl(whole / "metrics.jsonl")]
    assert strip == [{k: v for k, v in r.items() if "seconds" not in k} for r in read_jsonl(part / "metrics.jsonl")]


def test_a_finished_run_as_the_partner_counts_by_its_key_not_its_path(tmp_path):
    from talktosolve.experiment.train import run_config

    first = tmp_path / "first"
    assert _train(first, ["train.steps=2"]) == 0
    moved = tmp_path / "moved"
    first.rename(moved)
    cfg = make_config("tiny", {"train": {"partners": 0.5, "partner": str(moved)}})
    key = json.loads((moved / "done.json").read_text())["key"]
    assert run_config(cfg, "chat", 0)["train"]["partner"] == key
    assert _train(tmp_path / "second", ["train.partners=0.5", f"train.partner={moved}", "train.steps=2"]) == 0
    rows = read_jsonl(tmp_path / "second" / "transcripts.jsonl")
    assert sum(r["partner_seat"] is not None for r in rows) == len(rows) // 2


def test_a_partner_that_is_no_folder_fails_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="neither base, snapshot nor a folder"):
        make_config("tiny", {"train": {"partners": 0.5, "partner": str(tmp_path / "nowhere")}})
    with pytest.raises(ConfigError, match="snapshot_every is 0"):
        make_config("tiny", {"train": {"snapshot_every": 0}})


def _count_calls(monkeypatch):
    """Each StaticEngine call's `adapters=` (a row's slot, None for the base), in order."""
    from talktosolve.sampling import fast_engine

    calls = []
    real = fast_engine.StaticEngine.generate

    def counting(self, prompts, *args, **kwargs):
        calls.append(kwargs.get("adapters"))
        return real(self, prompts, *args, **kwargs)

    monkeypatch.setattr(fast_engine.StaticEngine, "generate", counting)
    return calls


def test_a_lora_runs_base_partner_samples_in_the_learners_own_engine_one_call_a_turn(tmp_path, monkeypatch):
    calls = _count_calls(monkeypatch)
    extra = ["model.finetune=lora", "model.lora_r=4", "train.partners=0.5", "train.steps=2", "train.lr=1e-2"]
    assert _train(tmp_path / "run", extra) == 0
    assert len(calls) == 2 * 4, "one call a turn: the learner's rows and the base partner's together"
    assert all(rows is not None and 0 in rows for rows in calls)
    assert any(None in rows for rows in calls), "some rows sampled by the base alone"
    rows = read_jsonl(tmp_path / "run" / "transcripts.jsonl")
    assert sum(r["partner_seat"] is not None for r in rows) == len(rows) // 2


def test_a_lora_runs_snapshot_partner_samples_in_its_own_slot_of_the_learners_engine(tmp_path, monkeypatch):
    calls = _count_calls(monkeypatch)
    assert _train(tmp_path / "run", SNAPSHOT + LORA) == 0
    assert len(calls) == 4 * 4, "one call a turn: the learner's rows and the snapshot's together"
    assert all(rows is not None and 0 in rows for rows in calls)
    assert any(1 in rows for rows in calls), "some rows sampled through the snapshot's slot"
    assert not any(None in rows for rows in calls), "no row reads the bare base"


def test_a_finished_lora_run_as_the_partner_samples_in_the_learners_engine_unless_its_shape_differs(
        tmp_path, monkeypatch):
    first, other = tmp_path / "first", tmp_path / "rank-8"
    assert _train(first, ["train.steps=2"] + LORA) == 0
    assert _train(other, ["train.steps=2"] + LORA + ["model.lora_r=8"]) == 0
    calls = _count_calls(monkeypatch)
    assert _train(tmp_path / "second", ["train.partners=0.5", f"train.partner={first}", "train.steps=2"] + LORA) == 0
    assert len(calls) == 2 * 4 and any(1 in rows for rows in calls)
    calls.clear()
    assert _train(tmp_path / "third", ["train.partners=0.5", f"train.partner={other}", "train.steps=2"] + LORA) == 0
    assert len(calls) > 2 * 4, "a rank-8 adapter has no slot in a rank-4 engine: it samples from its own model"


def test_weights_stored_in_a_slot_sample_as_a_model_holding_them_and_leave_the_model_as_it_was():
    from helpers import lora_model, prompts, set_adapter_weights

    from talktosolve.experiment.frozen import store_in_slot
    from talktosolve.sampling.fast_engine import StaticEngine

    model = lora_model()
    set_adapter_weights(model, 1)
    theirs = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    expected = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, force_max_length=True).generate(
        prompts(97, [5, 9]), 8)
    set_adapter_weights(model, 2)
    live = {n: p.detach().clone() for n, p in model.named_parameters()}
    engine = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, force_max_length=True, slots=2)
    store_in_slot(engine, model, theirs, 1)
    assert all(torch.equal(p, live[n]) for n, p in model.named_parameters())
    assert engine.generate(prompts(97, [5, 9]), 8, adapters=[1, 1]) == expected
    assert engine.generate(prompts(97, [5, 9]), 8, adapters=[0, 0]) != expected, "slot 0 is empty: another policy"
