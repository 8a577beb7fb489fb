"""Maestro-Graph: a learned policy orchestrating frozen expert models and a two-tier skill library on LangGraph.

The package by role (docs/ARCHITECTURE.md has the layers, which imports follow, and the path of a question):

- the core, at the top: `episode` (the LangGraph graph: its state, nodes and builder), `registry` (model cards,
  skills, the action space and the skill API skills run through), `policy` (what decides at each turn);
- beneath it, at the top too: `core` (settings, defaults, the environment, question text), `images`, `backends`,
  `features`, `experts` (the built-in expert models), `cache` (expert calls), `batch` (where batch work runs);
- `doors`: `cli` (the `maestro` command), `serve` (the HTTP server), `agents` (Maestro inside other agents and the
  Agent Server's graphs);
- `training`: `evaluation` (policies compared on task files), `rl` (rewards, GRPO, TRL, export);
- `operations`: `reliability` (fault, bad-input and trust suites), `bench` (the benchmark generator).

The top-level modules (`errors`, `types`, `numbers`, `scoring`, `choices`, `answer_forms`, `digests`) are the skill
API's foundation; `checkpoints` holds the shipped weights. Importing the package builds nothing and loads no model:
see `maestro_graph.episode.graph.build_graph` and `maestro_graph.registry.Registry.load`.
"""

__version__ = "0.1.0"
