"""Tiny models of real architectures, built offline with random weights:

- a text router (SmolLM2's Llama architecture at width 64, with SmolLM2's tokenizer): the GPU recipe's text code path
  at CPU cost (test_trl_train.py);
- LLaVA (a 2-layer CLIP tower on 32-pixel images, 4 image tokens, and a 2-layer Llama decoder of width 64, SmolLM2's
  own architecture) and its processor (CLIP's image processor with the packaged SmolLM2 tokenizer plus the `<image>`
  token): what `maestro train-lm --model` and `lm:transformers:` load on CPU (test_vlm_router.py);
- Qwen2.5-VL (the architecture of the Qwen2.5-VL-7B card: a 2-block vision tower with window attention, patches of
  14 merged 2x2, and a 2-layer decoder of width 128 with multimodal rotary positions), its image processor and the
  SmolLM2 tokenizer plus Qwen's vision tokens, under Qwen's chat template: what vLLM's CPU build serves
  (test_vllm_vision.py). Its processor is written as files, not built: transformers' Qwen-VL processors need
  torchvision for their video half, which `.venv/` lacks (its `+cpu` torch cannot load PyPI's torchvision; only
  `.venv-vllm/`, with PyPI's torch, has both).

The CPU tests and the GPU ones share them. Imports only torch, transformers and the package's weight loader, so it
travels to a machine that has only those."""

from __future__ import annotations

from pathlib import Path

import torch

from maestro_graph.policy.lm.weights import cached_hf_folder

TEMPLATE = ("{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
            "{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
            "{%- if part.type == 'image' %}{{ '<image>' }}{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}"
            "{%- endfor %}{%- endif %}{{ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
            "{{ '<|im_start|>assistant\\n' }}{%- endif %}")
"""SmolLM2's ChatML with an `<image>` per image part (the processor expands it into the image's patch tokens)."""


TINY_DECODER = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 8192, "tie_word_embeddings": True}
"""SmolLM2's architecture (a Llama decoder) at a tiny size: LLaVA's decoder here, and the whole of the tiny text
router."""


def build_tiny_llama(folder: Path) -> Path:
    """Save a tiny random SmolLM2 (seed 0; a `TINY_DECODER` Llama) with SmolLM2's own tokenizer and chat template into
    `folder`; returns `folder`. A text router whose training steps take seconds, where the real 135M model's take a
    minute and more on 2 cores."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(cached_hf_folder())
    config = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **TINY_DECODER)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


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
        text_config={"model_type": "llama", "vocab_size": len(tokenizer), **TINY_DECODER},
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 32, "patch_size": 16},
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


QWEN_TEMPLATE = (
    "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}{%- if message.content is string %}"
    "{{ message.content }}{%- else %}{%- for part in message.content %}"
    "{%- if part.type == 'image' or part.type == 'image_url' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}{{ '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
"""Qwen2.5-VL's ChatML, each image part one `<|image_pad|>` between its vision tokens (the processor expands it)."""
QWEN_VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
QWEN_MAX_PIXELS = 28 * 28 * 64
"""The tiny model's image processor bound: at most 64 image tokens per image, so CPU and small GPUs serve it fast."""


def _save_tiny_qwen(folder: Path, model_class: type, config_class: type, patch_size: int, max_pixels: int, *,
                    text: dict, vision: dict) -> Path:
    """Save a tiny Qwen-VL (seed 0) of `model_class` into `folder`: SmolLM2's tokenizer with Qwen's vision tokens
    and chat template, a 2-layer decoder of width 128 (`text` adds its rotary settings), a 2-block vision tower of
    width 64 with patches of `patch_size` merged 2x2 (`vision` adds what the architecture has of its own), and the
    image processor bounded at `max_pixels`; returns `folder`."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(cached_hf_folder())
    tokenizer.add_special_tokens({"additional_special_tokens": list(QWEN_VISION_TOKENS)})
    tokenizer.chat_template = QWEN_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_VISION_TOKENS}
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id}
    config = config_class(
        text_config={"vocab_size": len(tokenizer), "hidden_size": 128, "intermediate_size": 256,
                     "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "max_position_embeddings": 8192, "tie_word_embeddings": True, **special, **text},
        vision_config={"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 1, "out_hidden_size": 128,
                       "patch_size": patch_size, "spatial_merge_size": 2, "temporal_patch_size": 2, **vision},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True, **special)
    torch.manual_seed(0)
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    Qwen2VLImageProcessorPil(min_pixels=(4 * patch_size) ** 2, max_pixels=max_pixels, patch_size=patch_size,
                             merge_size=2, temporal_patch_size=2).save_pretrained(folder)
    return folder


def build_tiny_qwen_vl(folder: Path) -> Path:
    """Save a tiny Qwen2.5-VL (seed 0; window attention, patches of 14), its tokenizer, image processor and chat
    template into `folder`; returns `folder`."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    return _save_tiny_qwen(
        folder, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLConfig, 14, QWEN_MAX_PIXELS,
        text={"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]}},
        vision={"window_size": 56, "fullatt_block_indexes": [1]})


QWEN3_MAX_PIXELS = 32 * 32 * 64
"""The tiny Qwen3-VL's image processor bound (patches of 16 merged 2x2): at most 64 image tokens per image."""


def build_tiny_qwen3_vl(folder: Path) -> Path:
    """Save a tiny Qwen3-VL (seed 0; the Qwen3-VL-8B card's architecture: patches of 16, deepstack features,
    interleaved multimodal rotary positions) like `build_tiny_qwen_vl`; returns `folder`."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    return _save_tiny_qwen(
        folder, Qwen3VLForConditionalGeneration, Qwen3VLConfig, 16, QWEN3_MAX_PIXELS,
        text={"head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                  "mrope_section": [8, 12, 12], "mrope_interleaved": True}},
        vision={"num_position_embeddings": 256, "deepstack_visual_indexes": [1]})
