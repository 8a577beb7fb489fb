"""Which policies a run may name, and the one place that builds them from a name.

A policy name is a small program: `neural:PATH` reads a file, `lm:openai:URL|MODEL` makes the process connect to a
URL, `lm:FILE.yaml` parses a file. That is the operator's to decide, never a client's. So every served surface
(HTTP, LangServe, the Agent Server graphs, the tool) resolves a request's policy through a *restricted* catalog:
a fixed set of names the operator offers, each mapped to the spec it stands for (`fast=fixed:rapidocr@@chart-qa`,
`vlm=lm:openai:http://10.0.0.5:8000/v1|qwen`). A name outside it is refused with the list of offered names and
nothing else, so a refusal says nothing about the server's files or network. In-process callers (the CLI,
evaluation, tests) are the operator and get an *open* catalog, in which any `make_policy` name resolves.

Built policies are kept for reuse (a checkpoint loads once): one per offered name in a restricted catalog, and at
most `OPEN_CACHE` in an open one, least recently used first out, so no stream of names grows memory without bound.
"""

from __future__ import annotations

import difflib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..core.environment import POLICIES, POLICY
from ..errors import ConfigError
from .base import Policy
from .shipped import load_neural
from .simple import FixedPolicy, RandomPolicy, RulesPolicy

if TYPE_CHECKING:
    from ..registry.outcomes import PairOutcomes

__all__ = ["DEFAULT_POLICY", "PolicyCatalog", "PolicyNotOffered", "SERVED_POLICIES", "OPEN_CACHE",
           "POLICY_NAMES", "TRAINED_POLICIES", "make_policy"]

DEFAULT_POLICY = "neural"
"""The one default of every door (`maestro ask`, `predict`, `serve`, the graph, Studio): the shipped checkpoint,
trained by the project's own `maestro train` (the point of the product; its figures: docs/results.md, "The shipped
neural router"). Every door can still select `rules` (the keyword baseline) or any other policy by name."""
SERVED_POLICIES = (DEFAULT_POLICY, "rules")
"""What a served surface offers when the operator says nothing: the shipped trained policy and the keyword rules."""
OPEN_CACHE = 16
"""Most policies an open catalog keeps built at once."""

TRAINED_POLICIES = ("best-single", "knn", "classifier")
POLICY_NAMES = ("neural", "neural:CHECKPOINT", "neural:CHECKPOINT+CHECKPOINT...", "rules", "random",
                "fixed:MODEL@@SKILL", *TRAINED_POLICIES, "oracle", "lm:shipped", "lm:transformers",
                "lm:openai:BASE_URL|MODEL", "lm:FILE.yaml")


def make_policy(name: str, *, outcomes: PairOutcomes | None = None) -> Policy:
    """A policy by name. Trained routers need the pair outcomes of a training file; `oracle` is refused here
    because it needs a per-task judge (see OraclePolicy)."""
    if name == "neural" or name.startswith("neural:"):
        return load_neural(name)
    if name == "rules":
        return RulesPolicy()
    if name == "random":
        return RandomPolicy()
    if name.startswith("fixed:"):
        try:
            return FixedPolicy(name.removeprefix("fixed:"))
        except ValueError as exc:
            raise ConfigError(f"{exc}; write fixed:MODEL@@SKILL, e.g. fixed:rapidocr@@chart-qa",
                              field="policy") from exc
    if name in TRAINED_POLICIES:
        if outcomes is None:
            raise ConfigError(f"policy {name!r} is trained on a task file: pass --train-tasks FILE", field="policy")
        from .routers import BestSinglePolicy, ClassifierPolicy, KnnPolicy

        return {"best-single": BestSinglePolicy, "knn": KnnPolicy, "classifier": ClassifierPolicy}[name](outcomes)
    if name.startswith("lm:"):  # the LM router (policy/lm): its own name grammar, see make_lm_policy
        from .lm import make_lm_policy

        return make_lm_policy(name)
    if name == "oracle":
        raise ConfigError("the oracle policy needs the answer key: use it with `maestro predict` or `maestro eval`",
                          field="policy")
    close = difflib.get_close_matches(name, ["neural", "rules", "random", "oracle", "fixed:", "lm:", *TRAINED_POLICIES],
                                      n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown policy {name!r}; valid: {', '.join(POLICY_NAMES)}.{hint}", field="policy")


class PolicyNotOffered(ConfigError):
    """A run named a policy the operator does not offer. The message lists the offered names only."""

    def __init__(self, name: str, offered: Iterable[str]):
        self.offered = tuple(offered)
        shown = name if len(name) <= 60 else name[:57] + "..."
        super().__init__(f"policy {shown!r} is not offered here; choose one of: {', '.join(self.offered)}",
                         field="policy")


class PolicyCatalog:
    """Names a run may pick -> the policy each stands for. `entries=None` makes an open catalog (operator code)."""

    def __init__(self, entries: Mapping[str, str] | None = None, *, default: str | None = None):
        self._entries = dict(entries) if entries is not None else None
        if self._entries is not None and not self._entries:
            raise ConfigError("a restricted policy catalog needs at least one name", field="policy")
        self.default = default or (next(iter(self._entries)) if self._entries else DEFAULT_POLICY)
        if self._entries is not None and self.default not in self._entries:
            raise ConfigError(f"the default policy {self.default!r} is not among the offered names "
                              f"({', '.join(self._entries)})", field="policy")
        self._built: OrderedDict[str, Policy] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, default: str | None = None) -> PolicyCatalog:
        """Every `make_policy` name: for the operator's own code, never for what a client sends."""
        return cls(None, default=default)

    @classmethod
    def parse(cls, items: Iterable[str], *, default: str | None = None) -> PolicyCatalog:
        """From `NAME` or `NAME=SPEC` items (`NAME` alone stands for the policy of that name). The default is
        offered even when not listed. Every spec is checked now, so a typo fails at start, not at a request."""
        entries: dict[str, str] = {}
        for item in items:
            name, sep, spec = (part.strip() for part in item.partition("="))
            if not name or (sep and not spec):
                raise ConfigError(f"offered policy {item!r}: write NAME or NAME=SPEC", field="policy")
            entries[name] = spec or name
        if default is not None and default not in entries:
            entries[default] = default
        catalog = cls(entries, default=default)
        for name in entries:
            catalog.get(name)
        return catalog

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PolicyCatalog:
        """The Agent Server graphs' catalog: `MAESTRO_POLICIES` (default: neural, rules), `MAESTRO_POLICY` (default:
        the first offered, so `DEFAULT_POLICY` unless the operator offers otherwise)."""
        items = [i for i in POLICIES.read(environ).split(",") if i.strip()]
        return cls.parse(items, default=POLICY.read(environ) or None)

    @property
    def restricted(self) -> bool:
        return self._entries is not None

    @property
    def names(self) -> tuple[str, ...]:
        """The offered names (empty for an open catalog, where any name goes)."""
        return tuple(self._entries or ())

    def check(self, name: str) -> None:
        """Refuse a name the catalog does not offer (PolicyNotOffered); builds nothing."""
        if self._entries is not None and name not in self._entries:
            raise PolicyNotOffered(name, self._entries)

    def get(self, name: str | None = None) -> Policy:
        """The policy of a name (None: the default), built on first use and kept."""
        name = self.default if name is None else name
        self.check(name)
        with self._lock:
            if name in self._built:
                self._built.move_to_end(name)
                return self._built[name]
        policy = make_policy(self._entries[name] if self._entries is not None else name)
        with self._lock:
            self._built[name] = policy
            while self._entries is None and len(self._built) > OPEN_CACHE:
                self._built.popitem(last=False)
        return policy
