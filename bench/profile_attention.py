"""The decode step's attention alone, on a GPU: the Triton kernel's launch configurations against the engine's
portable attention (two matmuls and a masked softmax, compiled), at the paper model's head shape (2 KV heads,
6 query heads each, head dimension 128, bf16).

Each variant is captured 20 times in one CUDA graph and replayed (as inside the engine's decode graph, so launch
overhead is not counted), each call over another copy of the caches, as many copies as make 200 MB, so that
the caches are read from memory, not from the 50 MB L2 cache that the engine's caches, one per layer, never fit
in; `gb_per_s` is the attended columns' K and V bytes over the time. Shapes: batch 32 (training) and 128 / 300
(evaluation), caches of 768 and 1,536 columns, 80% filled, rows starting at random columns below each
`--padding` bound (left padding). Every configuration is checked against fp32 attention first. Besides the
launch configurations (`--configs all`: splits, block, warps, stages; `splits`: the splits alone, at the
default block, warps and stages; `default`: the default alone), the default configuration reading every column
below the filled count, the rows' padding too (`read_padding=True`), and the kernel before its splits
(`bench/decode_attention_before.py`: fixed chunks of 128 columns, a combine merging them one after another).

  python bench/profile_attention.py --out attention.json
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
from pathlib import Path

import torch


def portable(q, k, v, mask):
    """`fast_layers.decode_layer`'s CUDA attention. q [B, Hkv, G, D]; caches [B, Hkv, L, D]; mask [B, 1, 1, L]."""
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * q.shape[-1] ** -0.5
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).to(q.dtype)
    return torch.matmul(probs, v)


def graph_ms(fn, copies, repeat=20, replays=5):
    """Milliseconds per call of `fn(i)` replayed from one CUDA graph holding `repeat` calls, call i over copy
    i % copies of the inputs."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            fn(i % copies)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(repeat):
            fn(i % copies)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (repeat * replays)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="32,128,300")
    ap.add_argument("--lengths", default="768,1536")
    ap.add_argument("--padding", default="100",
                    help="bounds of the rows' left padding, in columns: rows start at random below each")
    ap.add_argument("--configs", choices=("all", "splits", "default"), default="splits")
    args = ap.parse_args()

    import decode_attention_before as before
    import triton

    from talktosolve.sampling import decode_attention
    from talktosolve.sampling.decode_attention import attend

    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "rows": []}
    H, G, D = 2, 6, 128
    compiled = torch.compile(portable)
    default = dict(splits=None, block=decode_attention.BLOCK, num_warps=decode_attention.NUM_WARPS,
                   num_stages=decode_attention.NUM_STAGES)
    if args.configs == "all":
        configs = [dict(splits=p, block=b, num_warps=w, num_stages=s)
                   for p, b, w, s in itertools.product((1, 2, 4, 8, 16), (32, 64, 128), (4, 8), (1, 2, 3))]
    else:
        configs = [{**default, "splits": p} for p in ((1, 2, 4, 8, 16) if args.configs == "splits" else ())]
    configs = [default] + configs + [{**default, "read_padding": True}]
    g = torch.Generator(device="cuda").manual_seed(0)
    for B, L, pad in itertools.product(*([int(x) for x in a.split(",")] for a in (args.batches, args.lengths,
                                                                                   args.padding))):
        filled = int(0.8 * L)
        copies = max(1, math.ceil(200e6 / (2 * B * H * L * D * 2)))
        q = torch.randn(B, H, G, D, device="cuda", dtype=torch.bfloat16, generator=g)
        ks = [torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(copies)]
        vs = [torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(copies)]
        k, v = ks[0], vs[0]
        first = torch.randint(0, pad, (B,), device="cuda", generator=g)
        cols = torch.arange(L, device="cuda")
        valid = (cols[None] >= first[:, None]) & (cols[None] < filled)
        n = torch.tensor([filled], device="cuda")
        scores = torch.einsum("bhgd,bhld->bhgl", q.float(), k.float()) * D ** -0.5
        want = torch.einsum("bhgl,bhld->bhgd", scores.masked_fill(~valid[:, None, None], float("-inf")).softmax(-1),
                            v.float())
        nbytes = 2 * valid.sum().item() * H * D * 2  # K and V of the attended columns, bf16
        mask = valid[:, None, None]
        ms = graph_ms(lambda i: compiled(q, ks[i], vs[i], mask), copies)
        err = (compiled(q, k, v, mask).float() - want).abs().max().item()
        rows = [{"variant": "portable (compiled matmuls, all L columns)", "ms": ms, "max_err": err}]
        err = (before.attend(q, k, v, first, n).float() - want).abs().max().item()
        rows.append({"variant": "before its splits", "ms": graph_ms(lambda i: before.attend(q, ks[i], vs[i], first, n),
                                                                      copies), "max_err": err})
        for c in configs:
            try:
                err = (attend(q, k, v, first, n, **c).float() - want).abs().max().item()
                ms = graph_ms(lambda i: attend(q, ks[i], vs[i], first, n, **c), copies)
            except Exception as e:  # noqa: BLE001 - a configuration the compiler rejects: record, go on
                rows.append({"variant": "kernel", **c, "error": repr(e)[:200]})
                continue
            rows.append({"variant": "kernel", **c, "ms": ms, "max_err": err,
                         "splits_used": c["splits"] or decode_attention.splits_for(B * H, L, c["block"]),
                         "default": c is default})
        for r in rows:
            if "ms" in r:
                r.update(batch=B, columns=L, filled=filled, padding_below=pad, cache_copies=copies,
                         padded_share=1 - valid.sum().item() / (B * filled), gb_per_s=nbytes / r["ms"] / 1e6)
        rows.sort(key=lambda r: r.get("ms", float("inf")))
        res["rows"] += rows
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
        base = next(r for r in rows if r["variant"].startswith("portable"))
        print(f"\nbatch {B}, {L} columns ({filled} filled, padding below {pad}, {copies} cache copies): portable "
              f"{base['ms'] * 1000:.1f} us ({base['gb_per_s']:.0f} GB/s of filled K/V)", flush=True)
        for r in [r for r in rows if r["variant"] != "portable (compiled matmuls, all L columns)" and "ms" in r][:8]:
            what = (r["variant"] if r["variant"] != "kernel" else
                    f"splits {r['splits_used']:>2}{' (default)' if r['default'] else ''} block {r['block']:>3} "
                    f"warps {r['num_warps']} stages {r['num_stages']}"
                    f"{' reading the padding' if r.get('read_padding') else ''}")
            print(f"  {what}: {r['ms'] * 1000:7.1f} us {r['gb_per_s']:6.0f} GB/s  err {r['max_err']:.1e}", flush=True)
        mine = next(r for r in rows if r.get("default") and not r.get("read_padding"))
        old = next(r for r in rows if r["variant"] == "before its splits")
        padded = next(r for r in rows if r.get("read_padding"))
        print(f"  default: {mine['ms'] * 1000:.1f} us; before its splits: {old['ms'] * 1000:.1f} us "
              f"({old['ms'] / mine['ms']:.2f}x); reading the padding too: {padded['ms'] * 1000:.1f} us", flush=True)

if __name__ == "__main__":
    main()
