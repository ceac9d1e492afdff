"""Dequantize a GGUF chat model once into a safetensors folder that every later load reads in seconds.

A recipe loads its base model once per training process and once per evaluation (14 times in the paper preset).
From a GGUF file each load dequantizes every block on the CPU; from the folder this writes, it is a plain
safetensors read. The weights are those `talktosolve` itself loads from the file (`policy.load_base`, dequantized
to `--dtype`), and the tokenizer its own GGUF tokenizer with the chat template, so a run on the folder samples what
a run on the file would.

    python bench/gguf_to_folder.py tied.gguf /tmp/qwen-coder --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from talktosolve.config import ModelConfig
from talktosolve.model.policy import gguf_read_once, load_base, load_tokenizer, stop_ids
from talktosolve.model.smollm2 import sha256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", type=Path, help="the .gguf file")
    ap.add_argument("out", type=Path, help="the folder to write (config, safetensors, tokenizer)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--sha256", default="", help="refuse a file whose sha256 differs")
    args = ap.parse_args()
    if args.sha256:
        got = sha256(args.gguf)
        if got != args.sha256:
            raise SystemExit(f"{args.gguf}: sha256 {got}, expected {args.sha256}; join the pieces again.")
    t0 = time.perf_counter()
    cfg = ModelConfig(name_or_path=str(args.gguf), dtype=args.dtype)
    with gguf_read_once():  # the file's vocabulary parsed once for the config, the weights and the tokenizer
        model = load_base(cfg, torch.device("cpu"))
        tok = load_tokenizer(cfg)
    model.name_or_path = str(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    facts = {"source": str(args.gguf), "dtype": args.dtype, "seconds": round(time.perf_counter() - t0, 1),
             "parameters": sum(p.numel() for p in model.parameters()),
             "tied": bool(model.config.tie_word_embeddings), "stop_ids": stop_ids(tok, model),
             "eos": tok.eos_token, "pad": tok.pad_token}
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
