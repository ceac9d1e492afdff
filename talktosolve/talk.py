"""Talk metrics of one chat, and their means over many chats.

A chat is four messages in the order A, B, A, B; messages 3 and 4 (indices 2 and 3) are A's and B's final answers.

* A copy's **own-only numbers**: the set of numeral values (`talktosolve.numbers`: `1,000` = `1000`,
  `$3.50` = `3.5`) in its own facts that are neither in its partner's facts nor in the question.
* **send_a**: share of A's own-only numbers that appear in a message B reads before B's final answer (A's
  messages, indices 0 and 2). **send_b**: share of B's own-only numbers in B's first message (index 1).
* **use_a**: share of B's own-only numbers that appear in A's final message (index 2). **use_b**: share of A's
  own-only numbers in B's final message (index 3).
* **use_given_sent_a**: among B's own-only numbers that B sent (index 1), the share in A's final message;
  **use_given_sent_b**: among A's own-only numbers that A sent (indices 0, 2), the share in B's final message.
* **ask_a** / **ask_b**: the copy's first message (index 0 / 1) contains `?`.
* **agree**: both final messages box a number (`grading.last_boxed`, read by `grading.numeric_value`) and the two
  numbers are equal. An empty or non-numeric box never agrees: two copies that both fail to give a number have
  not agreed on an answer.
* **chars_a** / **chars_b**: total characters of the copy's two messages.

A share with nothing to count (no own-only numbers, or none sent) is None, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from talktosolve.grading import last_boxed, numeric_value
from talktosolve.numbers import numbers_in

TALK_KEYS = (
    "send_a", "send_b", "use_a", "use_b", "ask_a", "ask_b", "agree",
    "use_given_sent_a", "use_given_sent_b", "chars_a", "chars_b",
)

# Pooled means: the combined figure for both copies, from the per-copy keys it pools.
POOLED = {
    "send": ("send_a", "send_b"),
    "use": ("use_a", "use_b"),
    "use_given_sent": ("use_given_sent_a", "use_given_sent_b"),
    "ask": ("ask_a", "ask_b"),
}


def _values(texts: Sequence[str] | str) -> set[str]:
    """Numeral values in some texts; each text is read on its own so no numeral spans two of them."""
    if isinstance(texts, str):
        texts = [texts]
    out: set[str] = set()
    for text in texts:
        out.update(numbers_in(text))
    return out


def _share(part: set[str], whole: set[str]) -> float | None:
    return len(part & whole) / len(whole) if whole else None


def _agree(final_a: str, final_b: str) -> bool:
    box_a, box_b = last_boxed(final_a), last_boxed(final_b)
    if box_a is None or box_b is None:
        return False
    num_a, num_b = numeric_value(box_a), numeric_value(box_b)
    return num_a is not None and num_a == num_b  # canonical strings: equal values have equal text


def talk_metrics(facts_a: Sequence[str], facts_b: Sequence[str], question: str, messages: Sequence[str]) -> dict:
    """Talk metrics of one chat; see the module doc for each key. Raises ValueError unless there are 4 messages."""
    messages = list(messages)
    if len(messages) != 4:
        raise ValueError(f"talk_metrics needs the 4 messages of a chat (A, B, A, B), got {len(messages)}")
    for k, text in enumerate(messages):
        if not isinstance(text, str):
            raise TypeError(f"talk_metrics: message {k} is {type(text).__name__}, not str")
    in_a, in_b, in_q = _values(facts_a), _values(facts_b), _values(question)
    own_a = in_a - in_b - in_q
    own_b = in_b - in_a - in_q
    said = [_values(text) for text in messages]
    sent_a = own_a & (said[0] | said[2])  # B reads A's messages 1 and 3 before its final answer
    sent_b = own_b & said[1]  # A reads only B's message 2 before its final answer
    return {
        "send_a": _share(sent_a, own_a),
        "send_b": _share(sent_b, own_b),
        "use_a": _share(said[2], own_b),
        "use_b": _share(said[3], own_a),
        "ask_a": "?" in messages[0],
        "ask_b": "?" in messages[1],
        "agree": _agree(messages[2], messages[3]),
        "use_given_sent_a": _share(said[2], sent_b),
        "use_given_sent_b": _share(said[3], sent_a),
        "chars_a": len(messages[0]) + len(messages[2]),
        "chars_b": len(messages[1]) + len(messages[3]),
    }


def chat_talk(transcript: dict) -> dict:
    """`talk_metrics` of one chat transcript (the records `rollout.Chat.transcript` writes)."""
    return talk_metrics(transcript["facts_a"], transcript["facts_b"], transcript["question"],
                        [m["text"] for m in transcript["messages"]])


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _defined(rows: Sequence[dict], key: str) -> list[float]:
    """The key's numeric values over rows; None, missing and non-numeric values are skipped (bools count 1/0)."""
    out = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (bool, int, float)):
            out.append(float(value))
    return out


def aggregate_talk(rows: Sequence[dict]) -> dict:
    """Means over chats of every key (None values skipped; None when a key has no value), plus pooled figures.

    Pooled: `send`, `use`, `use_given_sent`, `ask` are means over both copies' values together (e.g. every
    defined send_a and send_b); `n_send` and `n_use` count the values behind `send` and `use`.
    """
    keys: list[str] = list(TALK_KEYS)
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    out: dict = {key: _mean(_defined(rows, key)) for key in keys}
    for name, parts in POOLED.items():
        out[name] = _mean([v for part in parts for v in _defined(rows, part)])
    out["n_send"] = sum(len(_defined(rows, part)) for part in POOLED["send"])
    out["n_use"] = sum(len(_defined(rows, part)) for part in POOLED["use"])
    return out
