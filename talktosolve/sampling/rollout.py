"""Play chats: a team's protocol run for a batch of problems at once, returned as plain records.

All chats of a batch advance turn by turn together: every chat's message 0 is generated in one batched call,
then every message 1, and so on (a message depends on the ones before it, so turns cannot overlap). Each seat
has its player, and seats may have different ones (a trained adapter in A, the untrained base in the other
seats: cross-play); a turn's chats are batched through its speaker's player. The result is a list of `Chat`
records: token ids for the learner, text for transcripts and metrics. Nothing here grades or rewards: the
caller does (`reward.score_chats`), so the sampler never sees a reward.

Chats of one batch may seat different players (a *lineup* per chat: in partner-mixture training some chats
seat a frozen partner where the others seat the learner). Each turn, the chats are grouped by their speaker's
player, and each group is one batched call through that player; players of one slot-mode engine (several
runs' adapters, or an adapter and the base) are one group, each row through its own slot. Each (seat, group)
keeps its own KV session, since a chat's lineup is the same at every turn.

A replay (`Prefix`) starts each chat from recorded messages instead of turn 0, optionally showing partners
something else in place of some of them (an ablation), and samples the turns after them with the same seeds the
recorded chat was sampled with, so an unchanged replay of the same batch repeats the recorded chat.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from talktosolve.arms import Arm
from talktosolve.config import ChatConfig, ConfigError
from talktosolve.protocol import Protocol
from talktosolve.sampling.engine import Session
from talktosolve.team.chat import Seat, render_view, view


@dataclass
class Turn:
    """One message: the prompt its writer saw and the tokens it wrote."""

    speaker: str
    prompt_ids: list[int]
    completion_ids: list[int]
    text: str
    view: list[dict]
    truncated: bool


@dataclass
class Chat:
    """One chat of a team on one problem."""

    problem_id: str
    index: int
    arm: Arm
    gold: str
    question: str
    facts: list[str]
    """Every fact of the problem, in text order."""
    seats: dict = field(default_factory=dict)
    """`{seat: Seat}`: each seat's hand (as its arm dealt it) and the question."""
    turns: list[Turn] = field(default_factory=list)
    answers: dict = field(default_factory=dict)
    """`{seat: the answer its final message boxed, or None}` (`reward.score_chats`)."""
    correct: dict = field(default_factory=dict)
    """`{seat: whether its final answer equals the gold}`."""
    reward: float = 0.0
    advantage: float = 0.0
    shown: dict = field(default_factory=dict)
    """`{turn: text}`: what every partner of the writer is shown in place of that turn's message (a replay's
    ablation; the writer still sees its own words). Empty in every chat the recipe trains or evaluates."""

    @property
    def messages(self) -> list[str]:
        return [t.text for t in self.turns]

    def seen_by(self, reader: str, protocol: Protocol) -> list[str]:
        """The messages so far as `reader` is given them, before its arm hides any."""
        return [self.shown.get(i, text) if protocol.speaker(i) != reader else text
                for i, text in enumerate(self.messages)]

    def transcript(self) -> dict:
        """The chat as a JSON-ready record (no token ids, which the learner alone needs)."""
        return {
            "problem_id": self.problem_id, "chat": self.index, "arm": self.arm.name,
            "hidden": sorted(self.arm.hidden), "gold": self.gold, "question": self.question, "facts": self.facts,
            "hands": {name: seat.facts for name, seat in self.seats.items()},
            "messages": [{"turn": i, "speaker": t.speaker, "text": t.text, "tokens": len(t.completion_ids),
                          "truncated": t.truncated, "view": t.view} for i, t in enumerate(self.turns)],
            "answers": self.answers, "correct": self.correct, "reward": self.reward, "advantage": self.advantage,
            **({"shown": {str(k): v for k, v in sorted(self.shown.items())}} if self.shown else {}),
        }


@dataclass(frozen=True)
class Prefix:
    """Where a replayed chat starts: its first messages as recorded, and what partners are shown instead of
    some of them."""

    messages: tuple[str, ...]
    shown: dict = field(default_factory=dict)
    """`{turn: text}` for turns of `messages` (see `Chat.shown`)."""


@dataclass
class Player:
    """A model that can write messages: its engine (ids -> ids) and the tokenizer it reads and writes with."""

    engine: object
    tokenizer: object
    name: str = "policy"
    adapter: int | None = None
    """On a slot-mode engine (`StaticEngine(..., slots=n)`), the slot whose adapter this player samples with
    (None: the engine's base weights alone). Players of one slot-mode engine are sampled together, one call
    for all their rows of a turn."""


@dataclass
class _Said:
    """A copy's last turn in one chat, kept so that its next view can continue from the exact sampled ids."""

    text: str
    """The view as rendered text."""
    ids: list[int]
    """The view's ids, as the engine read them."""
    message: str
    """The message as the next view shows it."""
    message_ids: list[int]
    """The message's sampled ids, without a final stop id (the chat template writes its own end of turn)."""


def _encode(tokenizer, views: list[list[dict]], earlier: list[_Said | None]) -> tuple[list[str], list[list[int]]]:
    """Every view's text and token ids (one batched tokenizer call).

    Token in, token out: where a view's text begins with the same copy's previous view and its own message as
    that view showed it, the ids are the previous view's ids, the message's sampled ids and the encoding of the
    rest. Re-encoding the message text can give other ids than the ones sampled (byte-level BPE does not always
    round-trip); continuing from the sampled ids keeps the copy's KV cache usable (`engine.Session` reads only
    the new part) and lets the learner read the earlier message inside this view's row (`grpo.to_sequences`).
    Otherwise (a template that rewrites earlier turns, a message whose ids do not decode to its shown text) the
    whole view is encoded, as any chat template allows."""
    texts = [render_view(tokenizer, v) for v in views]
    heads, tails = [], []
    for text, said in zip(texts, earlier):
        if said is not None and text.startswith(said.text + said.message):
            heads.append(said.ids + said.message_ids)
            tails.append(text[len(said.text) + len(said.message):])
        else:
            heads.append([])
            tails.append(text)
    encoded = tokenizer(tails, add_special_tokens=False)["input_ids"]
    return texts, [h + list(e) for h, e in zip(heads, encoded)]


Lineup = dict[str, Player]
"""Who plays each seat of one chat: `{seat: Player}`."""


def play_chats(problems: list, arm: Arm | list[Arm], players: Lineup | list[Lineup], protocol: Protocol,
               chat: ChatConfig, *, chats_per_problem: int, seed: int, progress=None,
               prefixes: list[Prefix] | None = None, until: int | None = None) -> list[Chat]:
    """Play `chats_per_problem` chats on each problem; chats are grouped by problem, in order.

    `problems` are records with `id`, `facts`, `question`, `gold`; `arm` is one arm for all, or one per problem
    (runs of several arms sharing decode steps); `players` gives each seat of the protocol its player (one
    player may sit in several seats): one lineup for every chat, or one per chat (in the order the chats come
    back). `seed` fixes the sampling (a torch.Generator per turn, drawn from by each turn's groups in the order
    of their first chat), so the same call gives the same chats. The chats come back ungraded
    (`reward.score_chats` grades them).

    A replay gives `prefixes`, one per chat (all of one length k): turns 0..k-1 are those messages, not sampled
    (each view is still built, as the recorded one was), and sampling starts at turn k with that turn's seed, as
    in the recorded call. `until` stops after that turn (a replay needs only the turns up to its listeners'
    answers).
    """
    arms = [arm] * len(problems) if isinstance(arm, Arm) else list(arm)
    if len(arms) != len(problems):
        raise ValueError(f"{len(arms)} arms for {len(problems)} problems")
    n_chats = len(problems) * chats_per_problem
    lineups = [players] * n_chats if isinstance(players, dict) else list(players)
    if len(lineups) != n_chats:
        raise ValueError(f"{len(lineups)} lineups for {n_chats} chats")
    for lineup in lineups:
        missing = [s for s in protocol.seats if s not in lineup]
        if missing:
            raise ValueError(f"no player for seats {missing}")
    chats = []
    for p, a in zip(problems, arms):
        hands = a.hands(p.facts, protocol.seats)
        for k in range(chats_per_problem):
            seats = {name: Seat(list(hands[name]), p.question) for name in protocol.seats}
            chats.append(Chat(p.id, k, a, p.gold, p.question, list(p.facts), seats))
    recorded = _check_prefixes(prefixes, len(chats), protocol)
    for c, prefix in zip(chats, prefixes or ()):
        c.shown = dict(prefix.shown)
    # Each seat's KV cache is carried to its next turn: its next view begins with its last view and message.
    sessions: dict[tuple[str, int], Session] = {}
    earlier: dict[str, list] = {name: [None] * len(chats) for name in protocol.seats}
    for turn, speaker in enumerate(protocol.order[:protocol.n_turns if until is None else until + 1]):
        if turn < recorded:
            for c, prefix in zip(chats, prefixes):
                v = view(c.seats[speaker], turn, c.seen_by(speaker, protocol), c.arm, protocol, chat)
                c.turns.append(Turn(speaker, [], [], prefix.messages[turn], v, False))
            continue
        generator = None
        for key, players, rows in _groups(lineups, speaker):
            if generator is None:
                device = getattr(players[0].engine, "device", torch.device("cpu"))
                generator = torch.Generator(device=device).manual_seed(_turn_seed(seed, turn))
            session = sessions.setdefault((speaker, key), Session())
            _play_turn(players, [chats[i] for i in rows], rows, turn, speaker, protocol, chat, session,
                       earlier[speaker], generator)
        if progress is not None:
            progress(turn)
    return chats


def _check_prefixes(prefixes: list[Prefix] | None, n_chats: int, protocol: Protocol) -> int:
    """How many turns every chat starts with (0 without prefixes)."""
    if prefixes is None:
        return 0
    if len(prefixes) != n_chats:
        raise ValueError(f"{len(prefixes)} prefixes for {n_chats} chats")
    lengths = {len(p.messages) for p in prefixes}
    if len(lengths) != 1 or not 0 <= min(lengths) < protocol.n_turns:
        raise ValueError(f"prefixes must all hold the same number of messages, below the protocol's "
                         f"{protocol.n_turns} turns; got lengths {sorted(lengths)}")
    k = lengths.pop()
    if any(not 0 <= t < k for p in prefixes for t in p.shown):
        raise ValueError(f"a prefix shows something in place of a turn it does not hold (it holds turns 0 to {k - 1})")
    return k


def _groups(lineups: list[Lineup], speaker: str) -> list[tuple[int, list[Player], list[int]]]:
    """The batched calls of a turn, in the order of their first chat: (key, each chat's player, the chats'
    indices). A call is one player's chats, or every chat whose player is on one slot-mode engine."""
    out: dict[int, tuple[int, list[Player], list[int]]] = {}
    for i, lineup in enumerate(lineups):
        player = lineup[speaker]
        key = id(player.engine) if getattr(player.engine, "slots", 0) else id(player)
        group = out.setdefault(key, (key, [], []))
        group[1].append(player)
        group[2].append(i)
    return list(out.values())


def _play_turn(players: list[Player], chats: list[Chat], rows: list[int], turn: int, speaker: str,
               protocol: Protocol, chat: ChatConfig, session: Session, earlier: list, generator) -> None:
    """One turn of `chats` (the rows `rows` of the batch), chat k spoken by `players[k]`, who share one engine
    (one player, or players of one slot-mode engine): sampled in one call."""
    player = players[0]
    views = [view(c.seats[speaker], turn, c.seen_by(speaker, protocol), c.arm, protocol, chat) for c in chats]
    rendered, prompts = _encode(player.tokenizer, views, [earlier[i] for i in rows])
    limit = protocol.max_tokens(turn)
    last = turn == protocol.last_turn(speaker)
    session.keep = not last  # after its last turn a seat reads nothing more
    _check_length(player, prompts, limit, turn)
    slots = {"adapters": [p.adapter for p in players]} if getattr(player.engine, "slots", 0) else {}
    completions = player.engine.generate(prompts, limit, generator, session=session, **slots)
    stops = set(player.engine.stop_ids)
    texts = player.tokenizer.batch_decode(completions, skip_special_tokens=True)
    bodies = [ids[:-1] if ids and ids[-1] in stops else ids for ids in completions]
    raw = player.tokenizer.batch_decode(bodies) if not last else [None] * len(chats)
    # A message is shown as written, surrounding whitespace included: a seat's next view must hold its
    # message exactly as its sampled ids decode for that view to continue from those ids (`_encode`).
    for j, (c, v, prompt, ids, text) in enumerate(zip(chats, views, prompts, completions, texts)):
        truncated = not ids or ids[-1] not in stops
        c.turns.append(Turn(speaker, prompt, ids, text, v, truncated))
        # Its next view may continue from these ids only if they are exactly the text that view shows.
        earlier[rows[j]] = _Said(rendered[j], prompt, text, bodies[j]) if raw[j] == text else None


def _check_length(player: Player, prompts: list[list[int]], limit: int, turn: int) -> None:
    model = getattr(player.engine, "model", None)
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    longest = max(len(p) for p in prompts)
    if isinstance(context, int) and longest + limit > context:
        raise ConfigError(
            f"Turn {turn}: a view of {longest} tokens plus a {limit}-token message exceeds the model's context of "
            f"{context} tokens. Lower chat.max_message_tokens / chat.max_final_tokens or shorten chat.prompts."
        )


def _turn_seed(seed: int, turn: int) -> int:
    return (seed * 1_000_003 + turn * 7919) % (2**63 - 1)


