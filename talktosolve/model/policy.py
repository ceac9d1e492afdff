"""The policy: a Hugging Face causal LM, fine-tuned through a LoRA adapter (or every weight).

By default every seat is the same model, so one adapter serves A and B; with per-role adapters
(`model.adapters=per_role`) a run keeps one set of trained weights per seat (`trained_weights`). Loading is
strict about safety: weights and adapters are read as safetensors only, and `trust_remote_code` stays off unless
the config turns it on. A player's identity in keys is its run's (`weights_key`), and a LoRA adapter's shape
(`adapter_shape`) says which adapters can share one engine.

A built-in model is a name that is neither a folder nor a Hub id: `register_builtin(name, folder)` maps it to a
function that finds (or builds) its folder. The micro world registers its bases, `micro` and `micro-teams`,
when `talktosolve` is imported (`talktosolve.micro`); model loading itself knows no world.

A GGUF checkpoint (a `.gguf` file, or a folder holding one and no `config.json`) is read by transformers with
the `gguf` package (the `gguf` extra): every weight is dequantized to the configured dtype, so LoRA, full
fine-tuning and the fast engine see an ordinary model, and the tokenizer and chat template come from the same
file. The model then names the GGUF file as its path, which PEFT records as a saved adapter's base. transformers
opens the file anew for the config, the tokenizer and the weights, and each opening parses the whole vocabulary one
numpy slice at a time (a third of a conversion's time for Qwen2.5's 151k tokens): inside `gguf_read_once` every
opening of a file gets one reader of it. `load_base` opens it in one (the config and the weights); a caller that
loads the tokenizer too spans both with one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from talktosolve.config import Config, ModelConfig
from talktosolve.store import read_json

if TYPE_CHECKING:
    import torch  # imported where used: `import talktosolve` (which registers the built-in models) stays light

FULL_WEIGHTS = "model.safetensors"

BUILTIN_MODELS: dict[str, Callable[[str], Path]] = {}
"""Model names that are neither a folder nor a Hub id -> the function giving that model's folder from its name
(`register_builtin`)."""


class ModelError(RuntimeError):
    """A model or adapter that cannot be used; the message says what to do."""


def register_builtin(name: str, folder: Callable[[str], Path]) -> None:
    """Let `model.name_or_path=name` load the model in the folder `folder(name)` returns (found, copied or built
    on first use, as the function sees fit)."""
    BUILTIN_MODELS[name] = folder


def cache_root() -> Path:
    """Where talktosolve keeps the models it fetches or builds: `$TALKTOSOLVE_CACHE`, default
    `~/.cache/talktosolve`."""
    return Path(os.environ.get("TALKTOSOLVE_CACHE") or Path.home() / ".cache" / "talktosolve")


def resolve_device(name: str) -> torch.device:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ModelError(f"device `{name}` is not a device torch knows; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device `{name}` asked for, but torch sees no CUDA GPU. Use `--set device=cpu`.")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise ModelError(f"model.dtype `{name}` is not one of auto, {', '.join(table)}.")
    return table[name]


def model_path(cfg: ModelConfig) -> str:
    """The folder, file or Hub id the model is loaded from: a built-in model's folder, else the name itself."""
    if cfg.name_or_path in BUILTIN_MODELS:
        return str(BUILTIN_MODELS[cfg.name_or_path](cfg.name_or_path))
    return cfg.name_or_path


def gguf_file(path: str) -> Path | None:
    """The GGUF checkpoint `path` names: the file itself, or the one `.gguf` file of a folder that has no
    `config.json` (a folder with one is a transformers folder, whatever else it holds); None otherwise."""
    p = Path(path)
    if p.suffix == ".gguf":
        if not p.is_file():
            raise ModelError(f"No GGUF file at `{p}`; give the path of a .gguf file (`--set model.name_or_path=...`).")
        found = [p]
    elif p.is_dir() and not (p / "config.json").exists():
        found = sorted(p.glob("*.gguf"))
    else:
        return None
    if len(found) > 1:
        raise ModelError(f"`{p}` holds {len(found)} GGUF files ({', '.join(f.name for f in found)}); name one: "
                         f"`--set model.name_or_path={found[0]}`.")
    if found and importlib.util.find_spec("gguf") is None:
        raise ModelError(f"`{found[0]}` is a GGUF file, which needs the `gguf` package: "
                         "pip install 'talktosolve[gguf]'.")
    return found[0] if found else None


_READERS: dict | None = None  # (path, mtime) -> gguf.GGUFReader, while a `gguf_read_once` block is open


@contextlib.contextmanager
def gguf_read_once():
    """Within this block (blocks nest), each GGUF file is parsed once, however often transformers opens it."""
    global _READERS
    if _READERS is not None:
        yield
        return
    import gguf

    original = gguf.GGUFReader

    def reader(path, mode="r"):
        if mode != "r":
            return original(path, mode)
        key = (str(Path(path).resolve()), os.stat(path).st_mtime_ns)
        if key not in _READERS:
            _READERS[key] = original(path, mode)
        return _READERS[key]

    _READERS, gguf.GGUFReader = {}, reader
    try:
        yield
    finally:
        _READERS, gguf.GGUFReader = None, original


def load_tokenizer(cfg: ModelConfig):
    from transformers import AutoTokenizer

    path = model_path(cfg)
    gguf = gguf_file(path)
    try:
        if gguf is not None:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        elif _saved_class(path) in ("PreTrainedTokenizerFast", "TokenizersBackend"):
            # transformers 5 maps any folder whose config says `qwen2` to Qwen2Tokenizer, ignoring the class the
            # folder names: a plain fast tokenizer (the micro world's word-level one) must be loaded as itself.
            from transformers import PreTrainedTokenizerFast

            tok = PreTrainedTokenizerFast.from_pretrained(path)
        else:
            tok = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError) as e:
        raise ModelError(
            f"Cannot load the tokenizer of `{path}`: {e}\nGive a local model folder or a Hub id you can reach "
            "(`--set model.name_or_path=...`); offline, set HF_HUB_OFFLINE=1 and use a folder."
        ) from e
    if tok.chat_template is None:
        raise ModelError(f"`{path}` has no chat template; use a chat (Instruct) model.")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def _saved_class(path: str) -> str | None:
    config = Path(path) / "tokenizer_config.json"
    if not config.is_file():
        return None
    try:
        return json.loads(config.read_text()).get("tokenizer_class")
    except (json.JSONDecodeError, OSError):
        return None


def stop_ids(tokenizer, model) -> list[int]:
    """End-of-message ids: the tokenizer's eos plus the model's generation-config eos ids."""
    ids = {tokenizer.eos_token_id}
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(eos)
    ids.discard(None)
    return sorted(ids)


def load_base(cfg: ModelConfig, device: torch.device):
    from transformers import AutoModelForCausalLM

    path = model_path(cfg)
    dtype = resolve_dtype(cfg.dtype, device)
    gguf = gguf_file(path)
    if gguf is not None:
        from transformers import GgufConfig

        # Dequantized explicitly: for the architectures it can, transformers keeps the weights packed in its own
        # GGUF layers when the `kernels` package is installed, and neither LoRA nor the fast engine reads those.
        source, where = str(gguf.parent), {"gguf_file": gguf.name, "quantization_config": GgufConfig(dequantize=True)}
    else:
        source, where = path, {"use_safetensors": True}
    try:
        with gguf_read_once() if gguf is not None else contextlib.nullcontext():  # config and weights: one parse
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtype, trust_remote_code=cfg.trust_remote_code,
                attn_implementation=cfg.attn_implementation, **where,
            )
    except (OSError, ValueError) as e:
        raise ModelError(
            f"Cannot load model `{path}`: {e}\nGive a local folder with safetensors weights, a .gguf file or a "
            "reachable Hub id (`--set model.name_or_path=...`)."
        ) from e
    if gguf is not None:
        model.name_or_path = str(gguf)  # what a saved adapter names as its base: the file, not its folder
    return model.to(device)


def make_trainable(model, cfg: ModelConfig):
    """Wrap `model` for training: a fresh LoRA adapter, or every weight trainable."""
    if cfg.finetune == "full":
        model.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    targets = cfg.lora_targets if cfg.lora_targets == "all-linear" else [t.strip() for t in cfg.lora_targets.split(",")]
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM", bias="none")
    return get_peft_model(model, lora)


def base_model(model):
    """The transformers model under a PEFT wrapper (or the model itself when it is not wrapped)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def compile_layers(model, cfg: ModelConfig, device: torch.device, *, static_sampler: bool) -> bool:
    """Compile every decoder layer in place (`nn.Module.compile`: parameter names and checkpoints unchanged).

    The layers share one code object, so one compilation serves them all; shapes are left to torch.compile's
    automatic dynamism (one recompile once a second sequence length shows up). Returns whether it compiled.

    `auto` compiles on a GPU when the sampler is the static engine (`static_sampler`), which reads the weights
    with its own forward: the portable sampler runs these layers with a growing KV cache, a new shape every
    token, which compiled layers would answer with recompilations."""
    if cfg.compile == "off" or (cfg.compile == "auto" and not (device.type == "cuda" and static_sampler)):
        return False
    base = base_model(model)
    layers = getattr(base.get_decoder(), "layers", None)
    if layers is None:
        raise ModelError(f"model.compile={cfg.compile}: `{type(base).__name__}` has no decoder `layers` to compile; "
                         "set model.compile=off.")
    for layer in layers:
        layer.compile()
    return True


def enable_gradient_checkpointing(model) -> None:
    """Recompute each layer's activations in the backward pass. Non-reentrant: the frozen embeddings' output
    needs no grad for the recomputation to backpropagate."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def save_policy(model, out_dir: Path, cfg: ModelConfig) -> None:
    """The trained weights in a loadable form: a PEFT adapter folder, or full weights as safetensors."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.finetune == "lora":
        with warnings.catch_warnings():
            # PEFT looks for a config.json beside the base to see whether its vocabulary was resized; a GGUF file
            # has none, and talktosolve never resizes a vocabulary.
            warnings.filterwarnings("ignore", message="Could not find a config file")
            model.save_pretrained(out_dir, safe_serialization=True)
    else:
        from safetensors.torch import save_file

        state = {n: t.contiguous().cpu() for n, t in model.state_dict().items()}
        # Tied embeddings share storage; safetensors refuses aliases, and from-state loading re-ties them.
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(out_dir / FULL_WEIGHTS), metadata={"format": "pt"})
        base = gguf_file(model_path(cfg)) or cfg.name_or_path
        (out_dir / "talktosolve_full.json").write_text(json.dumps({"base": str(base)}) + "\n")


def load_policy_weights(model, weights_dir: Path, cfg: ModelConfig):
    """Apply trained weights from `save_policy` onto a freshly loaded base; returns the model to use."""
    weights_dir = Path(weights_dir)
    if not weights_dir.exists():
        raise ModelError(f"No trained weights at `{weights_dir}`.")
    if (weights_dir / "adapter_config.json").exists():
        from peft import PeftModel

        if not (weights_dir / "adapter_model.safetensors").exists():
            raise ModelError(f"`{weights_dir}` has no adapter_model.safetensors; talktosolve loads adapters only as "
                             "safetensors (pickled .bin files can run code).")

        try:
            return PeftModel.from_pretrained(model, str(weights_dir), is_trainable=False)
        except (RuntimeError, ValueError, KeyError) as e:
            raise ModelError(
                f"The adapter at `{weights_dir}` does not fit the base model `{cfg.name_or_path}`: {e}\n"
                "Evaluate it with the base it was trained on (see its run folder's config.json)."
            ) from e
    if (weights_dir / FULL_WEIGHTS).exists():
        from safetensors.torch import load_file

        state = load_file(str(weights_dir / FULL_WEIGHTS), device=str(next(model.parameters()).device))
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as e:
            raise ModelError(f"The weights at `{weights_dir}` do not fit the base model: {e}") from e
        missing = [m for m in missing if m != "lm_head.weight"]
        if missing or unexpected:
            raise ModelError(
                f"The weights at `{weights_dir}` do not fit the base model `{cfg.name_or_path}` "
                f"(missing {missing[:3]}, unexpected {unexpected[:3]})."
            )
        if getattr(model.config, "tie_word_embeddings", False):
            model.tie_weights()
        return model
    raise ModelError(f"`{weights_dir}` holds neither a PEFT adapter nor {FULL_WEIGHTS}.")


def trained_weights(weights: str | Path, role: str | None) -> Path:
    """The folder of trained weights that plays `role` from `weights`: a run folder's `final/` (a run with
    per-role adapters keeps one per seat, `final/{seat}/`), or an adapter or weights folder itself."""
    path = Path(weights)
    if (path / "final").exists():
        path = path / "final"
    if not path.is_dir() or _holds_weights(path):
        return path
    roles = sorted(d.name for d in path.iterdir() if d.is_dir() and _holds_weights(d))
    if roles and role not in roles:
        which = f"none for seat `{role}`" if role else "say which seat's weights to play"
        raise ModelError(f"`{path}` holds per-role weights for seats {', '.join(roles)}; {which}.")
    return path / role if roles else path


def _holds_weights(folder: Path) -> bool:
    return (folder / "adapter_config.json").exists() or (folder / FULL_WEIGHTS).exists()


def weights_key(path: str | None, role: str | None = None) -> str | None:
    """A player's identity: the base (None), or the config key of the run whose weights it is (with the role it
    plays, when given, for a run with per-role weights), else the weights folder's resolved path; so a moved
    folder of the same run is the same player."""
    if path is None:
        return None
    done = Path(path).expanduser() / "done.json"
    if not done.exists():
        return str(Path(path).expanduser().resolve())
    record = read_json(done)
    return f"{record['key']} {role}" if "roles" in record and role is not None else record["key"]


def adapter_shape(weights: Path) -> tuple | None:
    """What a slot holds: rank, alpha and target modules of a LoRA adapter folder; None for other weights."""
    config = Path(weights) / "adapter_config.json"
    if not config.is_file():
        return None
    c = read_json(config)
    targets = c.get("target_modules")
    return c.get("r"), c.get("lora_alpha"), tuple(sorted(targets)) if isinstance(targets, list) else targets


def load_player_model(cfg: Config, weights: str | Path | None, device: torch.device, role: str | None = None):
    """A model for evaluation: the base, or the base with trained weights from a run folder (its weights for
    seat `role`, when it trained one set per seat) or an adapter folder."""
    model = load_base(cfg.model, device)
    if weights is not None:
        model = load_policy_weights(model, trained_weights(weights, role), cfg.model)
    model.eval()
    return model
