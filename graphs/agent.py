"""The `maestro-agent` graph of `langgraph.json`: the example agent of `maestro_graph.doors.agents` with the served
Maestro graph as its subgraph node, under the same operator rules as the `maestro` graph."""

from maestro_graph.doors.agents import build_agent, served_maestro

graph = build_agent(served_maestro())
