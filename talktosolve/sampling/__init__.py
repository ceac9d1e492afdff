"""Sampling chats: the turn-by-turn rollout, the engines and their kernels, shared prefixes."""
