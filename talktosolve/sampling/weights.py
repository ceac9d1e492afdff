"""The static engine's sampling weights: exact adapter weights, and slot mode's several adapters over one base.

- **Exact adapter weights.** For every LoRA layer the sampler keeps one weight buffer and, before each call,
  rewrites it as `W0 + scale * B @ A` from the untouched base weight `W0` (computed in fp32, rounded once).
  Nothing is ever merged into or unmerged from `W0`, so no drift accumulates over steps. Under full fine-tuning
  the buffers are plain copies of the live weights, rewritten the same way. A refresh is skipped while no
  parameter changed (version counters), so the four turns of a step pay for one. q|k|v and gate|up are stacked
  into one buffer each (`Fused`), so each runs as one matmul.
- **Slot mode: several policies, one decode step.** With `slots=n` the engine samples with the frozen base
  weights and holds n LoRA adapters (`store(j)` copies the model's live adapter into slot j); a call names each
  row's slot (None for the base alone): each projection adds `((x @ A) * mask) @ (scale * B)` to the base's
  output, the n adapters side by side in A and B and each row's mask keeping only its own slot's columns
  (`fast_layers.linear`; x @ A comes out of the base's matmul, A stacked under the base weight, whose storage the
  engine takes over), so any mix of rows (several runs' chats; a learner's and its frozen base partner's) is one
  batch. Decode is bound by reading the weights, so one step for n policies' rows costs far less than n steps
  (`train.runs_per_process`, `bench/gpu_shared.py`). The adapters are applied unmerged, as the learner applies
  them, so no merge is rounded into a weight.
"""

from __future__ import annotations

import torch

from talktosolve.model.policy import base_model

GROUPS = ("qkv", "o", "gate_up", "down")
"""A layer's sampling weights: q|k|v and gate|up stacked, o and down alone (`Fused`)."""


class SamplingWeights:
    """Every weight the static engine's forward reads, over a model's modules: the embedding, the final norm, per
    layer its two norms and four `Fused` groups, and the output head (a `Fused` copy when it carries LoRA).
    `slots` > 0: slot mode, n adapters over the frozen base (LoRA models only)."""

    def __init__(self, model, slots: int = 0):
        self.model = model
        self.slots = slots
        base = base_model(model)
        inner = base.get_decoder()
        head = base.get_output_embeddings()
        if slots and not any(hasattr(m, "lora_A") for m in base.modules()):
            raise ValueError("slot mode (several runs' adapters in one engine) needs a LoRA model; "
                             "full fine-tuning trains one run per process")
        if slots and hasattr(head, "lora_A"):
            raise ValueError("slot mode does not support a LoRA adapter on the output head; leave lm_head out "
                             "of model.lora_targets")
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self._head = Fused([head]) if hasattr(head, "lora_A") else None
        self._head_weight = head.weight
        self.layers = []
        for layer in inner.layers:
            at, mlp = layer.self_attn, layer.mlp
            self.layers.append({
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "qkv": Fused([at.q_proj, at.k_proj, at.v_proj]), "o": Fused([at.o_proj]),
                "gate_up": Fused([mlp.gate_proj, mlp.up_proj]), "down": Fused([mlp.down_proj]),
            })
            if slots:
                for key in GROUPS:
                    self.layers[-1][key].make_slots(slots)
        self._stamp = None

    @property
    def head(self) -> torch.Tensor:
        """The output head's weight [V, H]: the refreshed copy where it carries LoRA, else the model's own."""
        return self._head.weight if self._head is not None else self._head_weight

    @staticmethod
    def layer_args(w) -> tuple:
        """A layer's weights in the order the layer functions of `fast_layers` take them."""
        return (w["ln1"], w["ln2"], w["qkv"].weight, w["qkv"].bias, w["o"].weight, w["gate_up"].weight,
                w["down"].weight)

    def _groups(self):
        yield from (layer[key] for layer in self.layers for key in GROUPS)
        if self._head is not None:
            yield self._head

    def refresh(self) -> None:
        """Rewrite every buffer from the base weights and the current adapter (or live weights).

        Skipped when no parameter changed since the last refresh: every in-place write (an optimizer step, a
        loaded checkpoint) bumps a tensor's version counter, so four turns of one step refresh once. In slot mode
        the weights are the frozen base's and adapters come in through `store`."""
        if self.slots:
            return
        stamp = tuple(p._version for p in self.model.parameters())
        if stamp == self._stamp:
            return
        self._stamp = stamp
        for group in self._groups():
            group.refresh()

    def drop(self) -> None:
        """Free the buffers until the next `refresh` (outside slot mode, where they are copies; in slot mode they
        are the base's own storage and stay)."""
        if self.slots:
            return
        for group in self._groups():
            group.drop()
        self._stamp = None

    def store(self, slot: int) -> None:
        """Slot mode: copy the model's live adapter into slot `slot` (what the rows naming it will read)."""
        if not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} is outside this engine's {self.slots} slots")
        for layer in self.layers:
            for key in GROUPS:
                layer[key].store(slot)

    def ranks(self) -> set[int]:
        """The LoRA ranks of the slot groups (each needs its own row mask); empty outside slot mode."""
        return {w[key].rank for w in self.layers for key in GROUPS if self.slots and w[key].b is not None}

    def lora(self, masks: dict) -> list:
        """Per layer, the (q|k|v, o, gate|up, down) slot adapters read through `masks` (a graph state's, one per
        rank); Nones outside slot mode."""
        if not self.slots:
            return [None] * len(self.layers)
        return [tuple(w[key].slot_lora(masks) for key in GROUPS) for w in self.layers]

    def set_rows(self, masks: dict, adapters: list[int | None]) -> None:
        """Write each row's slot (None: the base, no adapter) into `masks` (a graph state's, read by its graph)."""
        onehot = torch.zeros(len(adapters), self.slots, dtype=self.embed.dtype)
        for i, j in enumerate(adapters):
            if j is not None:
                onehot[i, j] = 1
        for rank, mask in masks.items():
            mask.copy_(onehot.repeat_interleave(rank, dim=1)[:, None].to(mask.device))

    def rows(self, n: int, slots: int, adapters: list[int | None] | None) -> list[int | None] | None:
        """The slot of each of a call's `n` rows, from the call's `slots=` or `adapters=` (see
        `StaticEngine.generate`); None outside slot mode. Raises ValueError on a call that does not fit."""
        if (slots or adapters is not None) and not self.slots:
            raise ValueError("slots= and adapters= need an engine built in slot mode (StaticEngine(..., slots=n))")
        if not self.slots:
            return None
        if slots:
            if not (slots <= self.slots and n % slots == 0):
                raise ValueError(f"this engine holds {self.slots} adapters: slots=n (1..{self.slots}) needs the "
                                 f"prompts in n equal blocks ({n} prompts, slots={slots})")
            adapters = [j for j in range(slots) for _ in range(n // slots)]
        if adapters is None or len(adapters) != n or any(j is not None and not 0 <= j < self.slots for j in adapters):
            raise ValueError(f"this engine holds {self.slots} adapters: pass adapters= (one slot in 0.."
                             f"{self.slots - 1} or None per prompt) or slots=n with the prompts in n equal blocks")
        return adapters


class Fused:
    """The sampling weight of one or more linear layers stacked by rows (q|k|v, gate|up), each part rewritten
    from its base weight plus its current LoRA delta on `refresh` (live weights when there is no adapter)."""

    def __init__(self, modules):
        self.parts = []
        for m in modules:
            lora = hasattr(m, "base_layer") and hasattr(m, "lora_A") and len(m.lora_A) > 0
            base = m.base_layer if lora else m
            self.parts.append((m, base, lora))
        bases = [b for _, b, _ in self.parts]
        self.weight = torch.cat([b.weight.detach() for b in bases], 0).clone()  # [sum out, in]
        has_bias = [b.bias is not None for b in bases]
        self.bias = None
        if any(has_bias):
            self.bias = torch.cat([b.bias.detach() if b.bias is not None else
                                   torch.zeros(b.weight.shape[0], device=b.weight.device, dtype=b.weight.dtype)
                                   for b in bases]).clone()

    @torch.no_grad()
    def make_slots(self, n: int) -> None:
        """Slot mode: room for `n` adapters, applied per row by `linear`. The weight becomes [out + n * rank, in]:
        the base weight, then slot j's A (every part's, side by side) in rows out + j * rank ...; b [n * rank, out]
        holds its scale * B in the same rows, each part in its own output columns (zeros elsewhere).

        The base weight is frozen in a LoRA model, so the stacked weight takes over its storage: each part's base
        layer reads a view of its rows (and its bias of the bias's), and the base is held once, not once by the
        model and once by the engine."""
        ranks = [m.lora_A[only_adapter(m)].weight.shape[0] for m, _, lora in self.parts if lora]
        self.rank, self.n_out, self.b = sum(ranks), self.weight.shape[0], None
        if not ranks:
            if len(self.parts) == 1:  # nothing to stack: read the base's own tensor
                self.weight = self.parts[0][1].weight.detach()
            return
        n_in, dev, dt = self.weight.shape[1], self.weight.device, self.weight.dtype
        stacked = torch.zeros(self.n_out + n * self.rank, n_in, device=dev, dtype=dt)
        stacked[:self.n_out].copy_(self.weight)
        bias = None if self.bias is None else torch.cat([self.bias, self.bias.new_zeros(n * self.rank)])
        self.weight, self.bias = stacked, bias
        self.b = torch.zeros(n * self.rank, self.n_out, device=dev, dtype=dt)
        row = 0
        for _, base, _ in self.parts:
            rows = base.weight.shape[0]
            if not base.weight.requires_grad:  # frozen: adopt its storage (a trained base keeps its own)
                base.weight.data = stacked[row:row + rows]
                if base.bias is not None and not base.bias.requires_grad:
                    base.bias.data = bias[row:row + rows]
            row += rows

    @torch.no_grad()
    def store(self, slot: int) -> None:
        """Copy the live adapter into slot `slot` (a no-op for a group without LoRA)."""
        if self.b is None:
            return
        row, col = 0, slot * self.rank
        for m, base, lora in self.parts:
            n = base.weight.shape[0]
            if lora:
                name = only_adapter(m)
                a, b = m.lora_A[name].weight, m.lora_B[name].weight  # [r, in], [out, r]
                r = a.shape[0]
                self.weight[self.n_out + col:self.n_out + col + r].copy_(a)
                self.b[col:col + r, row:row + n].copy_((m.scaling[name] * b.float()).t())
                col += r
            row += n

    def slot_lora(self, masks: dict):
        """(the base's output width, B, the rows' mask for this group's rank) for `linear`, or None for a group
        without LoRA."""
        return None if self.b is None else (self.n_out, self.b, masks[self.rank])

    def drop(self) -> None:
        """Free the stacked weight until the next `refresh` (outside slot mode, where it is a copy)."""
        self.weight = None

    @torch.no_grad()
    def refresh(self):
        if self.weight is None:
            bases = [b for _, b, _ in self.parts]
            self.weight = torch.empty(sum(b.weight.shape[0] for b in bases), bases[0].weight.shape[1],
                                      device=bases[0].weight.device, dtype=bases[0].weight.dtype)
        row = 0
        for m, base, lora in self.parts:
            n = base.weight.shape[0]
            if lora:
                merged = base.weight.float()
                for name in m.active_adapters:
                    if name in m.lora_A:
                        delta = m.lora_B[name].weight.float() @ m.lora_A[name].weight.float()
                        merged = merged + m.scaling[name] * delta
                self.weight[row:row + n].copy_(merged)
            else:
                self.weight[row:row + n].copy_(base.weight)
            if self.bias is not None and base.bias is not None:
                self.bias[row:row + n].copy_(base.bias)
            row += n


def only_adapter(module) -> str:
    names = [n for n in module.active_adapters if n in module.lora_A]
    if len(names) != 1:
        raise ValueError(f"slot mode reads one active LoRA adapter per layer; this layer has {names}")
    return names[0]
