"""The `maestro` graph of `langgraph.json`, what LangGraph Studio and the Agent Server load: the Maestro graph under
the operator's rules (`maestro_graph.doors.agents.served_maestro`: offered policies, image sources and registry from the
environment; no checkpointer compiled in, the server brings its own)."""

from maestro_graph.doors.agents import served_maestro

graph = served_maestro()
