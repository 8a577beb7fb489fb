"""The package layout pyproject.toml cannot say alone: the repository's top-level `skills/` (Agent Skills folders)
and `examples/` (images) are data the package ships, mapped into it as `maestro_graph.skills` and
`maestro_graph.examples`, so a wheel carries them and an editable install finds them where they are
(`maestro_graph.core.bundled` reads both through the import system). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

BUNDLED = {"maestro_graph.skills": "skills", "maestro_graph.examples": "examples"}

setup(packages=[*find_packages(include=["maestro_graph", "maestro_graph.*"]), *BUNDLED], package_dir=BUNDLED)
