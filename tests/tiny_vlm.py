"""A tiny vision-language model of a real architecture, built offline: LLaVA (a 2-layer CLIP tower on 32-pixel images,
4 image tokens, and a 2-layer Llama decoder of width 64, SmolLM2's own architecture) with random weights, and its
processor (CLIP's image processor with the packaged SmolLM2 tokenizer plus the `<image>` token). What
`maestro train-lm --model` and `lm:transformers:` load; the CPU tests (test_vlm_router.py) and the GPU ones
(test_gpu.py) share it. Imports only torch, transformers and the package's weight loader, so it travels to a
machine that has only those."""

from __future__ import annotations

from pathlib import Path

import torch

from maestro_graph.policy.lm.weights import cached_hf_folder

TEMPLATE = ("{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}{%- if message.content is string %}"
            "{{ message.content }}{%- else %}{%- for part in message.content %}{%- if part.type == 'image' %}"
            "{{ '<image>' }}{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}"
            "{{ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
            "{%- endif %}")
"""SmolLM2's ChatML with an `<image>` per image part (the processor expands it into the image's patch tokens)."""


def build_tiny_llava(folder: Path) -> Path:
    """Save the model (seed 0) and its processor into `folder` with save_pretrained; returns `folder`."""
    from transformers import AutoTokenizer, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(cached_hf_folder())
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tokenizer.chat_template = TEMPLATE
    processor = LlavaProcessor(image_processor=CLIPImageProcessorPil(size={"shortest_edge": 32},
                                                                     crop_size={"height": 32, "width": 32}),
                               tokenizer=tokenizer, patch_size=16, vision_feature_select_strategy="default",
                               chat_template=TEMPLATE, num_additional_image_tokens=1)
    config = LlavaConfig(
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "max_position_embeddings": 8192, "tie_word_embeddings": True},
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 16},
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
