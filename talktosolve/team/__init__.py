"""The team at work: each seat's view of the chat, talk metrics, the reward, message influence."""
