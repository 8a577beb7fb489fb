"""Maestro as a part of other agents: the example agent that embeds it (as a subgraph, a RemoteGraph or a tool),
and the Maestro graph as the Agent Server serves it (`served_maestro`, which the top-level `graphs/` modules that
`langgraph.json` names compile). Importing this package builds nothing."""

from .agent import (
                    AgentContext,
                    AgentInput,
                    AgentOutput,
                    AgentState,
                    AskMaestro,
                    build_agent,
                    maestro_tool,
                    remote_agent,
)
from .served import served_maestro

__all__ = ["AgentContext", "AgentInput", "AgentOutput", "AgentState", "AskMaestro", "build_agent", "maestro_tool",
           "remote_agent", "served_maestro"]
