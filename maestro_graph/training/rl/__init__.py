"""Reinforcement learning of the orchestration policy: rollouts through the graph, rewards, GRPO."""
