"""Example images the package ships (`maestro ask` on them, `maestro reliability`'s inputs). This file only makes the
folder the package data `maestro_graph.examples` that the build maps it to (setup.py)."""
