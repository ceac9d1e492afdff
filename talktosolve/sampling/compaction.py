"""Rows that do not wait: a call's batch shrinks to the rows still writing.

A static batch decodes until its slowest row ends, and on real weights most rows end far sooner: in a turn of
many rows a few write to the token limit while the rest stopped long before (docs/performance.md measures it, "On
real weights: the rows that wait"), yet every decode step pays for every row. So once the rows still writing fit a
batch at least a quarter smaller (`bucket`: the next size of the form 2^k or 3 x 2^k, at least `least`), `move`
carries them into that smaller batch's state (its own CUDA graph): their K/V, their next token, positions, slots
and the tokens they wrote so far. The rows that ended keep what they wrote (`Written`), and `Written.assemble`
puts every row back in the call's order at the end. A call may shrink several times (384 -> 256 -> 192 -> 96 ->
64 -> 16).

What it keeps:

- **The same random numbers.** The sampling kernel keys a row's random numbers by its place in the call (the
  state's `row`), not in the batch, so where the kernel samples, a row draws in the smaller batch what it would
  have drawn in the full one (its logits may round differently at another batch size, as between any two batch
  sizes). Elsewhere (torch's generator: a CPU, recorded log-probs) a smaller batch draws other numbers from the
  same distribution, so the engine compacts there only when asked (`StaticEngine(compact_rows=True)`); greedy
  decoding is the same either way.
- **Kept caches.** Where a `Session` keeps a call's rows for the copy's next turn, a row that ended leaves its
  prompt's and message's K/V with `Written` when the others move on, and `hold` gives the session every row's
  at the end, in the call's order, as the whole batch would have.

Moving a row costs a copy of its K/V (all layers, the columns written so far), within the one pool every state's
K/V are views of: layer by layer where that is safe (`move`), else gathered out of the pool whole first.
"""

from __future__ import annotations

import torch

from talktosolve.sampling.fast_layers import columns
from talktosolve.sampling.fast_layers import hold as layers_hold


def _power_of_two(n: int) -> int:
    """The least power of two at or above `n` (1 for 0)."""
    return 1 << max(n - 1, 0).bit_length()


def length(L: int, size: int, rows: int) -> int:
    """The KV length of a state of `size` rows that a call of `rows` rows and length `L` moves into: `L` rounded up
    to a power of two, so that calls of nearby lengths share those states and their captured graphs rather than
    capture their own each step, where that fits the pool the call's own state sized (at most half the call's
    rows: the rounded length is less than twice `L`); else `L` itself."""
    rounded = _power_of_two(L)
    return rounded if size * rounded <= rows * L else L


def size_for(n: int) -> int:
    """The least batch size of the form 2^k or 3 x 2^k that holds `n` rows (1 for 0): sizes a quarter or a third
    apart, so that a call's rows move soon, through few sizes (each a graph of its own)."""
    p = _power_of_two(n)
    return 3 * p // 4 if p >= 4 and 3 * p // 4 >= n else p


def bucket(live: int, rows: int, least: int) -> int | None:
    """The batch size `live` rows move into (`size_for`, at least `least`), or None when it would not take a
    quarter off a batch of `rows`."""
    size = max(least, size_for(live))
    return size if 4 * size <= 3 * rows else None


class Written:
    """The rows of one call that have ended, and where each row of the current state came from (its place in the
    call)."""

    def __init__(self, rows: int, record_logprobs: bool, adapters: list | None = None, keeps: bool = False):
        self.order = list(range(rows))
        """order[i]: the call's row that row i of the current state holds."""
        self.rows: list[list[int] | None] = [None] * rows
        self.logprobs: list[torch.Tensor | None] = [None] * rows
        self.record = record_logprobs
        self.adapters = adapters
        """Each row's slot (slot mode), in the call's order."""
        self.kept: list[tuple] | None = [] if keeps else None
        """For a session: (the call's rows, their K, their V [layers, rows, kv, columns, D]) of rows that ended
        before a move, each row's from its prompt's first column."""
        self.moved = False

    def keep(self, s, made: int) -> list[int]:
        """The state's rows still writing (their places in the state); the others' tokens (and log-probs) so far
        are kept here."""
        done = s["done"][:len(self.order)].tolist()
        ended = [i for i, d in enumerate(done) if d]
        if ended and self.kept is not None:  # their K/V so far: the columns fed before this step's
            index = torch.tensor(ended, device=s["k"].device)
            first, fed = s["first"][index], int(s["col"])
            width = fed - int(first.min())
            self.kept.append(([self.order[i] for i in ended], *(columns(s[key][:, index, :, :fed], first, width)
                                                               for key in ("k", "v"))))
        if ended:
            out = s["out"][ended, :made].tolist()
            logp = s["logp"][ended, :made].cpu() if self.record else None
            for j, i in enumerate(ended):
                self.rows[self.order[i]] = out[j]
                if logp is not None:
                    self.logprobs[self.order[i]] = logp[j]
        return [i for i, d in enumerate(done) if not d]

    def assemble(self, s, made: int) -> tuple[list[list[int]], torch.Tensor | None]:
        """Every row of the call in its order: the ended ones as kept, the rest from the state `s` -> (rows, their
        log-probs [rows, made] or None)."""
        out = s["out"][:len(self.order), :made].tolist()
        logp = s["logp"][:len(self.order), :made].cpu() if self.record else None
        for i, row in enumerate(self.order):
            self.rows[row] = out[i]
            if logp is not None:
                self.logprobs[row] = logp[i]
        if not self.record:
            return self.rows, None
        table = torch.zeros(len(self.rows), made)
        for i, lp in enumerate(self.logprobs):  # a row that ended early has nothing to record past its end
            table[i, :len(lp)] = lp
        return self.rows, table.to(s["logp"].device)


def start(engine, s, session, adapters) -> Written | None:
    """A call's bookkeeping, None where its rows stay in place (the engine does not compact, or decodes to the
    limit). Each row's random numbers are keyed by its place in the call."""
    rows = s["tok"].shape[0]
    s["row"].copy_(torch.arange(rows, device=s["row"].device))
    if not engine.compact_rows or engine.force_max_length:
        return None
    return Written(rows, engine.record_logprobs, adapters, keeps=session is not None and session.keep)


def hold(session, s, written: Written | None, prompts, rows, T: int) -> None:
    """Keep each row's prompt and message (less its last token, never fed back) with their K/V in `session`, as
    `fast_layers.hold` does for a call whose rows never moved; the rows that ended before a move from `written`."""
    if written is None or not written.moved:
        return layers_hold(session, s, prompts, rows, T)
    held = [p + r[:-1] for p, r in zip(prompts, rows)]
    n = max(len(h) for h in held)
    live = len(written.order)
    blocks = written.kept + [(written.order, *(columns(s[key][:, :live], s["first"][:live], n) for key in ("k", "v")))]
    shape = (s["k"].shape[0], len(prompts), s["k"].shape[2], n, s["k"].shape[4])
    k, v = (s["k"].new_zeros(shape) for _ in range(2))
    for where, bk, bv in blocks:  # columns past a row's own length are never read (`reusable` stops at its ids)
        w = min(n, bk.shape[3])  # a block kept at a move may be wider than every row's held length
        index = torch.tensor(where, device=k.device)
        k[:, index, :, :w] = bk[:, :, :, :w]
        v[:, index, :, :w] = bv[:, :, :, :w]
    session.ids, session.k, session.v = held, k, v


def shrink(engine, s, written: Written | None, made: int, limit: int, L: int, T: int):
    """After a burst of decode steps: the rows of `s` still writing, moved into a smaller state of length `L` when
    they fit one and tokens remain to be made (`T`: where the prompts end) -> (the state to decode on, how many rows
    still write). One device sync; none for an engine that decodes every row to the limit."""
    if engine.force_max_length:
        return s, s["tok"].shape[0]
    live = int((~s["done"]).sum())
    size = bucket(live, s["tok"].shape[0], engine.compact_least) if written is not None and live else None
    if size and made < limit:
        s = move(engine, s, written, made, size, L, T + made)
    return s, live


def result(s, written: Written | None, made: int, record: bool) -> tuple[list[list[int]], torch.Tensor | None]:
    """The call's rows (and their log-probs [rows, made] when recorded) once decoding is over."""
    if written is not None and written.moved:
        return written.assemble(s, made)
    return s["out"][:, :made].tolist(), s["logp"][:, :made].clone() if record else None


def move(engine, s, written: Written, made: int, size: int, L: int, filled: int):
    """Carry the rows of state `s` that are still writing into the state of `size` rows and length `length(...)`
    (captured on first use) and return it; `made`: the tokens every row has so far; `filled`: the cache columns
    written so far (the rest is carried no further). Padding rows after them are done from the start and attend only
    to the column they write."""
    keep = written.keep(s, made)
    index = torch.tensor(keep, device=s["tok"].device)
    n = len(keep)
    shape = (size, length(L, size, len(written.rows)))
    # The new state's K/V are views of the same pool from its start. Where its graph is found and a layer of it is
    # no larger than a layer of `s`, layer l is carried on its own: its new place ends before layer l + 1 of `s`
    # begins, so no layer is overwritten before it is read, and the copy in flight is one layer's. Else the rows'
    # K/V are gathered out of the pool whole first (capturing a graph runs warm-up steps that write into its K/V).
    in_place = not engine.captures(*shape) and shape[0] * shape[1] <= s["k"].shape[1] * s["k"].shape[3]
    carried = None if in_place else {key: s[key][:, index, :, :filled] for key in ("k", "v")}
    small = {key: s[key][index] for key in ("first", "tok", "pos")}
    wrote = {key: s[key][index, :made] for key in ("out", "logp")}
    rows = torch.tensor([written.order[i] for i in keep], device=index.device)
    col, step, seed = s["col"].clone(), s["step"].clone(), s["seed"].clone()
    t = engine._graph(*shape)
    for key in ("k", "v"):
        if in_place:
            for layer in range(t[key].shape[0]):  # in order: see above
                t[key][layer, :n, :, :filled] = s[key][layer, index, :, :filled]
        else:
            t[key][:, :n, :, :filled].copy_(carried[key])
    for key in ("first", "tok", "pos"):
        t[key][:n].copy_(small[key])
    t["first"][n:].copy_(col)  # a padding row's own column: never an empty (NaN) attention
    t["tok"][n:].fill_(engine.pad_id)
    t["pos"][n:].copy_(col)
    for key in ("out", "logp"):
        t[key][:n, :made].copy_(wrote[key])
    t["done"].zero_()
    t["done"][n:] = True
    t["row"].zero_()
    t["row"][:n].copy_(rows)
    t["col"].copy_(col)
    t["step"].copy_(step)
    t["seed"].copy_(seed)
    if engine.slots:
        engine.weights.set_rows(t["masks"], [written.adapters[written.order[i]] for i in keep] + [None] * (size - n))
    written.order = [written.order[i] for i in keep]
    written.moved = True
    return t
