"""The model: loading a base, fine-tuning it (LoRA or full), saving and loading weights, built-in bases."""
