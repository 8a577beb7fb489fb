"""The contract between skills and experts: one method set per capability.

A model card's `capabilities` promise these methods. Skill code calls them through `ctx.model` (or `ctx.expert(cap)`),
so any backend that implements the methods can serve any skill that needs the capability.

- `ocr`:         `ocr(image: PIL.Image) -> list[TextBox]`
- `chat`:        `chat(messages: list[dict]) -> ChatReply` (OpenAI message format, text only)
- `vision-chat`: `chat(messages)` where user content may hold `image_url` parts (data URLs); any skill that says
                 `or-requires: "vision-chat"` runs on it through `maestro_graph.registry.vision`
- `math`:        `evaluate(expression: str) -> str`, `solve(equations: list[str], unknown: str | None) -> list[str]`
- `vision-cv`:   classical image analysis (see `maestro_graph.experts.opencv_vision`)
- `barcode`:     `decode(image: PIL.Image) -> list[Barcode]`

An expert class may define `unavailable_reason(**options) -> str | None` (a classmethod, cheap) so the registry can
report it unavailable, with the reason, without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TextBox", "ChatReply", "Barcode"]


@dataclass(frozen=True)
class TextBox:
    """One recognised piece of text: its box in pixels (x0, y0, x1, y1) and the engine's confidence 0..1."""

    text: str
    box: tuple[float, float, float, float]
    confidence: float

    @property
    def cx(self) -> float:
        return (self.box[0] + self.box[2]) / 2

    @property
    def cy(self) -> float:
        return (self.box[1] + self.box[3]) / 2

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


@dataclass(frozen=True)
class ChatReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    """Of `completion_tokens`, those a reasoning model spent before its reply (as `usage` reports them)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Barcode:
    text: str
    format: str
    box: tuple[float, float, float, float] | None = None


