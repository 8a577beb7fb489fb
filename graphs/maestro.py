"""The Maestro graph as LangGraph Studio and the Agent Server load it (`langgraph.json`).

No checkpointer is compiled in: the server brings its own. The registry comes from `MAESTRO_REGISTRY` (a YAML path)
or the packaged default; the policy defaults to the rules baseline and a run's context may name another.
"""

import os

from maestro_graph.graph import build_graph
from maestro_graph.registry import Registry

graph = build_graph(Registry.load(os.environ.get("MAESTRO_REGISTRY") or None))
