"""Leave-out training: the registry's families (a model with the skills only it can run, a skill with the models only
it uses) and hiding them whole per GRPO group, next to the per-item registry dropout."""

from __future__ import annotations

import numpy as np
import pytest

from maestro_graph.errors import ConfigError
from maestro_graph.training.rl.augment import families, sample_dropout
from maestro_graph.training.rl.config import NeuralGRPOConfig


def test_the_barcode_readers_and_their_skill_are_one_family_and_each_family_is_listed_once(registry):
    found = families(registry)
    assert ({"zxing", "opencv-barcode"}, {"barcode-reading"}) in found
    assert ({"opencv-vision"}, {"counting"}) in found
    assert len({(frozenset(m), frozenset(s)) for m, s in found}) == len(found)


def test_a_hidden_family_leaves_the_registry_whole(registry):
    hidden = 0
    for seed in range(40):
        models, skills = sample_dropout(registry, np.random.default_rng(seed), 0.0, 0.3)
        view = registry.without(models=models, skills=skills)
        assert view.pairs(), "at least one pair always remains"
        if "barcode-reading" in skills:
            hidden += 1
            assert not {p.id for p in view.pairs()} & {"zxing@@barcode-reading", "opencv-barcode@@barcode-reading"}
    assert 3 <= hidden <= 25, hidden


def test_no_family_dropout_keeps_the_random_stream_of_earlier_runs(registry):
    """family_dropout 0 (the default) draws nothing more: a run resumed or repeated from before it samples the
    same groups. A skill no model of the registry runs (visual-qa without a vision-chat model) takes no draw, so the
    stream is the one of the registry before that skill existed."""
    runnable = [s for s in registry.tier1 if s.name in {p.skill.name for p in registry.pairs()}]
    assert len(runnable) < len(registry.tier1)  # the packaged registry has a skill it cannot run
    for seed in range(5):
        old, new = np.random.default_rng(seed), np.random.default_rng(seed)
        draws = old.random(len(registry.models) + len(runnable))
        models = {m for m, d in zip(registry.models, draws) if d < 0.15}
        skills = {s.name for s, d in zip(runnable, draws[len(registry.models):]) if d < 0.15}
        got = sample_dropout(registry, new, 0.15)
        if registry.without(models=models, skills=skills).pairs():
            assert got == (models, skills)
        assert new.random() == old.random()


def test_family_dropout_is_checked():
    assert NeuralGRPOConfig().family_dropout == 0.0
    with pytest.raises(ConfigError) as caught:
        NeuralGRPOConfig(family_dropout=1.0)
    assert caught.value.field == "family_dropout"
