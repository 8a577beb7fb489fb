"""The registry config file (YAML): model cards and the skill folders to scan, validated with pydantic.

A registry may build on another (`extends:`): the packaged default by name (`extends: default`) or any registry
file. Paths in a registry (`extends`, `skill_dirs`, `profile`) are relative to the file that names them, absolute,
or `package:REL`, relative to the installed `maestro_graph` package (`package:skills` is the packaged skills), so
a registry outside the package needs no absolute path into it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from ..core.bundled import Bundled, bundled_dir
from ..core.operator_yaml import read_yaml
from ..errors import ConfigError, first_validation_problem

__all__ = [
    "Cost",
    "PythonBackend",
    "OpenAIBackend",
    "TransformersBackend",
    "Backend",
    "Evaluation",
    "ModelCard",
    "ImageTokens",
    "MAESTRO_BODY_FIELDS",
    "Retries",
    "CircuitBreaker",
    "Faults",
    "RegistryConfig",
    "load_config",
    "default_config_path",
    "resolve_path",
    "DEFAULT_REGISTRY",
    "PACKAGE_PREFIX",
]

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
PACKAGE_PREFIX = "package:"
"""A path starting with this is one the package ships: `package:skills` and `package:examples` (and paths under
them) are its bundled folders, anything else is relative to the installed `maestro_graph` package folder."""
DEFAULT_REGISTRY = "default"
"""`extends: default` names the packaged default registry."""
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_HTTP_URL = re.compile(r"^https?://[^/\s]+")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cost(_Strict):
    """Cost of one call, in the registry's abstract cost unit (the paper's budget is in the same unit)."""

    per_call: float = Field(0.0, ge=0, description="charged for every call, failed calls included")
    per_1k_tokens: float = Field(0.0, ge=0, description="charged per 1000 tokens for chat models")


class PythonBackend(_Strict):
    """An expert implemented by a Python class in this process: `entry` is `module:Class`, `options` its kwargs."""

    type: Literal["python"]
    entry: str = Field(pattern=r"^[\w.]+:\w+$")
    options: dict[str, Any] = Field(default_factory=dict)


MAESTRO_BODY_FIELDS = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "temperature"})
"""Request fields the chat expert sets from the backend's own fields (an `extra_body` may not override them)."""
_UNSET_IF_DEFAULT = ("base_urls", "token_limit_field", "extra_body", "headers", "image_detail")
"""OpenAIBackend fields left out of its dump at their default."""


class OpenAIBackend(_Strict):
    """Any OpenAI-compatible chat endpoint (what `vllm serve` exposes), or several serving the same model: a fleet
    of replicas gets the card's calls balanced across it, each replica with its own circuit breaker and its own
    `concurrency` limit (maestro_graph.registry.card_limits)."""

    type: Literal["openai"]
    base_url: str | None = Field(None, description="one endpoint, e.g. http://127.0.0.1:8000/v1")
    base_urls: list[str] | None = Field(None, min_length=1, description="several endpoints serving the same model "
                                        "(instead of `base_url`): each call goes to the least busy one whose "
                                        "breaker is closed")
    model: str
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    max_tokens: int = Field(256, gt=0, description="the reply's token limit, sent as `token_limit_field`")
    token_limit_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens", description="the request field carrying `max_tokens`: OpenAI's reasoning models (o-series, "
        "GPT-5 class) refuse `max_tokens` and take `max_completion_tokens`; vLLM takes both")
    temperature: float | None = Field(0.0, ge=0, description="sampling temperature; null: not sent (the model's "
                                      "default, the only value reasoning models accept)")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="more fields of the request body (e.g. "
                                       "`reasoning_effort`, vLLM's `structured_outputs`); never one Maestro sets")
    headers: dict[str, str] = Field(default_factory=dict, description="more HTTP headers of each request (e.g. an "
                                    "organisation or project id); the key goes in `api_key_env`")
    image_detail: Literal["low", "high", "auto"] | None = Field(
        None, description="the `detail` of each image part (hosted APIs: how finely the image is read and charged); "
        "null: not sent")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None and not _HTTP_URL.match(url):
            raise ValueError(f"{url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)")
        return url

    @field_validator("base_urls")
    @classmethod
    def _http_urls(cls, urls: list[str] | None) -> list[str] | None:
        listed = urls or []
        for i, url in enumerate(listed):
            if not _HTTP_URL.match(url):
                raise ValueError(f"[{i}] {url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)")
        repeated = sorted({u for u in listed if listed.count(u) > 1})
        if repeated:
            raise ValueError(f"each endpoint once, repeated: {repeated}")
        return urls

    @field_validator("extra_body")
    @classmethod
    def _no_field_maestro_sets(cls, extra: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(set(extra) & MAESTRO_BODY_FIELDS)
        if taken:
            raise ValueError(f"{taken} are set by Maestro (use the backend's own fields: max_tokens, "
                             "token_limit_field, temperature); extra_body adds other fields")
        return extra

    @field_validator("headers")
    @classmethod
    def _no_key_in_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        if any(name.lower() == "authorization" for name in headers):
            raise ValueError("the key goes in `api_key_env` (the name of an environment variable), never in the "
                             "registry file's headers")
        return headers

    @model_validator(mode="after")
    def _one_way_to_reach(self) -> OpenAIBackend:
        if self.base_url is not None and self.base_urls is not None:
            raise ValueError("both `base_url` and `base_urls` are set: keep one (`base_urls` for several endpoints)")
        if self.base_url is None and self.base_urls is None:
            raise ValueError("an openai backend needs `base_url` (one endpoint) or `base_urls` (several)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without `base_urls` and the hosted-API options when unset, so a card that uses none dumps as it did
        before those fields existed."""
        data = handler(self)
        for name in _UNSET_IF_DEFAULT:
            if data.get(name) == OpenAIBackend.model_fields[name].get_default(call_default_factory=True):
                data.pop(name, None)
        return data

    @property
    def endpoints(self) -> list[str]:
        """Every endpoint's base URL (one for `base_url`)."""
        return [self.base_url] if self.base_url is not None else list(self.base_urls or [])


class TransformersBackend(_Strict):
    """A local Hugging Face `transformers` causal LM: a hub id or folder, or a GGUF file shipped in a package."""

    type: Literal["transformers"]
    model: str | None = Field(None, description="a local folder or hub id (offline: a folder)")
    gguf_package: str | None = Field(None, description="a Python package whose folder holds the GGUF file")
    gguf_file: str | None = Field(None, description="GGUF file name inside `model` or `gguf_package`")
    max_new_tokens: int = Field(128, gt=0)
    threads: int | None = Field(None, gt=0)


Backend = Annotated[PythonBackend | OpenAIBackend | TransformersBackend, Field(discriminator="type")]


class Retries(_Strict):
    """Retries of transient expert failures (timeouts, dropped connections, injected faults); never of an expert's
    deterministic crash, which would fail the same way again. Each attempt is charged."""

    attempts: int = Field(1, ge=1, le=10, description="calls in all, the first included (1 = no retry)")
    backoff_s: float = Field(0.2, ge=0, description="wait before the first retry; doubles for each further one")
    max_backoff_s: float = Field(5.0, ge=0, description="longest wait between two attempts")
    jitter: float = Field(0.5, ge=0, le=1, description="each wait is scaled by a random factor in [1-jitter, 1]")


class CircuitBreaker(_Strict):
    """Stop calling an expert that keeps failing: after `failures` failed calls in a row it is reported unavailable
    (the policy's action space drops its pairs) for `open_s` seconds, then one trial call decides."""

    failures: int = Field(5, ge=1, description="consecutive failed calls that open the breaker")
    open_s: float = Field(30.0, gt=0, description="how long the breaker stays open before a trial call")


class Faults(_Strict):
    """Fault injection for tests and `maestro reliability` (maestro_graph.registry.faults): each call of the expert
    independently fails, hangs, returns garbage or an oversized result with these probabilities."""

    error_rate: float = Field(0.0, ge=0, le=1, description="raise a transient error")
    hang_rate: float = Field(0.0, ge=0, le=1, description="sleep `hang_s` (longer than the card's timeout)")
    hang_s: float = Field(5.0, gt=0, description="how long an injected hang lasts")
    latency_s: float = Field(0.0, ge=0, description="extra latency added to every call")
    garbage_rate: float = Field(0.0, ge=0, le=1, description="return an object of the wrong type")
    oversized_rate: float = Field(0.0, ge=0, le=1, description="return a result far above the size cap")
    seed: int = Field(0, description="seed of the fault draws (one stream per model)")

    @model_validator(mode="after")
    def _rates_sum(self) -> Faults:
        total = self.error_rate + self.hang_rate + self.garbage_rate + self.oversized_rate
        if total > 1:
            raise ValueError(f"error_rate + hang_rate + garbage_rate + oversized_rate = {total:g} exceeds 1; "
                             "lower one of them")
        return self


class ImageTokens(_Strict):
    """How the served model's image processor turns an image into tokens (Qwen2-VL, Qwen2.5-VL and Qwen3-VL, as
    `transformers` implements them): each side is rounded to a multiple of `patch_size * merge_size`, the area kept
    between `min_pixels` and `max_pixels`, and every `merge_size x merge_size` patches become one token. The values
    are the model's `preprocessor_config.json` (`patch_size`, `merge_size`, `size.shortest_edge` and
    `size.longest_edge`, which are pixel counts)."""

    patch_size: int = Field(gt=0, description="14 for Qwen2-VL and Qwen2.5-VL, 16 for Qwen3-VL")
    merge_size: int = Field(2, gt=0)
    min_pixels: int = Field(gt=0, description="the processor's `size.shortest_edge` (a pixel count)")
    max_pixels: int = Field(gt=0, description="the processor's `size.longest_edge` (a pixel count); vLLM's "
                            "`--mm-processor-kwargs '{\"max_pixels\": N}'` lowers it")
    extra_tokens: int = Field(2, ge=0, description="tokens around each image's patches (vision start and end)")

    @model_validator(mode="after")
    def _ordered(self) -> ImageTokens:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels {self.min_pixels} is above max_pixels {self.max_pixels}")
        return self


class Evaluation(_Strict):
    """A reported accuracy of the model on one task family, in the style of a Hugging Face `model-index` entry. A
    family is a tier-1 skill's name (what the model was run as), never a benchmark or source name."""

    family: str = Field(pattern=NAME_PATTERN, description="the tier-1 skill the figure was measured with")
    accuracy: float = Field(ge=0, le=1, description="fraction of items right")
    source: str = Field(min_length=1, description="where the figure comes from (a paper, a report, a run)")


class ModelCard(_Strict):
    """What a policy and the registry know about one expert model. The structured fields below `faults` are
    optional facts a policy can read as numbers or categories; an absent field is unknown, never a default value
    that would pass for a measurement."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1, max_length=2000, description="the card text a policy reads")
    capabilities: list[str] = Field(min_length=1)
    backend: Backend
    cost: Cost = Field(default_factory=Cost)
    timeout_s: float = Field(60.0, gt=0)
    concurrency: int = Field(1, ge=1, description="calls at once: per process for an in-process expert; for an "
                             "`openai` card, per endpoint and across the whole Ray cluster when run on one")
    cacheable: bool = Field(True, description="deterministic results may be cached")
    version: str = "1"
    install: str | None = Field(None, max_length=500, description="how to add what this expert needs where it is "
                                "unavailable (`maestro registry show` and `skills list` print it with the reason)")
    retries: Retries = Field(default_factory=Retries)
    breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)
    faults: Faults | None = Field(None, description="inject faults into this expert (tests and reliability runs)")
    formats: list[Literal["png", "jpeg", "gif", "bmp", "tiff", "webp"]] | None = Field(
        None, description="image formats the model reads (absent: unknown)")
    max_input_side: int | None = Field(None, gt=0, description="longest image side in pixels it reads well (a "
                                       "vision-chat model is sent images downscaled to it)")
    max_image_bytes: int | None = Field(None, gt=0, description="largest encoded image a vision-chat model is sent; "
                                        "a larger one goes as JPEG, else is refused by name (absent: 8 MB)")
    image_tokens: ImageTokens | None = Field(None, description="the served model's image processor arithmetic: "
                                             "each image's token count is computed before sending")
    max_model_len: int | None = Field(None, gt=0, description="the served context length in tokens (`vllm serve "
                                      "--max-model-len`): a vision-chat request whose images, text and reply would "
                                      "not fit is sent with smaller images, or refused by name")
    max_images: int | None = Field(None, gt=0, description="most images one vision-chat request may carry (`vllm "
                                   "serve --limit-mm-per-prompt`): a question with more is refused by name before "
                                   "sending (absent: no cap)")
    evaluations: list[Evaluation] = Field(default_factory=list, description="reported accuracy per task family")
    latency_s: float | None = Field(None, ge=0, description="typical seconds per call")

    def reported_accuracy(self, family: str) -> float | None:
        """The card's reported accuracy on a task family (the mean when several sources report it), else None."""
        found = [e.accuracy for e in self.evaluations if e.family == family]
        return sum(found) / len(found) if found else None


class RegistryConfig(_Strict):
    """A registry file: the models and where to find skill folders (paths relative to the file, or `package:`)."""

    extends: str | None = Field(None, min_length=1, description="a registry this one builds on: `default` (the "
                                "packaged one) or a registry file; its models come first (a model of the same name "
                                "here replaces its card), its skill folders are scanned too, and its profile is read "
                                "where this file names none; `skills` and `skill_timeout_s` are this file's if set")
    models: list[ModelCard] = Field(default_factory=list)
    skill_dirs: list[str] = Field(default_factory=lambda: ["skills"], description="folders of skill folders (with "
                                  "`extends`, added to the base's; default then: none of its own)")
    skills: list[str] | None = Field(None, description="enable only these skills (default: every skill found)")
    skill_timeout_s: float = Field(300.0, gt=0, description="time limit of one skill step, its expert calls included")
    profile: str | None = Field(None, description="the pairs' profile file (`maestro registry profile`), relative to "
                                "this file; absent: no pair is profiled (with `extends`: the base's is read)")
    base_dir: Path = Field(Path("."), exclude=True)
    source: str = Field("<memory>", exclude=True)
    base_profile: Path | None = Field(None, exclude=True, description="the profile of the registry this one extends, "
                                      "read where the file names none")

    def skill_paths(self) -> list[Path]:
        return [resolve_path(d, self.base_dir).resolve() for d in self.skill_dirs]

    def profile_path(self) -> Path | None:
        """The profile file this file's `profile:` key names (None: it names none), which `maestro registry profile`
        writes; never the base's, which belongs to the registry it extends."""
        return resolve_path(self.profile, self.base_dir) if self.profile is not None else None

    def profile_to_read(self) -> Path | None:
        """The profile the registry's pairs read: this file's, else the one of the registry it extends (its entries
        fit the base's pairs; added pairs are unprofiled until profiled here)."""
        return self.profile_path() or self.base_profile


def resolve_path(value: str, base_dir: Path) -> Path:
    """A path a registry file names: `package:REL` under the installed package, else relative to `base_dir` (the
    file's folder) unless absolute."""
    if value.startswith(PACKAGE_PREFIX):
        first, _, rest = value.removeprefix(PACKAGE_PREFIX).partition("/")
        if first in get_args(Bundled):
            return bundled_dir(cast(Bundled, first)) / rest  # the check above narrows it
        return _PACKAGE_DIR / value.removeprefix(PACKAGE_PREFIX)
    return base_dir / value


def default_config_path() -> Path:
    """The default registry shipped with the package: local CPU experts only."""
    return _PACKAGE_DIR / "default_registry.yaml"


def load_config(path: str | Path | None = None, *, _extended_by: tuple[Path, ...] = ()) -> RegistryConfig:
    """The registry file at `path` (default: the packaged one), with the registry it extends merged in."""
    path = Path(path) if path else default_config_path()
    if not path.is_file():
        hint = f" (extended by {_extended_by[-1]})" if _extended_by else ""
        raise ConfigError(f"no such registry config file{hint}", file=str(path))
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping with `models` and `skill_dirs`", file=str(path))
    try:
        config = RegistryConfig.model_validate(raw)
    except ValidationError as exc:
        field, message = first_validation_problem(exc)
        raise ConfigError(message, file=str(path), field=field) from exc
    names = [m.name for m in config.models]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"model names must be unique, repeated: {dupes}", file=str(path), field="models")
    config = config.model_copy(update={"base_dir": path.parent, "source": str(path)})
    if config.extends is None:
        if not config.models:
            raise ConfigError("a registry needs `models` (or `extends: default` to build on the packaged one)",
                              file=str(path), field="models")
        return config
    return _extended(config, config.extends, path, _extended_by)


def _extended(config: RegistryConfig, extends: str, path: Path, extended_by: tuple[Path, ...]) -> RegistryConfig:
    """`config` (the file at `path`) merged onto the registry `extends` names. Skill folders become absolute
    paths, so the result does not depend on which file's folder they were relative to."""
    target = default_config_path() if extends == DEFAULT_REGISTRY else resolve_path(extends, path.parent)
    chain = (*extended_by, path.resolve())
    if target.resolve() in chain:
        raise ConfigError(f"`extends: {extends}` makes a cycle: " + " -> ".join(map(str, (*chain, target.resolve()))),
                          file=str(path), field="extends")
    base = load_config(target, _extended_by=chain)
    mine = {m.name: m for m in config.models}
    models = [mine.pop(m.name, m) for m in base.models] + list(mine.values())
    set_here = config.model_fields_set
    own_dirs = config.skill_paths() if "skill_dirs" in set_here else []
    return config.model_copy(update={
        "extends": None,
        "models": models,
        "skill_dirs": [str(d) for d in dict.fromkeys([*base.skill_paths(), *own_dirs])],
        "skills": config.skills if "skills" in set_here else base.skills,
        "skill_timeout_s": config.skill_timeout_s if "skill_timeout_s" in set_here else base.skill_timeout_s,
        "base_profile": base.profile_to_read(),
    })
