"""The `maestro` graph of `langgraph.json`: what LangGraph Studio and the Agent Server load (see `served.py` for
the operator's rules it is compiled with)."""

from maestro_graph.graphs.served import served_maestro

graph = served_maestro()
