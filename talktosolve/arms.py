"""Arms: what each seat is dealt, and what it is shown of its partners' messages.

An arm is a record of two rules, and nothing else differs between arms:

* `deal`: `split` deals a problem's facts round-robin (seat k of N gets facts k, k+N, k+2N, ...; the question
  goes to every seat), `all` gives every seat every fact.
* `shows(reader, writer, turn)`: whether the reader sees the text of the writer's message at that turn. Where it
  does not, the reader's view shows the literal `(no message)` in its place (`NO_MESSAGE`), so the view's
  shape is the same in every arm. A seat always sees its own messages.

The three arms of the recipe:

| arm    | deal    | channel                     | what it measures                                        |
|--------|---------|-----------------------------|---------------------------------------------------------|
| `chat` | `split` | every message delivered     | the team that must talk to pool its facts                |
| `cut`  | `split` | no message ever delivered   | the same team with the channel cut: the no-talk control  |
| `full` | `all`   | every message delivered     | every seat holds every fact: the upper bound talk can reach |

`Arm.hiding(turns)` is the same arm with some turns' messages hidden from every reader (a message ablation);
`ABLATIONS` names what an influence replay can show a listener in place of a message (`influence`).
Arms are identified by this record; `ARMS` maps the config's names to them.

Pure Python, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

DEALS = ("split", "all")

NO_MESSAGE = "(no message)"
"""What a seat sees wherever its arm hides a partner's words."""

ABLATIONS = ("remove", "replace", "renumber")
"""The message ablations of an influence replay, in the order figures are reported: the listeners are shown
`NO_MESSAGE`, another problem's message, or the message with its own-only numbers changed (`influence`)."""


@dataclass(frozen=True)
class Arm:
    name: str
    deal: str = "split"
    """`split` (round-robin hands) or `all` (every seat holds every fact)."""
    channel: bool = True
    """Partners' messages are delivered (True) or replaced by `(no message)` (False)."""
    hidden: frozenset[int] = field(default_factory=frozenset)
    """Turns whose message no partner is shown, even with the channel open."""

    def __post_init__(self):
        if self.deal not in DEALS:
            raise ValueError(f"arm {self.name}: deal must be one of {DEALS}, got {self.deal!r}")

    def hands(self, facts, seats) -> dict[str, list[str]]:
        """Each seat's facts: `seats` in dealing order, `facts` in text order."""
        facts = list(facts)
        if self.deal == "all":
            return {seat: list(facts) for seat in seats}
        return deal_round_robin(facts, seats)

    def shows(self, reader: str, writer: str, turn: int) -> bool:
        if reader == writer:
            return True
        return self.channel and turn not in self.hidden

    def hiding(self, turns) -> Arm:
        """This arm with the messages of `turns` hidden from every partner as well."""
        return replace(self, hidden=self.hidden | frozenset(turns))

    def to_json(self) -> dict:
        return {"name": self.name, "deal": self.deal, "channel": self.channel, "hidden": sorted(self.hidden)}


def deal_round_robin(facts, seats) -> dict[str, list[str]]:
    """Seat k of N gets facts k, k+N, k+2N, ... (0-based), in text order."""
    n = len(seats)
    return {seat: list(facts[k::n]) for k, seat in enumerate(seats)}


ARMS = {
    "chat": Arm("chat"),
    "cut": Arm("cut", channel=False),
    "full": Arm("full", deal="all"),
}
"""The arms a config can name."""


def comparison_arms(name: str) -> tuple[str, ...]:
    """`chat-cut` -> (`chat`, `cut`): a comparison (arm a minus arm b) from its name in presets, `--set` and
    results.json's keys. A name without exactly one `-` gives a tuple of another length, which the config refuses."""
    return tuple(name.split("-"))


def comparison_name(pair: tuple[str, ...]) -> str:
    """(`chat`, `cut`) -> `chat-cut`: the one spelling of a comparison's name (`comparison_arms` reads it back)."""
    return "-".join(pair)
