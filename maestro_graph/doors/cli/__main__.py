"""`python -m maestro_graph.doors.cli`: the `maestro` command without its console script."""

from . import main

main()
