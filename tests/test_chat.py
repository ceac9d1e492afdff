"""Views: what each seat sees, for every arm and seat of 2-, 3- and 4-seat protocols; rendering with a real template."""

import pytest

from talktosolve.arms import ARMS, NO_MESSAGE, Arm
from talktosolve.config import ChatConfig
from talktosolve.protocol import protocol_of
from talktosolve.team.chat import Seat, render_view, view

FACTS = ["Ann has 12 apples.", "Bob gives her 5 more.", "She eats 3.", "Cy brings 4.", "Dee takes 2.", "Eve adds 6."]
QUESTION = "How many apples are left in all?"
PROTOCOLS = {
    2: ChatConfig(),
    3: ChatConfig(seats=("A", "B", "C"), order=("A", "B", "C", "A", "B", "C")),
    4: ChatConfig(seats=("A", "B", "C", "D"), order=("A", "B", "C", "D") * 2),
    "long": ChatConfig(order=("A", "B") * 3),
}


def text_of(messages):
    return "\n".join(m["content"] for m in messages)


def views(chat_cfg, arm, messages):
    """Every turn's view, with `messages[t]` written at turn t."""
    protocol = protocol_of(chat_cfg)
    hands = arm.hands(FACTS, protocol.seats)
    return [view(Seat(hands[protocol.speaker(t)], QUESTION), t, messages[:t], arm, protocol, chat_cfg)
            for t in range(protocol.n_turns)], protocol, hands


def markers(protocol):
    return [f"MSG-{t}-{protocol.speaker(t)}" for t in range(protocol.n_turns)]


def test_paper_protocol_limits_and_finals():
    protocol = protocol_of(ChatConfig())
    assert protocol.order == ("A", "B", "A", "B") and protocol.finals == (2, 3)
    assert [protocol.max_tokens(t) for t in range(4)] == [160, 160, 384, 384]


@pytest.mark.parametrize("shape", list(PROTOCOLS))
@pytest.mark.parametrize("arm", list(ARMS))
def test_every_seat_sees_its_hand_and_what_its_arm_shows_and_nothing_else(shape, arm):
    """Plant a marker in every fact and message: a view holds exactly the seat's own facts, the question, its own
    messages, and the partners' messages the arm shows; every hidden one is `(no message)` in its place."""
    chat_cfg, arm = PROTOCOLS[shape], ARMS[arm]
    protocol = protocol_of(chat_cfg)
    sent = markers(protocol)
    all_views, protocol, hands = views(chat_cfg, arm, sent)
    for t, v in enumerate(all_views):
        me, text = protocol.speaker(t), text_of(v)
        assert QUESTION in text
        for fact in FACTS:
            assert (fact in text) == (fact in hands[me]), (t, fact)
        hidden = 0
        for j in range(t):
            shown = arm.shows(me, protocol.speaker(j), j)
            assert (sent[j] in text) == shown, (t, j)
            hidden += not shown
        assert text.count(NO_MESSAGE) == hidden
        for j in range(t, protocol.n_turns):
            assert sent[j] not in text  # nothing from the future
        roles = [m["role"] for m in v[1:]]
        assert v[0]["role"] == "system" and v[-1]["role"] == "user"
        assert all(r1 != r2 for r1, r2 in zip(roles, roles[1:])), "views alternate user/assistant"


@pytest.mark.parametrize("shape", list(PROTOCOLS))
def test_cut_view_is_the_chat_view_with_partners_words_replaced(shape):
    """Nothing but the partners' words differs between the chat and cut arms."""
    chat_cfg = PROTOCOLS[shape]
    sent = markers(protocol_of(chat_cfg))
    chat_views, protocol, _ = views(chat_cfg, ARMS["chat"], sent)
    cut_views, _, _ = views(chat_cfg, ARMS["cut"], sent)
    for t, (c, k) in enumerate(zip(chat_views, cut_views)):
        swapped = text_of(c)
        for j in range(t):
            if protocol.speaker(j) != protocol.speaker(t):
                swapped = swapped.replace(sent[j], NO_MESSAGE)
        assert swapped == text_of(k)


def test_full_arm_deals_every_fact_to_every_seat():
    all_views, protocol, hands = views(PROTOCOLS[3], ARMS["full"], markers(protocol_of(PROTOCOLS[3])))
    assert all(hands[s] == FACTS for s in protocol.seats)
    assert all(f in text_of(v) for v in all_views for f in FACTS)


def test_three_seats_deal_round_robin_and_name_partners():
    all_views, protocol, hands = views(PROTOCOLS[3], ARMS["chat"], markers(protocol_of(PROTOCOLS[3])))
    assert hands == {"A": [FACTS[0], FACTS[3]], "B": [FACTS[1], FACTS[4]], "C": [FACTS[2], FACTS[5]]}
    assert all_views[2][0]["content"].startswith("You are copy C of")
    assert "A and B" in all_views[2][0]["content"]
    assert "Message from A:" in text_of(all_views[2]) and "Message from B:" in text_of(all_views[2])


def test_final_instruction_only_on_final_turns():
    for chat_cfg in PROTOCOLS.values():
        all_views, protocol, _ = views(chat_cfg, ARMS["chat"], markers(protocol_of(chat_cfg)))
        for t, v in enumerate(all_views):
            assert ("\\boxed{}" in v[-1]["content"]) == protocol.is_final(t)
            assert f"at most {protocol.max_tokens(t)} tokens" in v[-1]["content"] or protocol.is_final(t)


def test_an_ablated_turn_is_hidden_from_every_partner_only():
    chat_cfg = PROTOCOLS[3]
    sent = markers(protocol_of(chat_cfg))
    arm = ARMS["chat"].hiding({1})
    all_views, protocol, _ = views(chat_cfg, arm, sent)
    assert sent[1] not in text_of(all_views[2]) and sent[1] not in text_of(all_views[3])
    assert sent[1] in text_of(all_views[4])  # B's own view keeps its own message
    assert sent[0] in text_of(all_views[2])


def test_bad_calls_fail_loudly():
    protocol = protocol_of(ChatConfig())
    seat = Seat(FACTS[:1], QUESTION)
    with pytest.raises(TypeError, match="Arm"):
        view(seat, 0, [], "chat", protocol, ChatConfig())
    with pytest.raises(ValueError, match="earlier messages"):
        view(seat, 2, ["only one"], ARMS["chat"], protocol, ChatConfig())
    with pytest.raises(ValueError, match="deal"):
        Arm("odd", deal="half")


def test_real_qwen_template_renders(qwen_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_dir)
    chat_cfg = ChatConfig()
    for arm in ("chat", "cut"):
        all_views, protocol, _ = views(chat_cfg, ARMS[arm], markers(protocol_of(chat_cfg)))
        for t, v in enumerate(all_views):
            text = render_view(tok, v)
            assert text.startswith("<|im_start|>system\nYou are copy " + protocol.speaker(t))
            assert text.endswith("<|im_start|>assistant\n")
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.decode(ids) == text
            assert 60 < len(ids) < 400
