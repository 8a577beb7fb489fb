"""`python -m maestro_graph.cli`: the `maestro` command without its console script."""

from . import main

main()
