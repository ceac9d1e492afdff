"""Learning from scored chats: the GRPO update, packing rows for it, informative groups, data parallelism."""
