"""The config's keys by declaration (every field says which keys it is part of, and the keys of finished runs and
evaluations do not move), comparisons as records, and the presets the committed real-weights runs were made with."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from talktosolve.config import EVAL, RUN, Config, ConfigError, config_key, make_config, parse_overrides
from talktosolve.experiment.evaluate import eval_key
from talktosolve.experiment.train import run_config


def _fields(section, where=""):
    for f in dataclasses.fields(section):
        yield f"{where}{f.name}", f
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            yield from _fields(value, f"{where}{f.name}.")


def test_every_field_says_which_keys_it_is_part_of():
    unclassified = [name for name, f in _fields(Config()) if "keys" not in f.metadata]
    assert not unclassified, f"declare these fields' keys with config.setting: {unclassified}"
    for name, f in _fields(Config()):
        assert set(f.metadata["keys"]) <= {RUN, EVAL}, name
        assert f.metadata["when"] is None or callable(f.metadata["when"]), name


def test_a_field_counts_in_a_key_only_inside_a_section_that_does():
    """A section's fields are in a key only when the section is: no field of `eval` in a run's key."""
    for name, f in _fields(Config()):
        section = name.rpartition(".")[0]
        for key in f.metadata["keys"]:
            while section:
                assert key in dict(_fields(Config()))[section].metadata["keys"], f"{name} ({key}) in {section}"
                section = section.rpartition(".")[0]


# Computed by the code before the keys were declared (each module spelled its key's fields by hand): evaluations
# and runs finished then stay finished.
EVAL_KEYS = [
    ("micro", "chat", {}, "f0aa14ea85d494ad"),
    ("paper", "cut", {}, "1ad157696f8a179d"),
    ("micro-3", "full", {}, "327af8c55df7d1f5"),
    ("paper-steady", "chat", {}, "a5a529282cd527da"),
    # what is left out: the adapters (the runs' keys hold them), which evaluations the recipe makes, the
    # replays, how many evaluations share engine passes
    ("micro", "chat", {"model": {"adapters": "per_role"}, "eval": {"batch_evals": 4, "cross_seed": True,
                                                                    "influence": True, "influence_problems": 10}},
     "f0aa14ea85d494ad"),
]
RUN_KEYS = [
    ("paper", {}, "a0b775c57696410c"),
    ("paper-steady", {}, "4f5742800eb46e22"),
    ("micro-partners", {}, "6da9415a5c9a99c3"),
    ("micro", {"train": {"partners": 0.5, "partner": "snapshot", "snapshot_every": 5}}, "c520e400c363979f"),
    ("micro", {"train": {"partners": 0.5}}, "0d7107293772bdd2"),
    ("micro", {"model": {"adapters": "per_role"}}, "c2d26a119b8fa910"),
    ("micro", {"train": {"dynamic_sampling": True, "max_draws": 3, "kl_coef": 0.04, "pool_chats": 4, "pool_min": 1,
                         "pool_max": 3}}, "a7389f32a6a50119"),
    ("paper", {"train": {"runs_per_process": 6}}, "931fe7f1628c58ba"),
]


@pytest.mark.parametrize("preset, arm, over, key", EVAL_KEYS)
def test_evaluation_keys_are_those_of_before(preset, arm, over, key):
    cfg = make_config(preset, over)
    assert eval_key(cfg, arm, {seat: None for seat in cfg.chat.seats}) == key


@pytest.mark.parametrize("preset, over, key", RUN_KEYS)
def test_run_keys_are_those_of_before(preset, over, key):
    assert config_key(run_config(make_config(preset, over), "chat", 1)) == key


def test_a_setting_added_later_counts_only_when_used():
    plain = run_config(make_config("micro"), "chat", 0)
    assert not {"runs_per_process", "partners", "partner", "snapshot_every", "dynamic_sampling", "max_draws",
                "draw_batches", "pool_chats", "pool_min", "pool_max", "kl_coef"} & set(plain["train"])
    one = run_config(make_config("micro", {"train": {"dynamic_sampling": True, "draw_batches": 1}}), "chat", 0)
    assert "draw_batches" not in one["train"]  # one batch a pass: as before the setting
    two = run_config(make_config("micro", {"train": {"dynamic_sampling": True, "draw_batches": 2}}), "chat", 0)
    assert two["train"]["draw_batches"] == 2
    assert "adapters" not in plain["model"]
    # a base partner is the default partner: only the share counts; a snapshot adds how often it is taken
    base = run_config(make_config("micro", {"train": {"partners": 0.5}}), "chat", 0)["train"]
    assert base["partners"] == 0.5 and "partner" not in base and "snapshot_every" not in base
    snap = run_config(make_config("micro", {"train": {"partners": 0.5, "partner": "snapshot"}}), "chat", 0)["train"]
    assert (snap["partner"], snap["snapshot_every"]) == ("snapshot", 20)


def test_comparisons_are_pairs_named_x_y_in_presets_set_and_results():
    cfg = make_config("micro-3")
    assert cfg.comparisons == (("chat", "cut"), ("full", "chat"))
    assert cfg.to_dict()["comparisons"] == ("chat-cut", "full-chat")  # config.json and results.json, as before
    assert make_config("micro", parse_overrides(["comparisons=full-cut,chat-cut"])).comparisons == (
        ("full", "cut"), ("chat", "cut"))
    assert make_config("micro", {"comparisons": [["full", "cut"]]}).comparisons == (("full", "cut"),)
    assert make_config(None, make_config("micro-3").to_dict()).comparisons == cfg.comparisons  # read back
    with pytest.raises(ConfigError, match="must be a comparison such as chat-cut, got 3"):
        make_config("micro", {"comparisons": [3]})


EXPERIMENTS = Path(__file__).resolve().parents[1] / "bench" / "results" / "experiments"


def _added_later(cfg, written: dict) -> dict:
    """`cfg.to_dict()` less the settings added after `written` was (absent from it) that do not count here."""
    out = json.loads(json.dumps(cfg.to_dict()))
    for name, section in out.items():
        if not isinstance(section, dict) or not dataclasses.is_dataclass(getattr(cfg, name, None)):
            continue
        for f in dataclasses.fields(getattr(cfg, name)):
            when = f.metadata.get("when")
            if f.name not in written.get(name, {}) and when and not when(getattr(cfg, name)):
                section.pop(f.name, None)
    return out


@pytest.mark.parametrize("folder", ["paper-steady-qwen2.5-coder-1.5b/seeds-0-2",
                                    "paper-informative-qwen2.5-coder-1.5b/chat-seeds-0-5",
                                    "paper-stable-qwen2.5-coder-1.5b/chat-seeds-0-5",
                                    "paper-stable-pairs-qwen2.5-coder-1.5b/seed-0",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-0",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-1",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-2",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-3",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-4",
                                    "paper-stable-warmup-pairs-qwen2.5-coder-1.5b/seed-5",
                                    "warmup-screen-qwen2.5-coder-1.5b"])
def test_a_committed_real_weights_run_is_its_preset_under_the_command_it_records(folder):
    """The run's config.json is what its provenance's command makes of the preset as committed: a preset edited
    after the run would describe a run that was never made. Settings added since, which do not count in it, are
    left out. A pair committed after the first has a block of its own in the provenance (`seed_K`)."""
    run = json.loads((EXPERIMENTS / folder / "config.json").read_text())
    provenance = json.loads((EXPERIMENTS / folder.split("/")[0] / "provenance.json").read_text())
    provenance = provenance.get(folder.split("/")[-1].replace("-", "_"), provenance)
    command = shlex.split(provenance["commands"]["runs"])
    flags = [(a, b) for a, b in zip(command, command[1:]) if a.startswith("--")]
    overrides = parse_overrides([value for flag, value in flags if flag == "--set"])
    overrides.setdefault("data", {})["gsm8k"] = dict(flags)["--gsm8k"]
    assert dict(flags)["--preset"] == run.pop("preset")
    assert _added_later(make_config(dict(flags)["--preset"], overrides), run) == run


def test_paper_stable_warmup_is_paper_stable_with_the_warmup_the_screen_ran():
    """The preset differs from `paper-stable` in one setting, the learning-rate warm-up, at the value the committed
    warm-up screen ran with (the screen's config is `paper-stable` under its command: the test above)."""
    screen = json.loads((EXPERIMENTS / "warmup-screen-qwen2.5-coder-1.5b" / "config.json").read_text())
    preset, stable = make_config("paper-stable-warmup").to_dict(), make_config("paper-stable").to_dict()
    differ = {(section, k) for section in preset for k in (preset[section] if isinstance(preset[section], dict) else [])
              if preset[section][k] != stable[section][k]}
    assert differ == {("train", "warmup_steps")} and preset["train"]["warmup_steps"] == screen["train"]["warmup_steps"]
    assert {k: v for k, v in preset.items() if not isinstance(v, dict)} == \
        {k: v for k, v in stable.items() if not isinstance(v, dict)}


def test_every_built_in_preset_is_a_valid_config_and_listed_in_the_cli_reference():
    from talktosolve.config import preset_names

    names = preset_names()
    assert "micro-weak-stable" in names
    for name in names:
        make_config(name)  # raises ConfigError on an invalid preset
    listed = (Path(__file__).parents[1] / "docs" / "cli.md").read_text(encoding="utf-8")
    line = next(line for line in listed.splitlines() if "talktosolve recipe --preset" in line)
    shown = line.split("--preset ", 1)[1].split("`", 1)[0].replace("\\|", "|").split("|")
    assert shown == names, "docs/cli.md's `recipe --preset` list must name the built-in presets, sorted"
