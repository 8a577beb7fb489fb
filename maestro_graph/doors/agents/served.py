"""The Maestro graph under the operator's rules, as the Agent Server's graphs serve it to untrusted clients.

A run's context may name only an offered policy (`MAESTRO_POLICIES`, default `neural,rules`; `MAESTRO_POLICY` the
default, else the first offered), and images come only as data URLs, from allow-listed hosts
(`MAESTRO_IMAGE_HOSTS`) or from allowed directories (`MAESTRO_IMAGE_DIRS`). No checkpointer is compiled in: the
server brings its own. The registry comes from `MAESTRO_REGISTRY` (a YAML path) or the packaged default.
"""

from __future__ import annotations

from typing import Any

from ...core.environment import REGISTRY
from ...episode.graph import build_graph
from ...images.sources import ImageSources
from ...policy import PolicyCatalog
from ...registry import Registry

__all__ = ["served_maestro"]


def served_maestro() -> Any:
    """Compile the served Maestro graph from the environment (loads the registry and builds the offered policies)."""
    return build_graph(Registry.load(REGISTRY.read() or None), policies=PolicyCatalog.from_env(),
                       image_sources=ImageSources.from_env())
