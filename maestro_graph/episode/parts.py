"""The parts the Maestro graph is assembled from (`build_graph`'s arguments, resolved once), which every node is
handed beside its state and runtime: nodes are module-level functions, so each can be called alone in a test with
the parts it needs."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.calibration import ConfidenceModel
from ..images.sources import ImageSources
from ..policy import Policy, PolicyCatalog
from ..registry import Registry
from .context import MaestroContext

__all__ = ["GraphParts"]


@dataclass(frozen=True)
class GraphParts:
    """The registry the skills run in, the default policy and the catalog a run's context may choose another from,
    the confidence model of answers, and the image-source policy of a graph served to clients (None: the operator's
    own graph, which reads any image), under which intake takes a run's images in."""

    registry: Registry
    policy: Policy
    policies: PolicyCatalog
    confidence: ConfidenceModel
    image_sources: ImageSources | None = None

    def policy_for(self, context: MaestroContext) -> Policy:
        """The policy that decides this run: the context's choice from the catalog (a ConfigError when the catalog
        refuses or cannot build it), else the graph's."""
        return self.policy if context.policy is None else self.policies.get(context.policy)
