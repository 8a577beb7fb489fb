"""Maestro as a part of other graphs: the example agent that embeds it (as a subgraph, a RemoteGraph or a tool),
and the graphs `langgraph.json` serves (`maestro_graph/graphs/maestro.py`, `embedded.py`). Importing this package
builds nothing; importing `maestro_graph.graphs.maestro` or `.embedded` builds the served graph."""

from .agent import (AgentContext, AgentInput, AgentOutput, AgentState, AskMaestro, build_agent, maestro_tool,
                    remote_agent)
from .served import served_maestro

__all__ = ["AgentContext", "AgentInput", "AgentOutput", "AgentState", "AskMaestro", "build_agent", "maestro_tool",
           "remote_agent", "served_maestro"]
