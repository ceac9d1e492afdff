"""Messages that end where the model stops: in a batch whose rows end at different steps (and whose later turns
read each copy's held cache), every message the fast engine writes is what transformers' greedy `generate` writes
for the same prompts. On the micro base (a trained model whose messages end by themselves) on a CPU, and, marked
`gpu`, through the CUDA graph, the attention kernel and slot mode; `test_real_model.py` does the same on real
pretrained weights."""

import pytest
import torch
from helpers import hf_greedy, set_adapter_weights

from talktosolve.sampling.fast_engine import StaticEngine


def check_natural_stops(device, slots=0, **engine_options):
    """The micro base (a trained model: its messages end by themselves) plays greedy chats through the engine on
    `device`: every message, in batches whose rows stop at different steps and whose later turns read each
    copy's held cache, equals transformers' `generate` for the same prompts. With `slots`, the chats are that
    many blocks, each through its own adapter, and each is compared under its own adapter. Returns the engine."""
    from peft import LoraConfig, get_peft_model

    from talktosolve.arms import ARMS
    from talktosolve.config import make_config
    from talktosolve.micro.base import load_micro_base
    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import stop_ids
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.rollout import Player, play_chats

    chat = make_config("micro").chat
    model, tok = load_micro_base()
    model = model.to(device).eval()
    if slots:
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    stops = stop_ids(tok, model)
    engine = StaticEngine(model, stop_ids=stops, pad_id=tok.pad_token_id, greedy=True, slots=slots, **engine_options)
    for j in range(slots):  # adapters small enough that the base still ends its messages, large enough to differ
        set_adapter_weights(model, 20 + j, scale=0.05)
        engine.store_adapter(j)
    protocol = protocol_of(chat)
    problems = make_problems("test", 8, seed=0)
    block = len(problems) // max(slots, 1)
    # With slots, chat i is played through slot i // block: every turn of all of them is one engine call.
    players = [Player(engine, tok, adapter=j if slots else None) for j in range(max(slots, 1))]
    lineups = [{s: players[i // block] for s in protocol.seats} for i in range(len(problems))]
    chats = play_chats(problems, ARMS["chat"], lineups, protocol, chat, chats_per_problem=1, seed=0)
    uneven = 0
    for j in range(0, len(chats), block):
        if slots:
            set_adapter_weights(model, 20 + j // block, scale=0.05)
        for i in range(protocol.n_turns):
            turns = [c.turns[i] for c in chats[j:j + block]]
            rows = [t.completion_ids for t in turns]
            uneven += len({len(r) for r in rows}) > 1 and any(r[-1] in stops for r in rows)
            assert rows == hf_greedy(model, [t.prompt_ids for t in turns], protocol.max_tokens(i), stops)
    assert uneven, "in some batch a row stopped while another went on"
    if slots:
        firsts = [tuple(c.turns[0].completion_ids) for c in chats]
        assert firsts[:block] != firsts[block:2 * block], "the blocks' adapters must make a difference"
    return engine


def test_rows_that_stop_at_different_steps_match_generate_cpu():
    check_natural_stops("cpu")


def test_slot_mode_rows_that_stop_at_different_steps_match_generate_cpu():
    check_natural_stops("cpu", slots=2)


@pytest.mark.gpu
def test_natural_stops_through_the_cuda_graph_the_kernel_and_slot_mode():
    """On the GPU: the micro base's greedy chats through the captured decode graph, with the attention kernel
    and with the portable attention, and in slot mode, equal transformers' `generate` token for token."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    for options in ({"attention_kernel": True}, {"attention_kernel": False}, {"slots": 2}):
        engine = check_natural_stops("cuda", **options)
        assert engine.graphs and all(s["graph"] is not None for s in engine.graphs.values()), "decoded by graphs"
        assert engine.attention_kernel == options.get("attention_kernel", True), "the kernel is the CUDA default"
