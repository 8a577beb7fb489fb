#!/usr/bin/env bash
# Start the `vllm serve` processes a registry names (GPU machines): one per card with the `vision-chat` capability
# and an `openai` backend on a loopback base_url (127.0.0.1 or localhost), serving the card's `backend.model` (a
# Hugging Face id or a local folder) under that name on the base_url's port:
#   scripts/serve-vlm.sh [--dry-run] [REGISTRY]        (REGISTRY defaults to configs/registry-vlm.yaml)
# The registry is read as Maestro reads it (`extends:` included). --dry-run prints the commands and starts nothing.
# Each server logs to $LOG_DIR/<card>.log (default runs/vlm-serve); the script waits until every server answers
# /v1/models, then stays in the foreground: Ctrl-C or SIGTERM stops them all. Variables: VLLM (the vllm command,
# default `vllm`), GPU_MEMORY (the share of GPU memory each server takes, default 0.9 split evenly among them),
# MAX_MODEL_LEN (default 8192), MAX_IMAGES (images per request, default 4). Why each: docs/vision-language.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
REGISTRY=${1:-configs/registry-vlm.yaml}
PYTHON=${PYTHON:-.venv/bin/python}
# one line per server: card name, port, model
mapfile -t SERVERS < <("$PYTHON" - "$REGISTRY" <<'PY'
import sys
from urllib.parse import urlparse

from maestro_graph.registry.config import OpenAIBackend, load_config

for card in load_config(sys.argv[1]).models:
    backend = card.backend
    if "vision-chat" not in card.capabilities or not isinstance(backend, OpenAIBackend):
        continue
    url = urlparse(backend.base_url)
    if url.hostname in ("127.0.0.1", "localhost") and url.port:
        print(card.name, url.port, backend.model)
PY
)
if [[ ${#SERVERS[@]} -eq 0 ]]; then
  echo "no vision-chat card of $REGISTRY has an openai backend on a loopback port: nothing to serve" >&2
  exit 1
fi
VLLM=${VLLM:-vllm}
GPU_MEMORY=${GPU_MEMORY:-$(awk -v n=${#SERVERS[@]} 'BEGIN { printf "%.2f", 0.9 / n }')}
LOG_DIR=${LOG_DIR:-runs/vlm-serve}
PIDS=()
stop() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait; }
trap stop EXIT INT TERM
for server in "${SERVERS[@]}"; do
  read -r NAME PORT MODEL <<<"$server"
  CMD=("$VLLM" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name "$MODEL"
       --gpu-memory-utilization "$GPU_MEMORY" --max-model-len "${MAX_MODEL_LEN:-8192}"
       --limit-mm-per-prompt "{\"image\": ${MAX_IMAGES:-4}}")
  echo "$NAME: ${CMD[*]}"
  if [[ $DRY -eq 0 ]]; then
    mkdir -p "$LOG_DIR"
    "${CMD[@]}" >"$LOG_DIR/$NAME.log" 2>&1 &
    PIDS+=($!)
  fi
done
[[ $DRY -eq 1 ]] && { trap - EXIT; exit 0; }
for server in "${SERVERS[@]}"; do
  read -r NAME PORT MODEL <<<"$server"
  until curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null; do
    for pid in "${PIDS[@]}"; do
      kill -0 "$pid" 2>/dev/null || { echo "a server exited; see $LOG_DIR/*.log" >&2; exit 1; }
    done
    sleep 5
  done
  echo "$NAME is up on http://127.0.0.1:$PORT/v1"
done
echo "all ${#SERVERS[@]} servers are up; Ctrl-C stops them"
wait
