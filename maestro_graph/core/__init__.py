"""Foundation with no Maestro dependencies beyond the skill API: config dataclasses and the one source of each default,
task files, question text, cancellation, bounded memos, budgets shared across threads (the decode memory), JSONL
reading."""
