"""Every policy the project ships declares the policy protocol (name, stochastic, distribution), so the graph and
the trainers read it directly rather than guessing with getattr."""

from __future__ import annotations

from maestro_graph.policy import SHIPPED_CHECKPOINT, OraclePolicy, Policy, PolicyCatalog, make_policy
from maestro_graph.policy.lm.engines import OpenAILM, ScoringBackend


def test_every_policy_declares_the_protocol():
    shipped = str(SHIPPED_CHECKPOINT)
    policies = [make_policy(name) for name in ("rules", "random", "neural", f"neural:{shipped}+{shipped}",
                                               "fixed:zxing@@barcode-reading", "lm:transformers#choice",
                                               "lm:openai:http://127.0.0.1:9/v1|x")]
    policies.append(OraclePolicy(lambda _: False))
    for policy in policies:
        assert isinstance(policy, Policy), policy
        assert isinstance(policy.stochastic, bool)
    assert [p.name for p in policies if p.stochastic] == ["random"]
    assert PolicyCatalog.open().get("rules").stochastic is False


def test_scoring_backends_are_declared():
    """The `choice` constraint scores every action with a backend that can score; an endpoint cannot."""
    local = make_policy("lm:transformers#choice").backend
    remote = make_policy("lm:openai:http://127.0.0.1:9/v1|x").backend
    assert isinstance(local, ScoringBackend) and not isinstance(remote, ScoringBackend)
    assert isinstance(remote, OpenAILM)
