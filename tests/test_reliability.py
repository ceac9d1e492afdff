"""Bad input gets a clear error and leaves no partial result."""

import errno
import json

import pytest
import torch

from talktosolve.cli import main
from talktosolve.config import ConfigError, make_config, parse_overrides
from talktosolve.store import read_jsonl, truncate_jsonl, write_json

SMALL = ["data.n_train=16", "data.n_test=8", "train.steps=2", "train.problems_per_step=2", "train.checkpoint_every=1",
         "chat.max_message_tokens=6", "chat.max_final_tokens=5", "eval.n_problems=4", "eval.batch_chats=8",
         "model.lora_r=4", "model.finetune=lora"]


def train_args(model_dir, out, extra=()):
    args = ["train", "--preset", "micro", "--arm", "chat", "--out", str(out), "--quiet",
            "--set", f"model.name_or_path={model_dir}"]
    for s in SMALL + list(extra):
        args += ["--set", s]
    return args


def test_unknown_config_key_names_the_closest():
    with pytest.raises(ConfigError, match="train.lrr.*Did you mean `lr`"):
        parse_overrides(["train.lrr=1"])
    with pytest.raises(ConfigError, match="Did you mean `n_train`"):
        make_config(None, {"data": {"n_trian": 3}})


@pytest.mark.parametrize("override,message", [
    ({"data": {"n_train": 0}}, "data.n_train is 0"),
    ({"train": {"chats_per_problem": 1}}, "at least 2"),
    ({"eval": {"n_problems": 500}}, "exceeds data.n_test"),
    ({"chat": {"temperature": 0}}, "temperature"),
    ({"model": {"finetune": "qlora"}}, "finetune"),
    # the team's protocol, arms and comparisons
    ({"chat": {"order": ["A", "B", "C"]}}, r"chat.order names \['C'\], which are not in chat.seats"),
    ({"chat": {"seats": ["A", "B", "C"]}}, r"chat.order never gives \['C'\] a turn"),
    ({"chat": {"seats": ["A"], "order": ["A"]}}, "at least 2 seats"),
    ({"chat": {"turn_tokens": [16, 36]}}, "chat.turn_tokens has 2 limits for the 4 turns"),
    ({"chat": {"final_turns": [0, 0]}}, "chat.final_turns gives seat B turn 0, which is not one of its turns"),
    ({"arms": ["chat", "nope"]}, "arms holds `nope`"),
    ({"arms": ["chat", "chat"]}, "arms holds an arm twice"),
    ({"comparisons": ["chat-chat"]}, "comparisons holds `chat-chat`"),
])
def test_impossible_settings_fail_before_any_work(override, message):
    with pytest.raises(ConfigError, match=message):
        make_config(None, override)


def test_eval_seat_without_a_folder_is_a_clear_error(tmp_path, capsys):
    code = main(["eval", "--preset", "tiny", "--seat", "C", "--out", str(tmp_path / "ev"), "--quiet"])
    assert code == 2 and "expected SEAT=FOLDER" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_evaluating_a_seat_the_protocol_lacks_fails_before_loading_anything(tmp_path):
    from talktosolve.config import ConfigError, make_config
    from talktosolve.experiment.evaluate import evaluate

    with pytest.raises(ConfigError, match="no seat C in this protocol"):
        evaluate(make_config("tiny"), [], tmp_path / "ev", seats={"C": str(tmp_path)})
    assert not (tmp_path / "ev").exists()


@pytest.mark.slow
def test_token_limit_beyond_the_context_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dir, out, ["chat.max_final_tokens=100000"])) == 2
    assert "exceeds the model's context" in capsys.readouterr().err
    assert not (out / "done.json").exists() and not (out / "final").exists()


def test_unknown_model_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(train_args(tmp_path / "no-such-model", tmp_path / "run")) == 2
    assert "Cannot load" in capsys.readouterr().err


@pytest.mark.slow
def test_adapter_that_does_not_fit_the_base(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(tiny_model_dir, run)) == 0
    other = tmp_path / "other-base"
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(other)
    tok.save_pretrained(other)
    code = main(["eval", "--preset", "micro", "--a", str(run), "--out", str(tmp_path / "ev"), "--quiet",
                 "--set", f"model.name_or_path={other}", "--set", "eval.n_problems=2"])
    assert code == 2
    assert "does not fit the base model" in capsys.readouterr().err
    assert not (tmp_path / "ev" / "summary.json").exists()


@pytest.mark.slow
def test_pickled_adapter_is_refused(tiny_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(tiny_model_dir, run)) == 0
    (run / "final" / "adapter_model.safetensors").rename(run / "final" / "adapter_model.bin")
    code = main(["eval", "--preset", "micro", "--a", str(run), "--out", str(tmp_path / "ev"), "--quiet",
                 "--set", f"model.name_or_path={tiny_model_dir}", "--set", "eval.n_problems=2"])
    assert code == 2 and "only as safetensors" in capsys.readouterr().err


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import talktosolve.experiment.step as step_mod
    from talktosolve.learning.grpo import NonFiniteLoss

    real = step_mod.grpo_update
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise NonFiniteLoss("loss nan, gradient norm nan")
        return real(*args, **kwargs)

    monkeypatch.setattr(step_mod, "grpo_update", flaky)
    out = tmp_path / "run"
    assert main(train_args(tiny_model_dir, out)) == 2
    err = capsys.readouterr().err
    assert "Step 1" in err and "step-000001" in err and "not applied" in err
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [0]
    assert not (out / "done.json").exists()
    monkeypatch.setattr(step_mod, "grpo_update", real)
    assert main(train_args(tiny_model_dir, out)) == 0  # the same command resumes and finishes
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [0, 1]


@pytest.mark.slow
def test_gpu_out_of_memory_names_the_setting(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import talktosolve.experiment.step as step_mod

    def oom(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(step_mod, "grpo_update", oom)
    assert main(train_args(tiny_model_dir, tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert "train.chats_per_microbatch" in err and "train.release_sampler" in err


def test_full_disk_leaves_no_partial_file(tmp_path, monkeypatch):
    import talktosolve.store as store

    target = tmp_path / "results.json"
    write_json(target, {"old": 1})

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", no_space)
    with pytest.raises(OSError):
        write_json(target, {"new": 2})
    assert json.loads(target.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.slow
def test_full_disk_in_the_cli_says_what_to_do(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import talktosolve.experiment.step as step_mod

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(step_mod, "append_jsonl", no_space)
    assert main(train_args(tiny_model_dir, tmp_path / "run")) == 28
    assert "disk is full" in capsys.readouterr().err


def test_torn_log_tail_is_repaired(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "trunc')
    assert read_jsonl(log) == [{"step": 0}, {"step": 1}]
    assert truncate_jsonl(log, lambda r: r["step"] < 1) == 1
    assert log.read_text() == '{"step": 0}\n'


@pytest.mark.parametrize("text", ["\ud800\\boxed{\udfff}", "\\boxed{7\x00}", "\\boxed{" + "\u202e" * 10_000 + "7}",
                                  "\\boxed{\ufeff７２}", "\\boxed{1e99999999}", "\\boxed{" + "-" * 100_000 + "1}"])
def test_invalid_unicode_and_odd_text_never_crash(text):
    from talktosolve import grade_answer, talk_metrics

    assert grade_answer(text, "72") in (True, False)
    row = talk_metrics([text, "12 apples"], ["3 more"], "How many?", [text, text, text, text])
    assert set(row) >= {"send_a", "send_b", "use_a", "use_b", "ask_a", "ask_b", "agree"}
