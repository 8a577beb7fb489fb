"""A local Hugging Face `transformers` causal LM as a `chat` expert (the registry's `transformers` backend).

Where the weights come from and how they load (a folder, a hub id, or a GGUF file inside a package, de-quantised
once into the model cache) is maestro_graph/backends/hf.py, shared with the LM router. The weights load when the
expert is constructed, which the registry does on first use, outside the call's timeout. Decoding is greedy, so a
reply depends only on the messages.
"""

from __future__ import annotations

import threading

from ..backends.hf import load_causal_lm, local_model_problem, resolve_model_source
from ..errors import ExpertError
from .protocols import ChatReply

__all__ = ["TransformersChatExpert"]


def _message_text(message: dict) -> str:
    """The text of one OpenAI-format message; image parts are refused (this model reads text only)."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    texts = []
    for part in content or ():
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        else:
            raise ExpertError(f"this chat model reads text only; the messages hold a {kind!r} part")
    return "\n".join(texts)


class TransformersChatExpert:
    """Greedy chat with a local causal LM, on the GPU when there is one (`backends.hf.default_device`). `threads`
    sets torch's intra-op thread count when the model loads (process-wide: torch has one pool)."""

    def __init__(
        self,
        model: str | None = None,
        gguf_package: str | None = None,
        gguf_file: str | None = None,
        max_new_tokens: int = 128,
        threads: int | None = None,
    ):
        self.source, self.gguf_file = resolve_model_source(model, gguf_package, gguf_file)
        self.max_new_tokens = max_new_tokens
        self.threads = threads
        self._lock = threading.Lock()
        self._tokenizer, self._model = load_causal_lm(self.source, self.gguf_file, threads=threads)

    @classmethod
    def unavailable_reason(
        cls, model: str | None = None, gguf_package: str | None = None, gguf_file: str | None = None, **_: object
    ) -> str | None:
        return local_model_problem(model, gguf_package, gguf_file)

    def chat(self, messages: list[dict]) -> ChatReply:
        if not messages:
            raise ExpertError("chat needs at least one message")
        conversation = [{"role": m.get("role", "user"), "content": _message_text(m)} for m in messages]
        import torch

        tokenizer, model = self._tokenizer, self._model
        with self._lock:  # one generate at a time: the model is shared and torch already uses every thread given
            encoded = tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, return_tensors="pt", return_dict=True
            ).to(model.device)
            prompt_tokens = encoded["input_ids"].shape[1]
            with torch.inference_mode():
                output = model.generate(
                    **encoded,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.eos_token_id if tokenizer.pad_token_id is None else tokenizer.pad_token_id,
                )
        completion = output[0, prompt_tokens:]
        text = tokenizer.decode(completion, skip_special_tokens=True).strip()
        return ChatReply(text=text, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion.shape[0]))
