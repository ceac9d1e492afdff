"""The chat protocol: views per turn, the cut arm, rendering with a real chat template."""

import pytest

from talktosolve.chat import FINAL_TURN, NO_MESSAGE, SPEAKERS, Seat, max_tokens, render_view, view
from talktosolve.config import ChatConfig

A = Seat(["Ann has 12 apples.", "She eats 3."], "How many apples are left in all?")
B = Seat(["Bob gives her 5 more."], "How many apples are left in all?")
MSGS = ["A-says-12-and-3", "B-says-5", "A-final \\boxed{14}", "B-final \\boxed{14}"]


def seat(turn):
    return A if SPEAKERS[turn] == "A" else B


def text_of(messages):
    return "\n".join(m["content"] for m in messages)


def test_order_and_limits():
    c = ChatConfig()
    assert SPEAKERS == ("A", "B", "A", "B") and FINAL_TURN == {"A": 2, "B": 3}
    assert [max_tokens(t, c) for t in range(4)] == [160, 160, 384, 384]


@pytest.mark.parametrize("turn", range(4))
def test_view_holds_own_facts_only_and_question(turn):
    v = view(seat(turn), turn, MSGS[:turn], "chat", ChatConfig())
    text = text_of(v)
    own, other = (A, B) if SPEAKERS[turn] == "A" else (B, A)
    assert all(f in text for f in own.facts)
    assert not any(f in text for f in other.facts)
    assert own.question in text
    assert v[0]["role"] == "system"
    roles = [m["role"] for m in v[1:]]
    assert all(r1 != r2 for r1, r2 in zip(roles, roles[1:])), "views alternate user/assistant"
    assert v[-1]["role"] == "user"


@pytest.mark.parametrize("turn", range(4))
def test_chat_arm_delivers_and_cut_arm_hides(turn):
    chat = text_of(view(seat(turn), turn, MSGS[:turn], "chat", ChatConfig()))
    cut = text_of(view(seat(turn), turn, MSGS[:turn], "cut", ChatConfig()))
    for j in range(turn):
        if SPEAKERS[j] == SPEAKERS[turn]:
            assert MSGS[j] in chat and MSGS[j] in cut  # own words stay visible in both arms
        else:
            assert MSGS[j] in chat and MSGS[j] not in cut
    partner_msgs = sum(SPEAKERS[j] != SPEAKERS[turn] for j in range(turn))
    assert cut.count(NO_MESSAGE) == partner_msgs
    # Nothing else differs: replacing the partner's words by (no message) turns the chat view into the cut view.
    swapped = chat
    for j in range(turn):
        if SPEAKERS[j] != SPEAKERS[turn]:
            swapped = swapped.replace(MSGS[j], NO_MESSAGE)
    assert swapped == cut


def test_final_instruction_only_on_final_turns():
    c = ChatConfig()
    for turn in range(4):
        last = view(seat(turn), turn, MSGS[:turn], "chat", c)[-1]["content"]
        assert ("\\boxed{}" in last) == (turn >= 2)


def test_bad_calls_fail_loudly():
    with pytest.raises(ValueError, match="arm"):
        view(A, 0, [], "mute", ChatConfig())
    with pytest.raises(ValueError, match="earlier messages"):
        view(A, 2, ["only one"], "chat", ChatConfig())


def test_real_qwen_template_renders(qwen_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(qwen_dir)
    for arm in ("chat", "cut"):
        for turn in range(4):
            text = render_view(tok, view(seat(turn), turn, MSGS[:turn], arm, ChatConfig()))
            assert text.startswith("<|im_start|>system\nYou are copy " + SPEAKERS[turn])
            assert text.endswith("<|im_start|>assistant\n")
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert tok.decode(ids) == text
            assert 60 < len(ids) < 400
