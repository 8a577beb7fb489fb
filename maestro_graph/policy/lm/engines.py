"""Where an LM router's text comes from: a local `transformers` model or any OpenAI-compatible endpoint (`vllm serve`).

Both take OpenAI-format messages. `complete` writes one action; constrained decoding keeps a small model inside the
action space: the transformers backend scores every valid action's tokens (`score`), the endpoint backend asks vLLM
for `structured_outputs` (a choice list or a regex). An endpoint that is down, slow or answers garbage is retried
with exponential backoff and then raises `BackendError`, which the policy turns into an error observation.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ...errors import MaestroError

__all__ = ["STOP_STRINGS", "BackendError", "LMBackend", "OpenAILM", "ScoringBackend", "TransformersLM"]

REGEX_MIN_TOKENS = 160
"""Token limit of a regex-constrained request: the action counts only once its closing tag is written, and the
longest action the regex admits (see `action_regex`) is about 160 characters."""
STOP_STRINGS = ("</search>", "</answer>")
"""Generation stops after the first closed action (the parser executes only the first one anyway)."""


_LOADING = threading.Lock()
_LOADED: dict[str, tuple[Any, Any]] = {}
"""Local router models by (source, adapter): loaded once per process (`TransformersLM.loaded`)."""


class BackendError(MaestroError):
    """The router's LM could not produce text (endpoint down, timed out, garbage reply, image refused)."""


class LMBackend(Protocol):
    """Extension point: writes the router's next action text for a conversation.

    `complete` returns the completion; `choices` (exact texts) or `regex` constrain it where the backend can."""

    def complete(self, messages: list[dict], images: Sequence[str] = (), *, choices: Sequence[str] | None = None,
                 regex: str | None = None) -> str: ...


@runtime_checkable
class ScoringBackend(LMBackend, Protocol):
    """A backend that can also score given completions (log-probability of each text after the conversation), so
    the `choice` constraint is a real distribution over the valid actions rather than one pick."""

    def score(self, messages: list[dict], continuations: Sequence[str], images: Sequence[str] = ()) -> list[float]:
        ...


class TransformersLM:
    """A local causal LM. Built from loaded objects (training shares the trainer's model), or lazily from a model
    folder / packaged GGUF with `TransformersLM.from_source` (loading goes through the chat expert's loader).

    A vision-language model comes with its processor in place of the tokenizer (a folder whose config has a
    `vision_config` loads so): it is shown the question's images, rendered by its own chat template."""

    def __init__(self, model: Any = None, tokenizer: Any = None, *, temperature: float = 0.0,
                 max_new_tokens: int = 48, source: dict | None = None, adapter: str | None = None):
        if (model is None) != (tokenizer is None) or (model is None) == (source is None):
            raise ValueError("give either a loaded model and tokenizer, or `source` to load lazily")
        self._model, self._tokenizer = model, tokenizer
        self._source = source
        self._adapter = adapter
        self._system: tuple[list[int], Any] | None = None
        """(token ids, key/value cache) of the last system prompt scored: every decision of every episode over one
        registry starts with it, so it is encoded once per backend (training builds a backend per step, so the
        cache never outlives the weights it was computed with)."""
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self._lock = threading.Lock()

    @classmethod
    def from_source(cls, model: str | None = None, gguf_package: str | None = None, gguf_file: str | None = None,
                    adapter: str | None = None, **kwargs: Any) -> TransformersLM:
        """A lazily loaded model; `adapter` is a LoRA adapter folder (peft) merged into it on load, so a trained
        router ships as a few MB over the packaged base model."""
        from ...backends.hf import local_model_problem
        from ...backends.packages import missing_package

        reason = local_model_problem(model, gguf_package, gguf_file)
        if adapter is not None and not reason:
            missing = missing_package("peft")
            if missing:
                reason = f"Python package {missing!r} is not installed (needed for the LoRA adapter {adapter})"
            elif not (Path(adapter) / "adapter_config.json").is_file():
                reason = f"{adapter} holds no adapter_config.json (not a peft LoRA adapter folder)"
        if reason:
            raise BackendError(f"cannot load the router LM: {reason}")
        return cls(source={"model": model, "gguf_package": gguf_package, "gguf_file": gguf_file}, adapter=adapter,
                   **kwargs)

    def loaded(self) -> tuple[Any, Any]:
        """(model, tokenizer), loading them on first use onto `default_device()` (and merging the adapter, so
        decisions pay nothing for it). One load per model, adapter and device per process, shared by every backend
        built from them: each worker of `maestro eval --workers N` builds its own policy, and concurrent first
        imports of transformers and peft race (an ImportError, then an adapter merged into a half-imported peft that
        answered nothing at all)."""
        from ...backends.hf import default_device

        with self._lock:
            if self._model is None:
                key = json.dumps([self._source, self._adapter, default_device()], sort_keys=True)
                with _LOADING:
                    if key not in _LOADED:
                        _LOADED[key] = self._load()
                self._model, self._tokenizer = _LOADED[key]
            return self._model, self._tokenizer

    def _load(self) -> tuple[Any, Any]:
        from ...backends.hf import load_router_lm, resolve_model_source

        assert self._source is not None  # a backend built without a loaded model has its source (`__init__`)
        tokenizer, model = load_router_lm(*resolve_model_source(**self._source))
        if self._adapter is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, self._adapter).merge_and_unload().eval()
        return model, tokenizer

    @property
    def vision(self) -> bool:
        """Whether the model sees images: it was loaded with a processor that has an image processor."""
        return hasattr(self.loaded()[1], "image_processor")

    def _inputs(self, messages: list[dict], images: Sequence[str]) -> dict[str, Any]:
        """The model's inputs for the conversation with the generation prompt, on the model's device: token ids, and
        for a vision-language model the question's images as its processor prepares them (pixel values, grids, token
        types)."""
        model, processor = self.loaded()
        if self.vision:
            from ...images.load import load_images
            from .prompt import with_images

            messages = with_images(messages, load_images(tuple(images)))
        return dict(processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                  return_tensors="pt", return_dict=True).to(model.device))

    def _prompt_ids(self, messages: list[dict]) -> Any:
        return self._inputs(messages, ())["input_ids"]

    def _text_tokenizer(self) -> Any:
        _, tokenizer = self.loaded()
        return getattr(tokenizer, "tokenizer", tokenizer)

    def complete(self, messages: list[dict], images: Sequence[str] = (), *, choices: Sequence[str] | None = None,
                 regex: str | None = None) -> str:
        if regex is not None:
            raise BackendError("the transformers backend constrains with a choice list, not a regex")
        if choices is not None:
            scores = self.score(messages, choices, images)
            return choices[max(range(len(choices)), key=scores.__getitem__)]
        import torch

        model, _ = self.loaded()
        tokenizer = self._text_tokenizer()
        inputs = self._inputs(messages, images)
        prompt = inputs.pop("input_ids")
        inputs.pop("attention_mask", None)
        sample = self.temperature > 0
        with self._lock, torch.inference_mode():
            output = model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), **inputs, max_new_tokens=self.max_new_tokens,
                do_sample=sample, temperature=self.temperature if sample else None, top_p=None, top_k=None,
                stop_strings=list(STOP_STRINGS), tokenizer=tokenizer,
                pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            )
        return tokenizer.decode(output[0, prompt.shape[1]:], skip_special_tokens=True).strip()

    def _head(self, model: Any, tokenizer: Any, messages: list[dict], prompt: Any) -> tuple[Any, Any]:
        """(logits after the prompt, key/value cache of the prompt), reusing the system prompt's cache: on a CPU
        the system prompt (cards, pairs, rules) is most of the tokens of a decision."""
        import copy

        system = list(tokenizer.apply_chat_template(messages[:1], tokenize=True, return_dict=True)["input_ids"])
        n = len(system)
        if messages[0]["role"] != "system" or n >= prompt.shape[1] or prompt[0, :n].tolist() != system:
            head = model(input_ids=prompt, use_cache=True)  # a template whose system rendering is no prefix
            return head.logits, head.cache
        if self._system is None or self._system[0] != system:
            self._system = (system, model(input_ids=prompt[:, :n], use_cache=True).cache)
        cache = copy.deepcopy(self._system[1])
        head = model(input_ids=prompt[:, n:], cache=cache, use_cache=True)
        return head.logits, head.cache

    def score(self, messages: list[dict], continuations: Sequence[str], images: Sequence[str] = ()) -> list[float]:
        """Log-probability of each continuation as the assistant's reply: the sum over its tokens, so the `choice`
        distribution is the model's own sequence distribution restricted to the valid actions, the one SFT and GRPO
        train (a per-token mean flattens it and favours long, predictable actions: docs/results.md, "What a
        decision costs"). The prompt is encoded
        once (its system part once per backend, `_head`) and its key/value cache shared by all continuations (one
        batched forward pass). A vision-language model scores each continuation in a forward pass of its own over
        the prompt with its images: its position ids depend on where the image tokens sit, so one key/value cache
        is not shared across continuations."""
        import torch

        if self.vision:
            return self._score_with_images(messages, continuations, images)
        model, tokenizer = self.loaded()
        prompt = self._prompt_ids(messages)
        pieces = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in continuations]
        width = max(len(p) for p in pieces)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        device = model.device
        batch = torch.tensor([p + [pad] * (width - len(p)) for p in pieces], device=device)
        mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in pieces], device=device)
        n = len(pieces)
        with self._lock, torch.inference_mode():
            head_logits, cache = self._head(model, tokenizer, messages, prompt)
            cache.batch_repeat_interleave(n)
            full_mask = torch.cat([torch.ones(n, prompt.shape[1], dtype=torch.long, device=device), mask], dim=1)
            tail = model(input_ids=batch, cache=cache, attention_mask=full_mask).logits
        first = torch.log_softmax(head_logits[0, -1].float(), dim=-1)
        rest = torch.log_softmax(tail[:, :-1].float(), dim=-1)
        scores = []
        for i, piece in enumerate(pieces):
            total = first[piece[0]]
            if len(piece) > 1:
                steps = torch.arange(len(piece) - 1, device=device)
                total = total + rest[i, steps, torch.tensor(piece[1:], device=device)].sum()
            scores.append(float(total))
        return scores

    def _score_with_images(self, messages: list[dict], continuations: Sequence[str],
                           images: Sequence[str]) -> list[float]:
        import torch

        model, _ = self.loaded()
        tokenizer = self._text_tokenizer()
        inputs = self._inputs(messages, images)
        prompt = inputs.pop("input_ids")
        inputs.pop("attention_mask", None)
        scores = []
        with self._lock, torch.inference_mode():
            for text in continuations:
                piece = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]], device=model.device)
                extra = dict(inputs)
                for key in ("mm_token_type_ids", "token_type_ids"):  # per-token fields: the continuation is text
                    if key in extra:
                        extra[key] = torch.cat([extra[key], torch.zeros_like(piece)], dim=1)
                ids = torch.cat([prompt, piece], dim=1)
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), **extra).logits
                logp = torch.log_softmax(logits[0, prompt.shape[1] - 1:-1].float(), dim=-1)
                scores.append(float(logp[torch.arange(piece.shape[1], device=model.device), piece[0]].sum()))
        return scores


@dataclass
class OpenAILM:
    """POSTs `{base_url}/chat/completions`. With `vision`, the question's images go in the user turn as data URLs,
    downscaled to `max_image_side` and refused beyond `max_image_bytes` (a clear error instead of a 413)."""

    base_url: str
    model: str
    api_key_env: str | None = None
    temperature: float = 0.0
    max_tokens: int = 48
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 1.0
    vision: bool = False
    max_image_side: int = 1024
    max_image_bytes: int = 4_000_000

    def __post_init__(self) -> None:
        self.url = self.base_url.rstrip("/") + "/chat/completions"
        from ...backends.http import LazyClient

        self._http = LazyClient(self.api_key_env, self.timeout_s, BackendError)

    def image_url(self, ref: str) -> str:
        """A data URL of the image within `max_image_side` and `max_image_bytes` (the vision-chat experts' encoder);
        BackendError when still too large."""
        from ...images.load import fitted_data_url, load_image

        fitted = fitted_data_url(load_image(ref), self.max_image_side, self.max_image_bytes)
        if fitted.url is None:
            raise BackendError(f"image {ref} is {fitted.encoded_bytes} bytes after resizing to "
                               f"{self.max_image_side}px, over max_image_bytes={self.max_image_bytes}; lower "
                               "max_image_side or raise the limit")
        return fitted.url

    def request_body(self, messages: list[dict], images: Sequence[str] = (), *,
                     choices: Sequence[str] | None = None, regex: str | None = None) -> dict[str, Any]:
        sent = [dict(m) for m in messages]
        if self.vision and images:
            user = next(i for i, m in enumerate(sent) if m["role"] == "user")
            sent[user]["content"] = [{"type": "text", "text": sent[user]["content"]},
                                     *({"type": "image_url", "image_url": {"url": self.image_url(r)}} for r in images)]
        body: dict[str, Any] = {"model": self.model, "messages": sent, "max_tokens": self.max_tokens,
                                "temperature": self.temperature}
        if choices is not None:
            body["structured_outputs"] = {"choice": list(choices)}
        elif regex is not None:
            body["structured_outputs"] = {"regex": regex}
            body["max_tokens"] = max(self.max_tokens, REGEX_MIN_TOKENS)
        else:
            body["stop"] = list(STOP_STRINGS)
        return body

    def complete(self, messages: list[dict], images: Sequence[str] = (), *, choices: Sequence[str] | None = None,
                 regex: str | None = None) -> str:
        body = self.request_body(messages, images, choices=choices, regex=regex)
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                return self._once(body)
            except BackendError as exc:
                problem = str(exc)
        raise BackendError(f"{problem} (after {self.retries + 1} attempts)")

    def _once(self, body: dict[str, Any]) -> str:
        import httpx

        try:
            response = self._http.get().post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise BackendError(f"POST {self.url} timed out after {self.timeout_s:g}s") from exc
        except httpx.TransportError as exc:
            raise BackendError(f"cannot reach {self.url}: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise BackendError(f"POST {self.url} returned HTTP {response.status_code}: {response.text[:200]}")
        try:
            choice = response.json()["choices"][0]
            text = choice["message"]["content"] or ""
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"POST {self.url} returned a reply that is not a chat completion: "
                               f"{response.text[:200]!r}") from exc
        # vLLM reports the stop string it stopped at (`stop_reason`); the string is not part of the text, so it is
        # put back. A server that does not say which one leaves the tag unclosed, and the parser reports that.
        if choice.get("stop_reason") in STOP_STRINGS:
            text = f"{text.rstrip()} {choice['stop_reason']}"
        return text.strip()
