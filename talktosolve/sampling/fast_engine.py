"""A fast sampler for CUDA: static KV cache, the whole decode step in one CUDA graph, exact LoRA weights.

Same contract as `talktosolve.sampling.engine.Engine` (ids in, ids out, plain temperature sampling), built for the
paper preset's shape, where stock `generate` is launch-bound (docs/performance.md#decode compares them). What it does:

- **Its own forward over the model's weights.** A Qwen2/Llama-style decoder (RMSNorm, rotary attention with grouped KV
  heads, SwiGLU MLP) written with `torch.nn.functional` (`fast_layers`), reading the weights of the transformers
  modules in place. transformers' forward builds masks and caches with host-side logic that a CUDA graph cannot hold;
  this one is pure tensor work, so one decode step (embed, 28 layers, head, sampling, stop bookkeeping) is captured
  once and replayed with a single launch.
- **Exact adapter weights** (`weights.SamplingWeights`): per LoRA layer one buffer rewritten as `W0 + scale * B @ A`
  from the untouched base weight before a call whose weights changed, never merged into it.
- **Sampling inside the graph.** Gumbel-max over fp32 logits / temperature is an exact sample from softmax(logits / T)
  (no top-k, no top-p): on CUDA in one split Triton kernel keyed by the call's seed and the step (`decode_sampling`),
  elsewhere drawn from torch's generator.
- **Static shapes.** KV buffers are [layers, B, kv_heads, L, head_dim] with L rounded up to a multiple of 256; one
  graph per (B, L) is captured on first use and kept (a few per run: the four turns' lengths). All graphs' KV buffers
  are views of one pool sized for the largest shape seen, and their scratch memory is one graph pool.

Prefill (the prompt) runs without a graph through the same layer math. On CUDA the decode layer and prefill's blocks
around attention are compiled (`torch.compile` fuses the small element-wise kernels), decode attends through
`decode_attention` (each row's own cache columns only) and prefill packs the rows' new tokens for FlashAttention
(`prefill_attention.Packed`); elsewhere both are the portable paths (SDPA under a mask on a CPU).

- **Shared runs read once.** Rows of one policy whose prompts begin with the same run of tokens (a problem's chats at
  the first turn, and their system prompt and problem at the second) are grouped (`prefixes.plan`); each group's run
  goes through the layers once, its K/V are copied into every member's columns, and the prefill then reads only what
  follows, as if a session held the run. The plan is used only when it reads fewer tokens.
- **KV reuse across a copy's turns.** A copy's next view begins with its last view and its own message, so with a
  `Session` (one per copy, kept by the rollout) the prefill reads only the new tokens: the held K/V are placed in
  front of them in the pool, and the block attends over both.
- **Rows that do not wait.** Once the rows still writing fit a batch a quarter smaller, they move into it
  (`compaction`), keeping their random numbers; the rows that ended leave their K/V with the copy's session.
- **Slot mode: several policies, one decode step.** With `slots=n` the engine samples with the frozen base weights and
  holds n LoRA adapters (`store_adapter(j)`); a call names each row's slot (`adapters=`, None for the base alone), so
  any mix of rows (several runs' chats; a learner's and its frozen base partner's) is one batch (`weights` says how).

Only models whose config says `qwen2`, `llama` or `mistral`-style attention are accepted; anything else falls back to
`Engine` (see `factory.make_engine`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from talktosolve.model.policy import base_model
from talktosolve.sampling import compaction, decode_attention, decode_sampling, prefill_attention, prefixes
from talktosolve.sampling import fast_layers as layers
from talktosolve.sampling.engine import Session, cut_at_stop, left_pad
from talktosolve.sampling.weights import SamplingWeights

SUPPORTED = ("qwen2", "llama", "mistral")
BUCKET = 256
"""KV lengths are rounded up to this on CUDA (few graph shapes); on a CPU, where there are no graphs and the
decode step attends only over the filled columns, to `CPU_BUCKET`."""
CPU_BUCKET = 32
MAX_GRAPHS = 64  # graphs kept: a step's turn lengths at full size, and the smaller batches each one's rows move into


class StaticEngine:
    """Batched sampling with a static KV cache and CUDA-graph decode (see the module docstring). `slots` > 0:
    slot mode, `slots` LoRA adapters over the frozen base (`store_adapter(j)`; `generate(..., adapters=...)`).
    `compact_rows`: move the rows still writing into smaller batches (`compaction`); None: where a moved row keeps
    its random numbers (the sampling kernel)."""

    share_prefixes = True
    """Read a run of tokens that several rows' prompts begin with once (`prefixes`). False (on the class or an
    engine): every row reads its whole prompt, what `bench/gpu_shared.py` compares against."""
    attend = staticmethod(decode_attention.attend)
    """The decode attention kernel (`decode_attention.attend`); another of its signature (on the class or an
    engine) is what the benchmarks compare against."""
    packed_prefill: bool | None = None
    """Prefill over packed rows through FlashAttention (`prefill_attention.Packed`); None: where it runs. False (on
    the class, or the constructor's argument): the left-padded block under its mask, what `bench/gpu_shared.py`
    compares against."""
    compact_least = 16  # the smallest batch a call's rows move into (`compaction.bucket`)

    def __init__(self, model, *, stop_ids, pad_id, temperature=1.0, force_max_length=False, greedy=False,
                 record_logprobs=False, compile: bool | None = None, attention_kernel: bool | None = None,
                 packed_prefill: bool | None = None, slots: int = 0, compact_rows: bool | None = None):
        self.model = model
        self.stop_ids = sorted(set(stop_ids))
        self.pad_id = pad_id
        self.temperature = temperature
        self.force_max_length = force_max_length
        self.greedy = greedy
        self.record_logprobs = record_logprobs
        self.last_logprobs = None
        cfg = base_model(model).config
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.dims = dict(n_heads=self.n_heads, n_kv=self.n_kv, head_dim=self.head_dim, eps=self.eps)
        self.rotary = base_model(model).get_decoder().rotary_emb
        self.slots = slots
        self.weights = SamplingWeights(model, slots)
        self.embed, self.norm, self.layers = self.weights.embed, self.weights.norm, self.weights.layers
        self.shared_tokens = 0
        """Prompt tokens not read because another row of their group read them (over this engine's calls)."""
        self.stop = torch.tensor(self.stop_ids, device=self.device)
        self.graphs: dict[tuple[int, int], dict] = {}  # (rows, KV length)
        self.pool: torch.Tensor | None = None
        # One compiled layer serves all layers. Shapes are left to automatic dynamism: a second KV length
        # recompiles once with the length symbolic, not once per length (dynamo's recompile limit would end in eager).
        self.compiled = self.device.type == "cuda" if compile is None else compile
        self._decode = torch.compile(layers.decode_layer) if self.compiled else layers.decode_layer
        # The decode step's attention: the Triton kernel where it runs (`decode_attention`), else the layer's
        # portable matmul/SDPA path. Around the kernel, the layer's two halves are compiled apart.
        runs = decode_attention.available(self.device, self.head_dim)
        self.attention_kernel = runs if attention_kernel is None else attention_kernel
        if self.attention_kernel and not runs:
            raise ValueError("attention_kernel=True needs Triton, a CUDA device (or TRITON_INTERPRET=1) and a "
                             f"power-of-two head dimension of at least 16 (this model's: {self.head_dim})")
        # Prefill's attention: FlashAttention over packed rows where it runs (`prefill_attention`), else SDPA
        # over the padded block with its mask.
        runs = prefill_attention.available(self.device, self.embed.dtype, self.head_dim)
        packed_prefill = type(self).packed_prefill if packed_prefill is None else packed_prefill
        self.packed_prefill = runs if packed_prefill is None else packed_prefill
        if self.packed_prefill and not runs:
            raise ValueError("packed_prefill=True needs CUDA with flash attention, an Ampere or newer GPU, half "
                             f"precision and a head size of at most 256 divisible by 8 (this model's: {self.head_dim})")
        self._decode_halves = ((torch.compile(layers.decode_qkv), torch.compile(layers.decode_out)) if self.compiled
                               else (layers.decode_qkv, layers.decode_out))
        # Prefill's blocks around attention are compiled with dynamic shapes (one compilation serves every call);
        # attention and the cache writes stay eager: compiled, their mask and K/V preparation ran slower.
        blocks = (layers.qkv, layers.mlp_out)
        self._blocks = tuple(torch.compile(b, dynamic=True) for b in blocks) if self.compiled else blocks
        # Sampling: a split Triton kernel on CUDA (`decode_sampling`), else torch's generator.
        self.sampling_kernel = decode_sampling.available(self.device)
        # Rows that do not wait (`compaction`): by default where a moved row keeps its random numbers (the kernel).
        self.compact_rows = self.sampling_kernel and not record_logprobs if compact_rows is None else compact_rows
        # All graphs draw their scratch memory from one pool: calls never overlap and every graph's results are
        # copied into its own static buffers, so scratch blocks can be shared.
        self.graph_pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def refresh(self):
        """Rewrite the sampling weights from the base weights and the current adapter, if any changed."""
        self.weights.refresh()

    def release(self, weights: bool = False) -> None:
        """Free the KV pool and the graphs that read it, so that other work (the learner) can use the memory; the
        next call allocates the pool and captures its graphs again (compiled code is kept). `weights`: the sampling
        weights too, outside slot mode (there they are the merged copies; in slot mode the base's own storage), which
        the next call rebuilds from the model."""
        self.graphs.clear()
        self.pool = None
        if weights:
            self.weights.drop()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            # A new scratch pool for the new graphs: the old one may outlive its graphs (the first capture of a
            # process allocates the CUDA generator's graph-seed tensors in it, which live on), and capturing
            # into a pool that no graph uses any more fails an assertion in PyTorch's allocator.
            self.graph_pool = torch.cuda.graph_pool_handle()

    def store_adapter(self, slot: int) -> None:
        """Slot mode: copy the model's live adapter into slot `slot` (what rows of block `slot` will read)."""
        self.weights.store(slot)

    # --------------------------------------------------------------------------------------------- forward
    def _read(self, news, held, first, T: int, k_cache, v_cache, masks):
        """Prefill: each row's new tokens `news` (the end of its prompt) through the layers, their K/V written into
        the caches [layers, B, Hkv, L, D] at columns T - len .. T-1 of the row; the row's prompt begins at column
        `first` [B] and its first `held[b]` tokens are in the cache already. `masks`: the rows' slot masks (slot
        mode) or {}. Returns the last new token's normed state [B, H], which predicts the next token."""
        read = self._read_packed if self.packed_prefill else self._read_padded
        return read(news, held, first, T, k_cache, v_cache, masks)

    def _read_padded(self, news, held, first, T, k_cache, v_cache, masks):
        """`_read` as a left-padded block [B, S] ending at column T, attending under the block's mask."""
        ids, bmask = left_pad(news, self.pad_id, self.device)  # [B, S]
        positions = torch.tensor(held, device=self.device)[:, None] + (bmask.cumsum(-1) - 1).clamp(min=0)
        cols = torch.arange(T, device=self.device)
        attention = prefill_attention.Masked(layers.block_mask(cols[None] >= first[:, None], ids.shape[1]),
                                             bmask.bool())
        x = self._layers(ids, positions, k_cache, v_cache, attention, self.weights.lora(masks))
        return layers.rms(x[:, -1], self.norm, self.eps)

    def _read_packed(self, news, held, first, T, k_cache, v_cache, masks):
        """`_read` with the rows' new tokens packed into one sequence [1, N] (no padding goes through the layers),
        attending through FlashAttention's varlen kernel (`prefill_attention.Packed`); each token reads through
        its row's slot."""
        p = prefill_attention.pack([len(n) for n in news], first, T, self.n_kv, k_cache.shape[3])
        ids = torch.tensor([t for n in news for t in n], device=self.device)[None]  # [1, N]
        positions = (torch.tensor(held, device=self.device)[p.rows] + p.offsets)[None]  # [1, N]
        lora = self.weights.lora({rank: m[p.rows].transpose(0, 1) for rank, m in masks.items()})  # masks [1, N, n*r]
        x = self._layers(ids, positions, k_cache, v_cache, prefill_attention.Packed(p), lora)
        return layers.rms(x[0, p.last], self.norm, self.eps)

    def _layers(self, ids, positions, k_cache, v_cache, attention, lora):
        x = F.embedding(ids, self.embed)  # [B, S, H]
        cos, sin = self.rotary(x, positions)
        for i, (w, lora_i) in enumerate(zip(self.layers, lora)):
            x = layers.prefill_layer(x, cos, sin, *self.weights.layer_args(w), k_cache[i], v_cache[i], attention,
                                     *self._blocks, **self.dims, lora=lora_i)
        return x

    def _prefill_runs(self, s, prompts, plan, first, adapters) -> None:
        """Read each group's shared run once (a batch of the groups' leaders) and copy its K/V into every member's
        cache columns of state `s`, where the member's prompt begins (`first` [B])."""
        runs = [prompts[row][:n] for row, n in zip(plan.leaders, plan.runs)]
        G, P = len(runs), max(len(r) for r in runs)
        shape = (len(self.layers), G, self.n_kv, P, self.head_dim)
        k = torch.zeros(shape, device=self.device, dtype=self.embed.dtype)
        v = torch.zeros_like(k)
        masks = {rank: m.new_zeros(G, *m.shape[1:]) for rank, m in s["masks"].items()}
        if self.slots:
            self.weights.set_rows(masks, [adapters[row] for row in plan.leaders])
        self._read(runs, [0] * G, P - torch.tensor([len(r) for r in runs], device=self.device), P, k, v, masks)
        first = first.tolist()
        for row, (g, n) in enumerate(zip(plan.group, plan.shared)):
            if g >= 0:  # the run sits at the right end of the leaders' block: columns P - runs[g] ..
                at = P - plan.runs[g]
                s["k"][:, row, :, first[row]:first[row] + n] = k[:, g, :, at:at + n]
                s["v"][:, row, :, first[row]:first[row] + n] = v[:, g, :, at:at + n]
        self.shared_tokens += sum(plan.shared) - sum(plan.runs)

    def _pick(self, hidden, s):
        """Next token [B] (and its log-prob [B]) from the last hidden state [B, H]; `s`: the graph's state, whose
        seed and step key the sampling kernel's random numbers."""
        logits = F.linear(hidden, self.weights.head)  # [B, V]
        if self.sampling_kernel and not self.greedy and not self.record_logprobs:
            return decode_sampling.sample(logits, self.temperature, s["seed"], s["step"], s["row"]), None
        return decode_sampling.sample_eager(logits, self.temperature, greedy=self.greedy,
                                            logprobs=self.record_logprobs)

    # ------------------------------------------------------------------------------------------ the graph
    def _buffers(self, B, L):
        kv = (len(self.layers), B, self.n_kv, L, self.head_dim)
        dev, dt = self.device, self.embed.dtype
        n = len(self.layers) * B * self.n_kv * L * self.head_dim
        if self.pool is None or self.pool.shape[1] < n:
            # Every graph's K/V are views of one pool (calls never overlap), so memory is that of the largest
            # shape, not the sum over shapes. A larger shape regrows the pool, and the graphs are re-captured.
            self.release()
            self.pool = torch.zeros(2, n, device=dev, dtype=dt)
        def zeros(*shape, dtype=torch.long):
            return torch.zeros(*shape, dtype=dtype, device=dev)
        return {"k": self.pool[0, :n].view(kv), "v": self.pool[1, :n].view(kv), "first": zeros(B), "tok": zeros(B),
                "pos": zeros(B, 1), "col": zeros(1), "step": zeros(1), "seed": zeros(1),
                "done": zeros(B, dtype=torch.bool), "out": zeros(B, L), "logp": zeros(B, L, dtype=torch.float32),
                "row": zeros(B)}  # each row's place in the call: keys its random numbers (`compaction`)

    def _decode_step(self, s, upto: int | None = None):
        """One token for every row, entirely on the device (this is what the graph holds).

        `upto` (eager runs only): attend over the first `upto` cache columns, the filled ones, instead of all L.
        """
        x = F.embedding(s["tok"][:, None], self.embed)  # [B, 1, H]
        cos, sin = self.rotary(x, s["pos"])
        if self.attention_kernel:  # attends over exactly the filled columns: 0..col (`upto` is implied)
            qkv, out = self._decode_halves
            filled = s["col"] + 1  # [1]
            for i, (w, lora) in enumerate(zip(self.layers, s["lora"])):
                lora_qkv, lora_out = layers.split_lora(lora)
                q = qkv(x, cos, sin, w["ln1"], w["qkv"].weight, w["qkv"].bias, s["k"][i], s["v"][i], s["col"],
                        **self.dims, lora=lora_qkv)
                a = self.attend(q, s["k"][i], s["v"][i], s["first"], filled)  # [B, Hkv, G, D]
                x = out(x, a, w["ln2"], w["o"].weight, w["gate_up"].weight, w["down"].weight, self.eps, lora_out)
        else:
            cols = slice(None, upto)
            column = torch.arange(s["k"].shape[3] if upto is None else upto, device=self.device)
            # a row's own tokens: from its first column to the newest (this step's), never the left padding
            mask = ((column >= s["first"][:, None]) & (column <= s["col"]))[:, None, None]  # [B, 1, 1, L]
            for i, (w, lora) in enumerate(zip(self.layers, s["lora"])):
                x = self._decode(x, cos, sin, *self.weights.layer_args(w), s["k"][i][:, :, cols], s["v"][i][:, :, cols],
                                 s["col"], mask, **self.dims, lora=lora)
        tok, logp = self._pick(layers.rms(x[:, -1], self.norm, self.eps), s)
        if not self.force_max_length:
            tok = torch.where(s["done"], torch.full_like(tok, self.pad_id), tok)
            s["done"].logical_or_(torch.isin(tok, self.stop))
        s["tok"].copy_(tok)
        s["out"].index_copy_(1, s["step"], tok[:, None])
        if logp is not None:
            s["logp"].index_copy_(1, s["step"], logp[:, None])
        s["pos"].add_(1)
        s["col"].add_(1)
        s["step"].add_(1)

    def captures(self, B, L) -> bool:
        """Whether `_graph(B, L)` captures a graph (a new shape, on CUDA): its warm-up steps write into the pool."""
        return (B, L) not in self.graphs and self.device.type == "cuda"

    def _graph(self, B, L):
        key = (B, L)
        if key in self.graphs:  # moved to the end: the least recently used graph is the one dropped
            return self.graphs.setdefault(key, self.graphs.pop(key))
        if len(self.graphs) >= MAX_GRAPHS:
            self.graphs.pop(next(iter(self.graphs)))
        s = self._buffers(B, L)
        s["graph"] = None
        s["masks"] = {r: torch.zeros(B, 1, self.slots * r, device=self.device, dtype=self.embed.dtype)
                      for r in self.weights.ranks()}
        s["lora"] = self.weights.lora(s["masks"])  # built once per state: prefill and every decode step read it
        if not self.captures(B, L):  # the same step, run eagerly: lets CPU tests check the math
            self.graphs[key] = s
            return s
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up outside capture, as CUDA graphs require
                self._decode_step(s)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.graph_pool):
            self._decode_step(s)
        s["graph"] = graph
        self.graphs[key] = s
        return s

    # ------------------------------------------------------------------------------------------- public
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int,
                 generator: torch.Generator | None = None, *, capacity: int = 0,
                 session: Session | None = None, slots: int = 0,
                 adapters: list[int | None] | None = None) -> list[list[int]]:
        """`capacity` (optional) is the least KV length to allocate: callers that want one graph shape pass it.

        `session` (optional): one copy's `Session`. A row whose prompt begins with the tokens the session holds for
        it (its last prompt and message) reads only the rest; the session then holds this call's rows.

        Slot mode (one of the two, required there): `adapters`, one entry per prompt, the slot whose adapter samples
        it or None for the base alone; `slots=n`, the prompts are n equal contiguous blocks, block j through slot j."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        adapters = self.weights.rows(len(prompts), slots, adapters)
        with prefill_attention.attention_kernels():
            return self._generate(prompts, max_new_tokens, generator, capacity, session, adapters)

    def _generate(self, prompts, max_new_tokens, generator, capacity, session=None, adapters=None):
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)) \
            if generator is not None else None
        self.refresh()
        dev = self.device
        B, T = len(prompts), max(len(p) for p in prompts)
        bucket = BUCKET if dev.type == "cuda" else CPU_BUCKET
        L = -(-max(T + max_new_tokens, capacity) // bucket) * bucket
        s = self._graph(B, L)
        if self.slots:
            self.weights.set_rows(s["masks"], adapters)
        if seed is not None:
            # Seeded after the graph is found: capturing a new one runs warm-up steps that draw random numbers,
            # and a call must sample the same whether or not its graph was captured before.
            (torch.cuda.manual_seed if self.device.type == "cuda" else torch.manual_seed)(seed)
        if self.sampling_kernel:  # the kernel's key: this call's seed, or a fresh one from the CUDA generator
            s["seed"].fill_(seed) if seed is not None else s["seed"].random_(0, 2**62)
        # Row i's prompt fills columns T - len(p_i) .. T-1; its first `reuse[i]` tokens come from the session's
        # cache, or its first `plan.shared[i]` from its group's run; the rest goes through the layers (`_read`).
        reuse = layers.reusable(session, prompts)
        plan = prefixes.plan(prompts, reuse, adapters) if self.share_prefixes else None
        known = [r + n for r, n in zip(reuse, plan.shared)] if plan else reuse
        lengths = torch.tensor([len(p) for p in prompts], device=dev)
        first = T - lengths  # [B] column of each row's first prompt token
        if any(reuse):
            session.reused_tokens += sum(reuse)
            count = torch.tensor(reuse, device=dev)  # [B]
            for key in ("k", "v"):
                layers.place(s[key], getattr(session, key), first, count, T)
        if session is not None:
            # The held K/V are in the pool now (or of no use): free them before prefill and decode, which
            # would otherwise run with the copy's old cache in memory beside the pool (8 GB at 300 chats).
            session.ids = session.k = session.v = None
        if plan:
            self._prefill_runs(s, prompts, plan, first, adapters)
        s["first"].copy_(first)
        s["done"].zero_()
        written = compaction.start(self, s, session, adapters)
        hidden = self._read([p[r:] for p, r in zip(prompts, known)], known, first, T, s["k"], s["v"], s["masks"])
        s["step"].zero_()
        tok, logp = self._pick(hidden, s)
        if not self.force_max_length:
            s["done"].copy_(torch.isin(tok, self.stop))
        s["tok"].copy_(tok)
        s["out"][:, 0] = tok
        if logp is not None:
            s["logp"][:, 0] = logp
        s["pos"].copy_(lengths[:, None])
        s["col"].fill_(T)
        s["step"].fill_(1)
        made = 1
        while made < max_new_tokens:
            # A GPU checks for the end every 16 steps (each check is a device sync); a CPU checks every step.
            burst = min(16 if s["graph"] is not None else 1, max_new_tokens - made)
            for i in range(burst):
                if s["graph"] is not None:
                    s["graph"].replay()
                else:  # this step writes column T + made + i - 1 and attends up to it
                    self._decode_step(s, upto=T + made + i)
            made += burst
            s, live = compaction.shrink(self, s, written, made, max_new_tokens, L, T)
            if not live:
                break
        rows, self.last_logprobs = compaction.result(s, written, made, self.record_logprobs)
        rows = rows if self.force_max_length else cut_at_stop(rows, self.stop_ids)
        if session is not None and session.keep:
            compaction.hold(session, s, written, prompts, rows, T)
        return rows
