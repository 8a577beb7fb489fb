"""The `maestro-agent` graph of `langgraph.json`: the example agent of `agent.py` with the served Maestro graph as
its subgraph node, under the same operator rules as the `maestro` graph."""

from maestro_graph.graphs.agent import build_agent
from maestro_graph.graphs.served import served_maestro

graph = build_agent(served_maestro())
