"""The packaged skills: one Agent Skills folder each (`SKILL.md` and its code), scanned from disk by
`maestro_graph.registry.skills`, never imported by name. This file only makes the folder the package data
`maestro_graph.skills` that the build maps it to (setup.py)."""
