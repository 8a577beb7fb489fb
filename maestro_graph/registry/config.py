"""The registry config file (YAML): model cards and the skill folders to scan, validated with pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError

__all__ = [
    "Cost",
    "PythonBackend",
    "OpenAIBackend",
    "TransformersBackend",
    "Backend",
    "ModelCard",
    "RegistryConfig",
    "load_config",
    "default_config_path",
    "first_validation_problem",
]

NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


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


class OpenAIBackend(_Strict):
    """Any OpenAI-compatible chat endpoint (what `vllm serve` exposes)."""

    type: Literal["openai"]
    base_url: str = Field(description="e.g. http://127.0.0.1:8000/v1")
    model: str
    api_key_env: str | None = Field(None, description="environment variable holding the API key")
    max_tokens: int = Field(256, gt=0)
    temperature: float = Field(0.0, ge=0)


class TransformersBackend(_Strict):
    """A local Hugging Face `transformers` causal LM: a hub id or folder, or a GGUF file shipped in a package."""

    type: Literal["transformers"]
    model: str | None = Field(None, description="a local folder or hub id (offline: a folder)")
    gguf_package: str | None = Field(None, description="a Python package whose folder holds the GGUF file")
    gguf_file: str | None = Field(None, description="GGUF file name inside `model` or `gguf_package`")
    max_new_tokens: int = Field(128, gt=0)
    threads: int | None = Field(None, gt=0)


Backend = Annotated[PythonBackend | OpenAIBackend | TransformersBackend, Field(discriminator="type")]


class ModelCard(_Strict):
    """What a policy and the registry know about one expert model."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field(min_length=1, max_length=2000, description="the card text a policy reads")
    capabilities: list[str] = Field(min_length=1)
    backend: Backend
    cost: Cost = Field(default_factory=Cost)
    timeout_s: float = Field(60.0, gt=0)
    concurrency: int = Field(1, ge=1)
    cacheable: bool = Field(True, description="deterministic results may be cached")
    version: str = "1"


class RegistryConfig(_Strict):
    """A registry file: the models and where to find skill folders (relative to the file)."""

    models: list[ModelCard]
    skill_dirs: list[str] = Field(default_factory=lambda: ["skills"])
    skills: list[str] | None = Field(None, description="enable only these skills (default: every skill found)")
    base_dir: Path = Field(Path("."), exclude=True)
    source: str = Field("<memory>", exclude=True)

    def skill_paths(self) -> list[Path]:
        return [(self.base_dir / d).resolve() for d in self.skill_dirs]


def first_validation_problem(exc: ValidationError) -> tuple[str, str]:
    """(field path, message) of every problem, joined, for an error that names the field."""
    fields, messages = [], []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        fields.append(loc)
        messages.append(f"{loc}: {err['msg']}" + (f" (got {err['input']!r})" if "input" in err else ""))
    return ", ".join(fields), "; ".join(messages)


def default_config_path() -> Path:
    """The default registry shipped with the package: local CPU experts only."""
    return Path(__file__).resolve().parent.parent / "default_registry.yaml"


def load_config(path: str | Path | None = None) -> RegistryConfig:
    path = Path(path) if path else default_config_path()
    if not path.is_file():
        raise ConfigError("no such registry config file", file=str(path))
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {exc}", file=str(path)) from exc
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
    return config.model_copy(update={"base_dir": path.parent, "source": str(path)})
