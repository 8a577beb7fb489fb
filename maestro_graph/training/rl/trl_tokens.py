"""The tokens of a multi-turn router episode as TRL's trainers take them: the prompt, then every later turn's tokens
with a mask that is 1 on the router's own turns and 0 on the observations the graph wrote (no loss there). A
vision-language model's processor renders the image parts into the tokens the model reads."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError

__all__ = ["chat_ids", "episode_tokens", "sees_images", "turn_tokens"]


def sees_images(processing_class: Any) -> bool:
    """Whether the model being trained is a vision-language model: its processing class is a processor with an
    image processor (a plain tokenizer has none)."""
    return hasattr(processing_class, "image_processor")


def chat_ids(tokenizer: Any, messages: list[dict], generation_prompt: bool) -> list[int]:
    """Token ids of a conversation; with a processor, the image parts' tokens expanded as the model reads them."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                        return_dict=True)["input_ids"]
    return list(ids[0] if ids and isinstance(ids[0], list) else ids)  # a processor answers a batch of one


def turn_tokens(tokenizer: Any, messages: list[dict]) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, completion ids, mask) of a conversation: the prompt is system + user with the generation prompt;
    each later turn's tokens are the template's growth, 1 for the assistant's own tokens and 0 for the rest."""
    ids = chat_ids(tokenizer, messages[:2], True)
    prompt_len = len(ids)
    mask: list[int] = []
    for k in range(2, len(messages)):
        own = messages[k]["role"] == "assistant"
        full = chat_ids(tokenizer, messages[: k + 1], not own)
        if full[: len(ids)] != ids:
            raise ConfigError("the chat template re-renders earlier turns differently, so a multi-turn completion "
                              "cannot be split into turns; use a template whose renderings are prefixes", field="model")
        mask += [int(own)] * (len(full) - len(ids))
        ids = full
    return ids[:prompt_len], ids[prompt_len:], mask


def episode_tokens(tokenizer: Any, messages: list[dict],
                   max_length: int) -> tuple[list[int], list[int], list[int], str | None]:
    """`turn_tokens` as a GRPO trainer takes them, and what was changed to fit: an episode over `max_length` is cut;
    an episode the graph ended without asking the router (every skill declined the question from its text) has no
    completion, and TRL needs one token, so it gets an end-of-sequence token masked out: it joins its group's reward
    statistics and trains nothing."""
    prompt_ids, completion_ids, mask = turn_tokens(tokenizer, messages)
    if not completion_ids:
        return prompt_ids, [getattr(tokenizer, "tokenizer", tokenizer).eos_token_id], [0], "no router turn"
    room = max(1, max_length - len(prompt_ids))
    if len(completion_ids) > room:
        return (prompt_ids, completion_ids[:room], mask[:room],
                f"episode of {len(prompt_ids) + len(completion_ids)} tokens cut to max_length={max_length}")
    return prompt_ids, completion_ids, mask, None

