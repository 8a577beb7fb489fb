"""The neural orchestration policy: hierarchical (skill head, then model head, and a stop head that answers with
one of the candidates), scoring each candidate from its card text, so a card never seen in training is still scored.

Every action's probability is built as one differentiable tensor, so the same forward pass serves greedy serving,
sampling in rollouts, and the log-probabilities and entropy of GRPO:

    P(invoke m@@k) = P(continue) * P(k) * P(m | k)        P(answer c) = P(stop) * P(c)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import cast

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_bytes
from torch import nn

from ..answer_forms import CONTRADICTS_FORM, FORM_DIM, HAS_FORM, candidate_form, expected_form
from ..errors import ConfigError
from ..features.embeddings import EMBED_DIM, embed
from ..features.state import QUESTION_DIM, question_features
from ..registry.pair import Pair
from ..scoring import normalize_text
from ..types import Answer, Invoke
from .base import ActionSpace, Distribution, EpisodeView, best_candidate

__all__ = ["NeuralConfig", "NeuralPolicy", "Scored", "HISTORY_DIM", "CHECKPOINT_FORMAT", "CHECKPOINT_VERSION",
           "EMBEDDING_MODEL", "read_checkpoint_header", "read_tensor_file",
           "write_tensor_file"]

HISTORY_DIM = 8
CARD_EXTRA = 4  # per-card history features plus the question-card cosine
MODEL_EXTRA = CARD_EXTRA + 3
"""A model row's columns after the card embedding: its history, cost and cosine, whether the pair was called, and
what is known of the pair's accuracy on its family (Pair.accuracy: known or not, the figure)."""
_KNOWN, _ACCURACY = EMBED_DIM + MODEL_EXTRA - 2, EMBED_DIM + MODEL_EXTRA - 1
_SUPPORT_COLUMNS = ("support_share", "support_count", "max_confidence", "mean_confidence", "latest")
_CANDIDATE_COLUMNS = (*_SUPPORT_COLUMNS, *(f"form_{i}" for i in range(FORM_DIM)), "consensus")
"""A candidate's row: its support and confidence, whether it is the latest answer, candidate_form's columns (has
the form the question asks for, contradicts it, ...) and whether it is best_candidate's pick."""
CAND_DIM = len(_CANDIDATE_COLUMNS)
_HAS_FORM = len(_SUPPORT_COLUMNS) + HAS_FORM
_CONTRADICTS_FORM = len(_SUPPORT_COLUMNS) + CONTRADICTS_FORM
CHECKPOINT_FORMAT = "maestro-neural"
CHECKPOINT_VERSION = 2
"""Safetensors weights with a JSON header, so loading a checkpoint never runs code."""
EMBEDDING_MODEL = "all-MiniLM-L6-v2"
"""The sentence encoder of questions and cards (see embeddings.py) whose numbers the weights were trained on."""
HEADER_KEY = "maestro"
"""The one key of a safetensors file's string-to-string metadata; its value is the JSON header."""
_FEATURES = {"embed_dim": EMBED_DIM, "question_dim": QUESTION_DIM, "history_dim": HISTORY_DIM,
             "candidate_dim": CAND_DIM, "model_extra": MODEL_EXTRA}
_HEADER_KEYS = {"format", "version", "config", "features", "embedding", "extra"}


@dataclass
class NeuralConfig:
    hidden: int = 128
    """Width of the state and card encodings."""
    seed: int = 0
    stop_without_answer: bool = False
    """After a call, the policy may stop although no step has produced an answer (the explicit no-answer, which the
    graph turns into a marked guess for choice and yes/no questions) instead of calling on until the budget ends:
    what lets it stop early where no pair fits. False: the checkpoints made before it, which always call on."""


@dataclass
class Scored:
    """One forward pass: the flat action list and its probabilities (a differentiable tensor)."""

    actions: tuple
    probs: torch.Tensor

    def distribution(self) -> Distribution:
        p = self.probs.detach().double().numpy()
        return Distribution(self.actions, p / p.sum())


@dataclass
class _Features:
    """The numbers one decision is scored from (no weights). Skills and models of the callable pairs (pairs already
    called are left out), and the candidate answers with the skill and model cards of the pair that produced each.
    Rows: skill card = [embedding | calls/2, answered, errored | question cosine]; model card = [embedding | calls/2,
    errored, log(1 + cost per call), question cosine, pair called, accuracy known, accuracy (0 when unknown)];
    candidate = _CANDIDATE_COLUMNS."""

    state: torch.Tensor
    """Question features and the episode's history, (QUESTION_DIM + HISTORY_DIM,)."""
    skills: torch.Tensor
    """(skills, EMBED_DIM + CARD_EXTRA)"""
    skill_cos: torch.Tensor
    """(skills,): each skill card's cosine to the question."""
    pair_skill: torch.Tensor
    """(pairs,): the row in `skills` of each pair's skill."""
    models: torch.Tensor
    """(pairs, EMBED_DIM + MODEL_EXTRA)"""
    candidates: torch.Tensor
    """(candidates, CAND_DIM)"""
    producer_skills: torch.Tensor
    producer_models: torch.Tensor
    may_give_up: bool = False
    """Stopping without a candidate is an action (NeuralConfig.stop_without_answer, after the first call)."""


class _Net(nn.Module):
    """P(invoke m@@k) = P(continue) * P(k) * P(m | k) and P(answer c) = P(stop) * P(c), as one tensor: the pairs'
    probabilities, then the candidates' (or the explicit no-answer's 1 when there is neither)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.state = nn.Sequential(nn.Linear(QUESTION_DIM + HISTORY_DIM, hidden), nn.Tanh())
        self.skill = nn.Sequential(nn.Linear(EMBED_DIM + CARD_EXTRA, hidden), nn.Tanh())
        self.model = nn.Sequential(nn.Linear(EMBED_DIM + MODEL_EXTRA, hidden), nn.Tanh())
        self.model_query = nn.Linear(2 * hidden, hidden)
        self.skill_cos = nn.Parameter(torch.tensor(4.0))  # prior: the question resembles the skill card
        self.form_prior = nn.Parameter(torch.tensor(3.0))  # prior: the answer has the form the question asks for
        # priors: among a skill's models, the one measured more accurate on the family; among candidates, the one
        # whose producer is (both 0 where nothing is known, so an unprofiled registry is scored from its cards)
        self.accuracy_prior = nn.Parameter(torch.tensor(4.0))
        self.trust_prior = nn.Parameter(torch.tensor(2.0))
        self.stop = nn.Sequential(nn.Linear(hidden + CAND_DIM + 1, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.cand = nn.Sequential(nn.Linear(3 * hidden + CAND_DIM, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.scale = 1.0 / math.sqrt(hidden)

    def forward(self, f: _Features) -> torch.Tensor:
        h = self.state(f.state)
        n_pairs, n_candidates = len(f.pair_skill), len(f.candidates)
        producer_trust = _known_accuracy(f.producer_models)
        if not n_pairs:
            p_stop = torch.ones(())
        elif not n_candidates and not f.may_give_up:
            p_stop = torch.zeros(())  # nothing to answer yet: keep looking while pairs remain
        else:  # a candidate row of zeros: no support, no form, when nothing has answered
            best = f.candidates.max(0).values if n_candidates else torch.zeros(CAND_DIM)
            # how far the most trusted producer is known to be right on its family (0: unknown, or no candidate)
            trust = producer_trust.max().reshape(1) if n_candidates else torch.zeros(1)
            p_stop = torch.sigmoid(self.stop(torch.cat([h, best, trust]))[0])
        parts: list[torch.Tensor] = []
        if n_pairs:
            s_keys = self.skill(f.skills)
            idx = f.pair_skill
            known = _known_accuracy(f.models)
            # a skill is as good as the best of its models is known to be on such questions: without it the skill
            # head, which reads only the skill's card, sends a chart to the table skill's pairs when its words say so
            best = torch.full((len(s_keys),), -math.inf).scatter_reduce(0, idx, known, "amax")
            p_skill = torch.softmax(s_keys @ h * self.scale + self.skill_cos * f.skill_cos
                                    + self.accuracy_prior * best, dim=0)
            m_keys = self.model(f.models)
            queries = self.model_query(torch.cat([h.expand(len(s_keys), -1), s_keys], dim=1))
            logits = (m_keys * queries[idx]).sum(1) * self.scale + self.accuracy_prior * known
            weights = torch.exp(logits - logits.max())
            # a skill whose models all sit ~90 nats below the best underflows to 0: its models get 0, not 0/0 = NaN
            group = torch.zeros(len(s_keys)).index_add(0, idx, weights).clamp_min(torch.finfo(torch.float32).tiny)
            parts.append((1 - p_stop) * p_skill[idx] * weights / group[idx])
        if n_candidates:
            producers = torch.cat([self.skill(f.producer_skills), self.model(f.producer_models)], dim=1)
            logits = self.cand(torch.cat([h.expand(n_candidates, -1), producers, f.candidates], dim=1))[:, 0]
            logits = logits + self.form_prior * (f.candidates[:, _HAS_FORM] - f.candidates[:, _CONTRADICTS_FORM])
            logits = logits + self.trust_prior * producer_trust
            parts.append(p_stop * torch.softmax(logits, dim=0))
        elif not n_pairs or f.may_give_up:
            parts.append(p_stop.reshape(1))
        probs = torch.cat(parts).clamp_min(1e-9)
        return probs / probs.sum()


def _known_accuracy(models: torch.Tensor) -> torch.Tensor:
    """Each model row's known family accuracy centred on 0.5, and 0 where it is unknown."""
    return models[:, _KNOWN] * (models[:, _ACCURACY] - 0.5)


def _history(view: EpisodeView) -> np.ndarray:
    answered = [s for s in view.steps if not s.error and s.answer is not None]
    votes: dict[str, int] = {}
    for s in answered:
        assert s.answer is not None  # `answered` holds the steps with an answer
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
    accuracy: float | None = None


def _model_card(pair: Pair, accuracy: float | None = None) -> _ModelCard:
    """The pair's card and what is known of its accuracy: on questions like this one (`accuracy`, the registry's
    reach) where it was measured on such questions, else on its skill family (Pair.accuracy)."""
    return _ModelCard(pair.model.name, pair.model.description, pair.model.cost.per_call, pair.id,
                      pair.accuracy if accuracy is None else accuracy)


class NeuralPolicy:
    """Small and fast on CPU: one state encoding, dot products with card encodings."""

    name = "neural"
    stochastic = False

    def __init__(self, config: NeuralConfig | None = None):
        self.config = config or NeuralConfig()
        with torch.random.fork_rng(devices=[]):  # the seed sets this network's initial weights, not the process RNG
            torch.manual_seed(self.config.seed)
            self.net = _Net(self.config.hidden)

    # -- features --------------------------------------------------------------------------------------------------
    def _cards(self, items: list[tuple[str, str]]) -> np.ndarray:
        """Embeddings of (name, card text) items: the texts the action space holds (training's paraphrases
        included, see Registry.without)."""
        return embed([text for _, text in items])

    def score(self, view: EpisodeView, space: ActionSpace) -> Scored:
        """Probabilities of every valid action now. Pairs already called are masked (a repeat returns the same)."""
        pairs = [p for p in space.pairs if not view.called(p.id)]
        candidates = [a for a in space.answers if a.text is not None]
        q = question_features([view.question], [view.images], [view.choices])[0]
        q_emb = q[:EMBED_DIM]
        skills = list({p.skill.name: p.skill for p in pairs}.values())
        skill_rows, skill_cos = self._skill_rows(view, [(k.name, k.description) for k in skills], q_emb)
        row = {k.name: i for i, k in enumerate(skills)}
        producers = [self._producer(view, space, c) for c in candidates]
        features = _Features(
            state=torch.from_numpy(np.concatenate([q, _history(view)])),
            skills=skill_rows, skill_cos=skill_cos,
            pair_skill=torch.tensor([row[p.skill.name] for p in pairs], dtype=torch.long),
            models=self._model_rows(view, [_model_card(p, space.accuracy.get(p.id)) for p in pairs], q_emb),
            candidates=self._candidate_features(view, candidates),
            producer_skills=self._skill_rows(view, [s for s, _ in producers], q_emb)[0],
            producer_models=self._model_rows(view, [m for _, m in producers], q_emb),
            may_give_up=self.config.stop_without_answer and bool(view.steps) and bool(pairs) and not candidates)
        actions = [Invoke(p.model.name, p.skill.name) for p in pairs] + candidates
        if not candidates and (not pairs or features.may_give_up):
            actions.append(Answer(None))  # nothing to answer with: the explicit no-answer, when it is an action
        return Scored(tuple(actions), self.net(features))

    def _skill_rows(self, view: EpisodeView, skills: list[tuple[str, str]], q_emb: np.ndarray
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Skill-card rows (see _Features) with their history in this episode, and each card's question cosine."""
        emb = self._cards(skills).reshape(len(skills), EMBED_DIM)
        cos = emb @ q_emb
        history = np.asarray([[sum(s.skill == name for s in view.steps) / 2,
                               float(any(s.skill == name and s.answer for s in view.steps)),
                               float(any(s.skill == name and s.error for s in view.steps))] for name, _ in skills],
                             dtype=np.float32).reshape(len(skills), 3)
        rows = np.hstack([emb, history, cos[:, None]]).astype(np.float32)
        return torch.from_numpy(rows), torch.from_numpy(cos.astype(np.float32))

    def _model_rows(self, view: EpisodeView, cards: list[_ModelCard], q_emb: np.ndarray) -> torch.Tensor:
        """Model-card rows (see _Features), one per pair, with their history in this episode."""
        emb = self._cards([(c.name, c.text) for c in cards]).reshape(len(cards), EMBED_DIM)
        cos = emb @ q_emb
        history = np.asarray([[sum(s.model == c.name for s in view.steps) / 2,
                               float(any(s.model == c.name and s.error for s in view.steps)),
                               math.log1p(c.per_call), float(cos[i]), float(view.called(c.pair)),
                               float(c.accuracy is not None), c.accuracy or 0.0]
                              for i, c in enumerate(cards)], dtype=np.float32).reshape(len(cards), MODEL_EXTRA)
        return torch.from_numpy(np.hstack([emb, history]).astype(np.float32))

    def _producer(self, view: EpisodeView, space: ActionSpace, candidate: Answer
                  ) -> tuple[tuple[str, str], _ModelCard]:
        """The skill and model cards of the pair that first produced a candidate (names stand in for the cards of a
        pair the registry no longer has)."""
        key = normalize_text(candidate.text or "")
        step = next(s for s in view.steps if s.answer is not None and normalize_text(s.answer) == key)
        pair = next((p for p in space.registry_pairs if p.id == step.pair), None)
        if pair is None:
            return (step.skill, step.skill), _ModelCard(step.model, step.model, 0.0, step.pair)
        return (pair.skill.name, pair.skill.description), _model_card(pair, space.accuracy.get(pair.id))

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
            support = [s for s in answered if normalize_text(cast(str, s.answer)) == key]  # each has an answer
            rows.append([len(support) / max(1, len(answered)), len(support) / 4,
                         max(s.confidence for s in support), float(np.mean([s.confidence for s in support])),
                         float(bool(answered) and normalize_text(cast(str, answered[-1].answer)) == key),
                         *candidate_form(c.text or "", expected, view.choices),
                         float(key == consensus)])
        return torch.tensor(rows, dtype=torch.float32) if rows else torch.zeros((0, CAND_DIM))

    # -- the policy protocol -----------------------------------------------------------------------------------------
    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        with torch.inference_mode():
            return self.score(view, space).distribution()

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def checkpoint_header(self, extra: dict | None = None) -> dict:
        """What a checkpoint records beside the weights: the config, and the feature sizes and card encoder the
        weights were trained against (a checkpoint is refused where this code computes other features), plus the
        caller's JSON `extra` (the trainer's validation figures, say)."""
        return {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "config": asdict(self.config),
                "features": dict(_FEATURES), "embedding": {"model": EMBEDDING_MODEL, "dim": EMBED_DIM},
                "extra": extra or {}}

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        """Write the weights as safetensors with `checkpoint_header(extra)`, atomically."""
        write_tensor_file(path, self.net.state_dict(), self.checkpoint_header(extra))

    @classmethod
    def load(cls, path: str | Path) -> NeuralPolicy:
        """Load a checkpoint `save` wrote. Anything else (a pickle under any name, another format or version, other
        feature sizes, an unknown config key, tensors missing, extra, misshapen or not finite) is a ConfigError
        naming the file and the field; nothing is unpickled."""
        header, tensors = read_tensor_file(path)
        return cls.from_checkpoint(header, tensors, file=str(path))

    @classmethod
    def from_checkpoint(cls, header: object, tensors: dict[str, torch.Tensor], *, file: str) -> NeuralPolicy:
        """A policy from a checkpoint's header and weights, every field checked (the trainer's resume state keeps
        these two inside its own file)."""
        if not isinstance(header, dict) or header.get("format") != CHECKPOINT_FORMAT:
            found = header.get("format") if isinstance(header, dict) else header
            raise ConfigError(f"not a {CHECKPOINT_FORMAT} checkpoint (format {found!r})", file=file, field="format")
        if header.get("version") != CHECKPOINT_VERSION:
            raise ConfigError(f"version {header.get('version')!r}; this code reads version {CHECKPOINT_VERSION}",
                              file=file, field="version")
        unknown = sorted(set(header) - _HEADER_KEYS)
        if unknown:
            raise ConfigError(f"unknown header key {unknown[0]!r}; known: {sorted(_HEADER_KEYS)}", file=file,
                              field=unknown[0])
        features = sizes if isinstance(sizes := header.get("features"), dict) else {}
        for key, expected in _FEATURES.items():
            if features.get(key) != expected:
                raise ConfigError(f"feature size {features.get(key)} does not match this version's {expected}",
                                  file=file, field=f"features.{key}")
        embedding = {"model": EMBEDDING_MODEL, "dim": EMBED_DIM}
        if header.get("embedding") != embedding:
            raise ConfigError(f"trained on card embeddings {header.get('embedding')!r}, this version computes "
                              f"{embedding!r}", file=file, field="embedding")
        if not isinstance(header.get("extra", {}), dict):
            raise ConfigError("extra is not a JSON object", file=file, field="extra")
        policy = cls(_config(header.get("config"), file))
        _check_weights(policy.net.state_dict(), tensors, file)
        policy.net.load_state_dict(tensors)
        return policy


def _config(values: object, file: str) -> NeuralConfig:
    """The NeuralConfig of a header: an unknown key or a value of another type is named, not a TypeError later."""
    if not isinstance(values, dict):
        raise ConfigError(f"the config is {values!r}, not a JSON object", file=file, field="config")
    defaults = {f.name: f.default for f in fields(NeuralConfig)}
    for key, value in values.items():
        if key not in defaults:
            raise ConfigError(f"unknown config key {key!r}; this version's keys: {sorted(defaults)}", file=file,
                              field=f"config.{key}")
        if type(value) is not type(defaults[key]):
            raise ConfigError(f"{value!r} is not a {type(defaults[key]).__name__}", file=file, field=f"config.{key}")
    return NeuralConfig(**values)


def _check_weights(expected: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], file: str) -> None:
    """Exactly the network's tensors, each of its shape and dtype (`load_state_dict` would cast a dtype silently)."""
    missing, unexpected = sorted(expected.keys() - tensors.keys()), sorted(tensors.keys() - expected.keys())
    if missing:
        raise ConfigError(f"tensors {missing} are missing: the weights do not fit this network", file=file,
                          field=missing[0])
    if unexpected:
        raise ConfigError(f"tensors {unexpected} are not in this network", file=file, field=unexpected[0])
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise ConfigError(f"tensor {name} is {got.dtype} {list(got.shape)}, the network's is {want.dtype} "
                              f"{list(want.shape)}", file=file, field=name)


def _check_finite(tensors: dict[str, torch.Tensor], file: str) -> None:
    """A NaN or infinite weight makes every episode fail while a run still exits 0: refuse it when reading."""
    for name, tensor in tensors.items():
        if not bool(torch.isfinite(tensor).all()):
            raise ConfigError(f"tensor {name} holds NaN or infinite values (a diverged or damaged run); use an "
                              "earlier checkpoint", file=file, field=name)


def write_tensor_file(path: str | Path, tensors: dict[str, torch.Tensor], header: dict) -> None:
    """Tensors and a JSON header as one safetensors file, written beside it and moved into place so that a crash
    mid-write leaves the previous file whole. A header that is not JSON raises TypeError before anything is written.
    (Written as bytes: safetensors' own `save_file` makes the file readable by its owner only, which a server
    running as another user could not load.)"""
    path = Path(path)
    data = safetensors_bytes({name: t.detach().contiguous() for name, t in tensors.items()},
                             metadata={HEADER_KEY: json.dumps(header)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def read_tensor_file(path: str | Path, *, with_tensors: bool = True) -> tuple[dict, dict[str, torch.Tensor]]:
    """The JSON header and the tensors of a file `write_tensor_file` wrote. Only safetensors is parsed, so a pickle
    under any name is refused unread; a missing or damaged file, a missing header and a tensor that is not finite
    are ConfigErrors naming the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("no such policy checkpoint", file=str(path))
    try:
        with safe_open(str(path), framework="pt") as fh:
            metadata = fh.metadata() or {}
            tensors = {name: fh.get_tensor(name) for name in fh.keys()} if with_tensors else {}
    except (SafetensorError, OSError) as exc:
        raise ConfigError(f"not a safetensors checkpoint ({exc})", file=str(path)) from exc
    if HEADER_KEY not in metadata:
        raise ConfigError(f"a safetensors file without maestro's header (metadata key {HEADER_KEY!r})",
                          file=str(path), field=HEADER_KEY)
    try:
        header = json.loads(metadata[HEADER_KEY])
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the header is not JSON ({exc})", file=str(path), field=HEADER_KEY) from exc
    if not isinstance(header, dict):
        raise ConfigError("the header is not a JSON object", file=str(path), field=HEADER_KEY)
    _check_finite(tensors, str(path))
    return header, tensors


def read_checkpoint_header(path: str | Path) -> dict:
    """A checkpoint's JSON header, tensors left unread: e.g. `["extra"]["validation"]` of a trainer's best
    checkpoint."""
    return read_tensor_file(path, with_tensors=False)[0]
