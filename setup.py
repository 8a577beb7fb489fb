# Kept beside pyproject.toml: it maps skills/ and examples/ into the package with sub-packages found at build time.
"""The package layout pyproject.toml cannot say alone: the repository's top-level `skills/` (Agent Skills folders)
and `examples/` (images) are data the package ships, mapped into it as `maestro_graph.skills` and
`maestro_graph.examples`, so a wheel carries them and an editable install finds them where they are
(`maestro_graph.core.bundled` reads both through the import system). Every folder is listed as a package, data
folders included, so setuptools has no importable folder left out to warn about; which files a data folder ships
is pyproject.toml's `package-data`."""

from setuptools import find_namespace_packages, setup

BUNDLED = {"maestro_graph.skills": "skills", "maestro_graph.examples": "examples"}

DATA_PACKAGES = [f"{name}.{sub}" for name, folder in BUNDLED.items() for sub in find_namespace_packages(where=folder)]

setup(packages=[*find_namespace_packages(include=["maestro_graph", "maestro_graph.*"]), *BUNDLED, *DATA_PACKAGES],
      package_dir=BUNDLED)
