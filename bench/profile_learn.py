"""Profile one GRPO micro-batch on the GPU (paper shape), and time learner variants side by side.

    python bench/profile_learn.py --model-dir DIR
"""

import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    args = ap.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    from talktosolve.config import make_config
    from talktosolve.grpo import Sample, grpo_update
    from talktosolve.policy import make_trainable

    config = AutoConfig.from_pretrained(args.model_dir)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(450, 650, (128,), generator=g).tolist()
    samples = [Sample(torch.randint(0, 150000, (n - 150,), generator=g).tolist(),
                      torch.randint(0, 150000, (150,), generator=g).tolist(), (i % 4 - 1.5) / 4, i // 4)
               for i, n in enumerate(lens)]
    n_tok = sum(lens)

    def timed(name, m, mb=2):
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
        grpo_update(m, opt, samples[:16], pad_id=0, chats_per_microbatch=mb, grad_clip=1.0, device="cuda")
        torch.cuda.synchronize()
        t = time.perf_counter()
        grpo_update(m, opt, samples, pad_id=0, chats_per_microbatch=mb, grad_clip=1.0, device="cuda")
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        print(f"{name:<40} {dt:6.2f} s  {n_tok / dt:8.0f} tok/s", flush=True)

    # plain forward + backward of the HF model, no peft, no loss machinery: the floor for this stack
    ids = torch.randint(0, 150000, (8, 600), device="cuda")
    for p in model.parameters():
        p.requires_grad_(False)
    model.model.embed_tokens.weight.requires_grad_(True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(16):
        model.model(input_ids=ids).last_hidden_state.float().pow(2).mean().backward()
    torch.cuda.synchronize()
    print(f"{'hf fwd+bwd 16 x [8, 600], no mask':<40} {time.perf_counter() - t:6.2f} s", flush=True)
    torch.cuda.synchronize()
    t = time.perf_counter()
    mask = torch.ones_like(ids)
    mask[:, 550:] = 0
    for _ in range(16):
        model.model(input_ids=ids, attention_mask=mask).last_hidden_state.float().pow(2).mean().backward()
    torch.cuda.synchronize()
    print(f"{'hf fwd+bwd 16 x [8, 600], padding mask':<40} {time.perf_counter() - t:6.2f} s", flush=True)
    model.model.embed_tokens.weight.requires_grad_(False)
    cfg = make_config("paper")
    lora = make_trainable(model, cfg.model)
    timed("grpo_update LoRA r=32 (fp32 adapter)", lora)
    timed("grpo_update LoRA, 4 chats per micro-batch", lora, mb=4)
    from torch.profiler import ProfilerActivity, profile

    opt = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-4)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        grpo_update(lora, opt, samples[:8], pad_id=0, chats_per_microbatch=2, grad_clip=1.0, device="cuda")
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=22, max_name_column_width=60))
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=60))


if __name__ == "__main__":
    main()
