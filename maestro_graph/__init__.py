"""Maestro-Graph: a learned policy orchestrating frozen expert models and a two-tier skill library on LangGraph.

Importing the package builds nothing and loads no model: see `maestro_graph.episode.graph.build_graph` and
`maestro_graph.registry.Registry.load`.
"""

__version__ = "0.1.0"
