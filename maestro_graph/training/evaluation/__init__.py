"""Evaluation: multi-policy evaluation runs, reports and plots (pair outcomes on training files:
maestro_graph.registry.outcomes)."""
