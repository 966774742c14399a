#!/usr/bin/env bash
# On a GPU machine, in ONE device call: trains the small ICL demonstration model
# (tools/icl_model/README.md), exports it, evaluates it on SST-2, and leaves under $OUT what
# the device run may bring back (at most 8 files of at most 16 MiB, 64 MiB in all):
#
#   $OUT/train.log            everything printed, kept even when the run is cut off
#   $OUT/PROVENANCE.json      settings, steps, timings, data hash, commit, metrics, file sha256s
#   $OUT/model/               config.json, model.safetensors.index.json and the bf16 shards; a
#                             shard over 15 MiB comes as NAME.part1of2, NAME.part2of2 (join them
#                             with tools/icl_model/transport.py join). The tokenizer files are
#                             left out: the project has them (/usr/local/share/manyshot/gpt2).
#
#   COMMIT=SHA bash tools/gpu/train_icl_model.sh [DATA_DIR] [train.py flags...]
#
# DATA_DIR defaults to tools/icl_model/work/data (prepare_data.py's output, carried to the
# machine). ICL_MAX_MINUTES / ICL_TOTAL_MINUTES set train.py's budgets (4.5 / 6.0 minutes).
# ICL_TIMEOUT (seconds, default 420) kills a run that overstays them; keep the device call's
# timeout_s a minute or more above it, so that this script still copies the model to $OUT.
set -uo pipefail
out=${OUT:-/tmp/icl-model-out}
mkdir -p "$out"
data=tools/icl_model/work/data
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then data=$1; shift; fi
work=${ICL_WORK:-/tmp/icl-model-work}
rm -rf "$work"
mkdir -p "$work"
log="$out/train.log"
: >"$log"
say() { echo "== $*" | tee -a "$log"; }

say "train_icl_model.sh: commit ${COMMIT:-unknown}, data $data, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$log"
python3 -c 'import sys, torch, numpy
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "numpy", numpy.__version__)' 2>&1 | tee -a "$log"
if [ ! -f "$data/index.json" ]; then
  say "no $data/index.json: run tools/icl_model/prepare_data.py here first and carry its folder"
  exit 2
fi
# Fail fast (seconds, not minutes) on a data or script problem: no torch needed.
python3 tools/icl_model/train.py --data_dir="$data" --out_dir="$work" --dry_run "$@" 2>&1 \
  | tee -a "$log"
status=$?
if [ $status -eq 0 ]; then
  timeout -k 20 "${ICL_TIMEOUT:-420}" python3 -u tools/icl_model/train.py \
    --data_dir="$data" --out_dir="$work" --commit="${COMMIT:-unknown}" \
    --max_minutes="${ICL_MAX_MINUTES:-4.5}" --total_minutes="${ICL_TOTAL_MINUTES:-6.0}" "$@" \
    2>&1 | tee -a "$log"
  status=$?
fi
say "train.py exit status $status"

# Whatever exists is brought back, even after a failure or a timeout.
[ -f "$work/PROVENANCE.json" ] && cp "$work/PROVENANCE.json" "$out/"
if [ -d "$work/model" ]; then
  python3 tools/icl_model/transport.py split "$work/model" "$out/model" \
    --skip=vocab.json --skip=merges.txt 2>&1 | tee -a "$log"
elif [ -f "$work/state_dict.pt" ]; then  # the export failed: the raw weights instead
  mkdir -p "$out/model"
  split -b 15M -d "$work/state_dict.pt" "$out/model/state_dict.pt.part" 2>&1 | tee -a "$log"
fi
files=$(find "$out" -type f | wc -l)
big=$(find "$out" -type f -size +16M | wc -l)
say "$files files under \$OUT ($(du -sh "$out" | cut -f1)); $big over 16 MiB"
find "$out" -type f -printf '%s %P\n' | sort -k2 | tee -a "$log"
if [ "$files" -gt 8 ] || [ "$big" -gt 0 ]; then
  say "WARNING: more than the device run brings back (8 files, 16 MiB each)"
fi
exit $status
