"""The paper's LM router policy: a prompt generated from the cards, a tag parser, the policy, and its backends."""

from .engines import BackendError, LMBackend, OpenAILM, TransformersLM
from .parser import answer_text, parse_action, search_text
from .policy import LM_POLICY_NAMES, LMConfig, LMPolicy, action_regex, action_text, make_lm_policy
from .prompt import (
                     PromptOptions,
                     conversation,
                     final_answer_message,
                     information,
                     option_labels,
                     option_pairs,
                     system_prompt,
                     user_text,
                     with_images,
)

__all__ = [
    "LM_POLICY_NAMES",
    "BackendError",
    "LMBackend",
    "LMConfig",
    "LMPolicy",
    "OpenAILM",
    "PromptOptions",
    "TransformersLM",
    "action_regex",
    "action_text",
    "answer_text",
    "conversation",
    "final_answer_message",
    "information",
    "make_lm_policy",
    "option_labels",
    "option_pairs",
    "parse_action",
    "search_text",
    "system_prompt",
    "user_text",
    "with_images",
]
