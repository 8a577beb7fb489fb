"""The doors: how users reach the graph (the `maestro` command, the HTTP server, Maestro inside other agents)."""
