"""The neural orchestration policy: hierarchical (skill head, then model head, and a stop head that answers with
one of the candidates), scoring each candidate from its card text, so a card never seen in training is still scored.

Every action's probability is built as one differentiable tensor, so the same forward pass serves greedy serving,
sampling in rollouts, and the log-probabilities and entropy of GRPO:

    P(invoke m@@k) = P(continue) * P(k) * P(m | k)        P(answer c) = P(stop) * P(c)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..answer_form import CONTRADICTS_FORM, FORM_DIM, HAS_FORM, candidate_form, expected_form
from ..embeddings import EMBED_DIM, embed
from ..errors import ConfigError
from ..features import QUESTION_DIM, question_features
from ..registry import Pair
from ..scoring import normalize_text
from ..types import Answer, Invoke
from .base import ActionSpace, Distribution, EpisodeView, best_candidate

__all__ = ["NeuralConfig", "NeuralPolicy", "Scored", "HISTORY_DIM", "CHECKPOINT_FORMAT"]

HISTORY_DIM = 8
CARD_EXTRA = 4  # per-card history features plus the question-card cosine
_SUPPORT_DIM = 5  # support, confidence and recency columns that come before the form columns
CAND_DIM = _SUPPORT_DIM + FORM_DIM + 1
CHECKPOINT_FORMAT = "maestro-neural-1"


@dataclass
class NeuralConfig:
    hidden: int = 128
    """Width of the state and card encodings."""
    seed: int = 0


@dataclass
class Scored:
    """One forward pass: the flat action list and its probabilities (a differentiable tensor)."""

    actions: tuple
    probs: torch.Tensor

    def distribution(self) -> Distribution:
        p = self.probs.detach().double().numpy()
        return Distribution(self.actions, p / p.sum())


class _Net(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.state = nn.Sequential(nn.Linear(QUESTION_DIM + HISTORY_DIM, hidden), nn.Tanh())
        self.skill = nn.Sequential(nn.Linear(EMBED_DIM + CARD_EXTRA, hidden), nn.Tanh())
        self.model = nn.Sequential(nn.Linear(EMBED_DIM + CARD_EXTRA + 1, hidden), nn.Tanh())
        self.model_query = nn.Linear(2 * hidden, hidden)
        self.skill_cos = nn.Parameter(torch.tensor(4.0))  # prior: the question resembles the skill card
        self.form_prior = nn.Parameter(torch.tensor(3.0))  # prior: the answer has the form the question asks for
        self.stop = nn.Sequential(nn.Linear(hidden + CAND_DIM, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.cand = nn.Sequential(nn.Linear(3 * hidden + CAND_DIM, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.scale = 1.0 / math.sqrt(hidden)


def _history(view: EpisodeView) -> np.ndarray:
    answered = [s for s in view.steps if not s.error and s.answer is not None]
    votes: dict[str, int] = {}
    for s in answered:
        votes[normalize_text(s.answer)] = votes.get(normalize_text(s.answer), 0) + 1
    last = view.steps[-1] if view.steps else None
    return np.asarray([
        view.turn / max(1, view.max_turns),
        min(1.0, view.cost / view.max_cost) if math.isfinite(view.max_cost) and view.max_cost > 0 else 0.0,
        len(votes) / 4,
        max(votes.values()) / max(1, len(answered)) if votes else 0.0,
        max((s.confidence for s in answered), default=0.0),
        float(any(s.error for s in view.steps)),
        float(bool(last and last.error)),
        float(bool(view.choices)),
    ], dtype=np.float32)


@dataclass(frozen=True)
class _ModelCard:
    name: str
    text: str
    per_call: float
    pair: str


def _model_card(pair: Pair) -> _ModelCard:
    return _ModelCard(pair.model.name, pair.model.description, pair.model.cost.per_call, pair.id)


class NeuralPolicy:
    """Small and fast on CPU: one state encoding, dot products with card encodings."""

    name = "neural"

    def __init__(self, config: NeuralConfig | None = None):
        self.config = config or NeuralConfig()
        torch.manual_seed(self.config.seed)
        self.net = _Net(self.config.hidden)
        self.card_text: dict[str, str] = {}
        """Overrides of card descriptions (training paraphrases them); keyed by skill or model name."""

    # -- features --------------------------------------------------------------------------------------------------
    def _cards(self, items: list[tuple[str, str]]) -> np.ndarray:
        """Embeddings of card texts (a training paraphrase replaces the description when one is set)."""
        return embed([self.card_text.get(name, text) for name, text in items])

    def score(self, view: EpisodeView, space: ActionSpace) -> Scored:
        """Probabilities of every valid action now. Pairs already called are masked (a repeat returns the same)."""
        pairs = [p for p in space.pairs if not view.called(p.id)]
        candidates = [a for a in space.answers if a.text is not None]
        q = question_features([view.question], [view.images], [view.choices])[0]
        q_emb = q[:EMBED_DIM]
        h = self.net.state(torch.from_numpy(np.concatenate([q, _history(view)])))
        cand_feats = self._candidate_features(view, candidates)
        summary = cand_feats.max(0).values if candidates else torch.zeros(CAND_DIM)
        if not pairs:
            p_stop = torch.ones(())
        elif not candidates:
            p_stop = torch.zeros(())  # nothing to answer yet: keep looking while pairs remain
        else:
            p_stop = torch.sigmoid(self.net.stop(torch.cat([h, summary]))[0])
        parts: list[torch.Tensor] = []
        actions: list = []
        if pairs:
            skills = list({p.skill.name: p.skill for p in pairs}.values())
            skill_pos = {k.name: i for i, k in enumerate(skills)}
            s_keys, s_cos = self._skill_keys(view, [(k.name, k.description) for k in skills], q_emb)
            p_skill = torch.softmax(s_keys @ h * self.net.scale + self.net.skill_cos * s_cos, dim=0)
            idx = torch.tensor([skill_pos[p.skill.name] for p in pairs])
            m_keys = self._model_keys(view, [_model_card(p) for p in pairs], q_emb)
            queries = self.net.model_query(torch.cat([h.expand(len(skills), -1), s_keys], dim=1))
            logits = (m_keys * queries[idx]).sum(1) * self.net.scale
            weights = torch.exp(logits - logits.max())
            # a skill whose models all sit ~90 nats below the best underflows to 0: its models get 0, not 0/0 = NaN
            group = torch.zeros(len(skills)).index_add(0, idx, weights).clamp_min(torch.finfo(torch.float32).tiny)
            parts.append((1 - p_stop) * p_skill[idx] * weights / group[idx])
            actions += [Invoke(p.model.name, p.skill.name) for p in pairs]
        if candidates:
            skill_cards, model_cards = zip(*(self._producer(view, space, c) for c in candidates))
            producers = torch.cat([self._skill_keys(view, list(skill_cards), q_emb)[0],
                                   self._model_keys(view, list(model_cards), q_emb)], dim=1)
            logits = self.net.cand(torch.cat([h.expand(len(candidates), -1), producers, cand_feats], dim=1))[:, 0]
            logits = logits + self.net.form_prior * (cand_feats[:, _SUPPORT_DIM + HAS_FORM]
                                               - cand_feats[:, _SUPPORT_DIM + CONTRADICTS_FORM])
            parts.append(p_stop * torch.softmax(logits, dim=0))
            actions += candidates
        elif not pairs:
            parts.append(torch.ones(1))
            actions.append(Answer(None))
        probs = torch.cat(parts).clamp_min(1e-9)
        return Scored(tuple(actions), probs / probs.sum())

    def _skill_keys(self, view: EpisodeView, skills: list[tuple[str, str]], q_emb: np.ndarray
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encodings of skill cards with their history in this episode, and each card's cosine to the question."""
        emb = self._cards(skills)
        cos = emb @ q_emb
        extra = np.asarray([[sum(s.skill == name for s in view.steps) / 2,
                             float(any(s.skill == name and s.answer for s in view.steps)),
                             float(any(s.skill == name and s.error for s in view.steps))] for name, _ in skills],
                           dtype=np.float32).reshape(len(skills), 3)
        feats = np.hstack([emb, extra, cos[:, None]]).astype(np.float32)
        return self.net.skill(torch.from_numpy(feats)), torch.from_numpy(cos.astype(np.float32))

    def _model_keys(self, view: EpisodeView, cards: list[_ModelCard], q_emb: np.ndarray) -> torch.Tensor:
        """Encodings of model cards (one per pair) with their history in this episode."""
        emb = self._cards([(c.name, c.text) for c in cards])
        extra = np.asarray([[sum(s.model == c.name for s in view.steps) / 2,
                             float(any(s.model == c.name and s.error for s in view.steps)),
                             math.log1p(c.per_call), 0.0, float(view.called(c.pair))] for c in cards],
                           dtype=np.float32)
        extra[:, 3] = emb @ q_emb
        return self.net.model(torch.from_numpy(np.hstack([emb, extra]).astype(np.float32)))

    def _producer(self, view: EpisodeView, space: ActionSpace, candidate: Answer
                  ) -> tuple[tuple[str, str], _ModelCard]:
        """The skill and model cards of the pair that first produced a candidate (names stand in for the cards of a
        pair the registry no longer has)."""
        key = normalize_text(candidate.text or "")
        step = next(s for s in view.steps if s.answer is not None and normalize_text(s.answer) == key)
        pair = next((p for p in space.registry_pairs if p.id == step.pair), None)
        if pair is None:
            return (step.skill, step.skill), _ModelCard(step.model, step.model, 0.0, step.pair)
        return (pair.skill.name, pair.skill.description), _model_card(pair)

    def _candidate_features(self, view: EpisodeView, candidates: list[Answer]) -> torch.Tensor:
        """Support and confidence of each candidate, whether it has the form the question asks for, and whether it is
        the one the vote-then-confidence rule (`best_candidate`) would answer: a default that the policy learns when
        to overrule, and the one it leans on between experts it has never seen."""
        answered = [s for s in view.steps if not s.error and s.answer is not None]
        expected = expected_form(view.question, view.choices)
        consensus = normalize_text(best_candidate(view.steps) or "")
        rows = []
        for c in candidates:
            key = normalize_text(c.text or "")
            support = [s for s in answered if normalize_text(s.answer) == key]
            rows.append([len(support) / max(1, len(answered)), len(support) / 4,
                         max(s.confidence for s in support), float(np.mean([s.confidence for s in support])),
                         float(bool(answered) and normalize_text(answered[-1].answer) == key),
                         *candidate_form(c.text or "", expected, view.choices),
                         float(key == consensus)])
        return torch.tensor(rows, dtype=torch.float32) if rows else torch.zeros((0, CAND_DIM))

    # -- the policy protocol -----------------------------------------------------------------------------------------
    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        with torch.inference_mode():
            return self.score(view, space).distribution()

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"format": CHECKPOINT_FORMAT, "config": asdict(self.config), "embed_dim": EMBED_DIM,
                "question_dim": QUESTION_DIM, "history_dim": HISTORY_DIM, "candidate_dim": CAND_DIM,
                "net": self.net.state_dict()}

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save({**self.state_dict(), **(extra or {})}, tmp)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "NeuralPolicy":
        """Load a checkpoint; a missing, corrupt or mismatched file is a ConfigError naming it."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError("no such policy checkpoint", file=str(path))
        try:
            data = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # torch raises many types for a damaged file
            raise ConfigError(f"corrupt policy checkpoint ({exc.__class__.__name__}: {exc})", file=str(path)) from exc
        if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
            raise ConfigError(f"not a {CHECKPOINT_FORMAT} checkpoint", file=str(path), field="format")
        for key, expected in (("embed_dim", EMBED_DIM), ("question_dim", QUESTION_DIM), ("history_dim", HISTORY_DIM),
                              ("candidate_dim", CAND_DIM)):
            if data.get(key) != expected:
                raise ConfigError(f"feature size {data.get(key)} does not match this version's {expected}",
                                  file=str(path), field=key)
        policy = cls(NeuralConfig(**data["config"]))
        try:
            policy.net.load_state_dict(data["net"])
        except RuntimeError as exc:
            raise ConfigError(f"weights do not fit the network: {exc}", file=str(path), field="net") from exc
        return policy
