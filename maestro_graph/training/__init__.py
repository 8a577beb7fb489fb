"""Training and measuring: policies compared on task files, and the trainers (GRPO, TRL, export)."""
