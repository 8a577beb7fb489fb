"""Routers trained by supervision on which pair was right for training items (the imitation alternatives to RL):
`best-single`, `knn` and `classifier`. They only rank pairs; the answering loop is RankingPolicy's."""

from __future__ import annotations

import numpy as np
import torch

from ..features.state import nearest, question_features, similarity_mean, unit_rows
from ..registry.outcomes import PairOutcomes
from ..registry.pair import Pair
from .base import EpisodeView
from .simple import RankingPolicy

__all__ = ["BestSinglePolicy", "KnnPolicy", "ClassifierPolicy"]


def _lookup(train_pairs: list[str], values: np.ndarray, pairs: list[Pair]) -> list[float]:
    """Scores for the pairs of the current action space; a pair unseen in training scores below every seen one."""
    index = {p: i for i, p in enumerate(train_pairs)}
    return [float(values[index[p.id]]) if p.id in index else -1.0 for p in pairs]


class BestSinglePolicy(RankingPolicy):
    """The single pair with the best macro accuracy on the training file; then the next best ones on failure."""

    name = "best-single"

    def __init__(self, outcomes: PairOutcomes):
        self.pairs = outcomes.pairs
        self.macro = outcomes.macro_accuracy()

    def pair_scores(self, view: EpisodeView, pairs: list[Pair]) -> list[float]:
        return _lookup(self.pairs, self.macro, pairs)


class KnnPolicy(RankingPolicy):
    """Mean success of each pair over the k training questions nearest to this one (sentence embeddings plus
    image descriptors, cosine similarity)."""

    name = "knn"

    def __init__(self, outcomes: PairOutcomes, k: int = 10):
        self.pairs = outcomes.pairs
        self.k = min(k, len(outcomes.task_ids))
        self.train = unit_rows(question_features(outcomes.questions, outcomes.images, outcomes.choices))
        self.scores = outcomes.scores
        self.prior = outcomes.macro_accuracy()

    def pair_scores(self, view: EpisodeView, pairs: list[Pair]) -> list[float]:
        q = question_features([view.question], [view.images], [view.choices])[0]
        index, sims = nearest(self.train, q, self.k)
        values = similarity_mean(self.scores[index], sims) + 1e-3 * self.prior
        return _lookup(self.pairs, values, pairs)


class ClassifierPolicy(RankingPolicy):
    """A multi-label logistic model predicting, from the question features, the probability that each pair is
    right; trained with binary cross-entropy on the training file's pair outcomes."""

    name = "classifier"

    def __init__(self, outcomes: PairOutcomes, *, epochs: int = 300, lr: float = 0.05, weight_decay: float = 1e-3,
                 seed: int = 0):
        self.pairs = outcomes.pairs
        x = torch.from_numpy(question_features(outcomes.questions, outcomes.images, outcomes.choices))
        y = torch.from_numpy(outcomes.scores.astype(np.float32))
        generator = torch.Generator().manual_seed(seed)
        self.model = torch.nn.Linear(x.shape[1], y.shape[1])
        torch.nn.init.normal_(self.model.weight, std=0.01, generator=generator)
        torch.nn.init.zeros_(self.model.bias)
        optim = torch.optim.Adam(self.model.parameters(), lr=lr, weight_decay=weight_decay)
        for _ in range(epochs):
            optim.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self.model(x), y)
            loss.backward()
            optim.step()
        self.final_loss = float(loss.detach())
        self.model.eval()

    def pair_scores(self, view: EpisodeView, pairs: list[Pair]) -> list[float]:
        x = torch.from_numpy(question_features([view.question], [view.images], [view.choices]))
        with torch.no_grad():
            probs = torch.sigmoid(self.model(x))[0].numpy()
        return _lookup(self.pairs, probs, pairs)
