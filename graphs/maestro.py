"""The Maestro graph as LangGraph Studio and the Agent Server load it (`langgraph.json`).

Clients of the Agent Server are not trusted, so the graph is compiled with the operator's rules: a run's context
may name only an offered policy (`MAESTRO_POLICIES`, default `neural,rules`; `MAESTRO_POLICY` the default, else
the first offered), and images come only as data URLs, from allow-listed hosts (`MAESTRO_IMAGE_HOSTS`) or from
allowed directories (`MAESTRO_IMAGE_DIRS`). No checkpointer is compiled in: the server brings its own. The
registry comes from `MAESTRO_REGISTRY` (a YAML path) or the packaged default.
"""

import os

from maestro_graph.graph import build_graph
from maestro_graph.image_sources import ImageSources
from maestro_graph.policy import PolicyCatalog
from maestro_graph.registry import Registry

graph = build_graph(Registry.load(os.environ.get("MAESTRO_REGISTRY") or None), policies=PolicyCatalog.from_env(),
                    image_sources=ImageSources.from_env())
