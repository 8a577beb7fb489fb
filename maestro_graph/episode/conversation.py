"""The conversation rule, one for every door (`maestro serve` threads and OpenAI `messages`, the CLI's `--thread`,
LangServe, the Agent Server, a parent graph): what a new question of a conversation is about.

A question is about the images sent with it. A follow-up that sends none is about the conversation's latest images:
those of the latest earlier turn that had any (an earlier user message of an OpenAI chat, an earlier human message
of a chat run), else the thread's (what its latest question with images was about). Its history is the conversation
before it: the turns the client sent, else the thread's finished episodes, the last `MAX_HISTORY_TURNS` of them.
Choices belong to one question only. The graph's intake node applies the rule; nothing else does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AnyMessage, HumanMessage
from pydantic import TypeAdapter

from ..types import Turn

__all__ = ["MAX_HISTORY_TURNS", "conversation_images", "history", "human_parts", "spoken"]

MAX_HISTORY_TURNS = 8
"""The most earlier turns of a conversation that reach the skills (the latest ones): a follow-up refers to what
was just said, and a small chat model's context is short."""

_TURNS = TypeAdapter(list[Turn])


def human_parts(message: AnyMessage) -> tuple[str, list[str]]:
    """The text and image references of a human message (OpenAI/LangChain content parts)."""
    if isinstance(message.content, str):
        return message.content, []
    texts, images = [], []
    for part in message.content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(part.get("text", ""))
        elif part.get("type") == "image_url":
            url = part.get("image_url")
            images.append(url.get("url", "") if isinstance(url, dict) else str(url))
        elif part.get("type") == "image" and part.get("base64"):
            images.append(f"data:{part.get('mime_type', 'image/png')};base64,{part['base64']}")
    return "\n".join(t for t in texts if t), images


def history(state: Mapping[str, Any]) -> list[Turn]:
    """The conversation a new question continues: the run's own `history` when it sent one (the answer node
    clears it, so one left from an earlier run is never taken for this run's), else the thread's finished
    episodes (each with its answer's confidence); the last MAX_HISTORY_TURNS turns of it. A malformed `history` (a
    client's) is a ValidationError."""
    sent = state.get("history")
    if sent:
        return _TURNS.validate_python(sent)[-MAX_HISTORY_TURNS:]
    episodes = state.get("episodes") or []
    return [Turn(question=e["question"], answer=e["answer"], confidence=e.get("confidence"))
            for e in episodes[-MAX_HISTORY_TURNS:]]


def spoken(turns: Sequence[Turn]) -> list[Turn]:
    """The turns as the skills read them: what was said, without the images."""
    return [Turn(question=t["question"], answer=t["answer"]) for t in turns]


def conversation_images(sent: Sequence[str], turns: Sequence[Turn], earlier: Sequence[AnyMessage],
                        thread: Sequence[str]) -> list[str]:
    """The images a question is about: `sent` with it; else those of the latest of the client's `turns` that had
    any; else those of the latest `earlier` human message that had any (a chat run's messages before the
    question); else the `thread`'s."""
    if sent:
        return list(sent)
    for turn in reversed(turns):
        if turn.get("images"):
            return list(turn["images"])
    for message in reversed(earlier):
        if isinstance(message, HumanMessage):
            found = human_parts(message)[1]
            if found:
                return found
    return list(thread)
