#!/usr/bin/env bash
# One prepared GPU check for issue 24 (run once, in the repository root, within about 8 minutes):
#   (a) environment; (b) J4 (pfl-research's CIFAR-10 workload) through the vectorized engine for the
#   full 1,500 rounds in fp32, the sequential engine for a few rounds, engine: auto's choice;
#   (c) J4 end to end under a Trainer in 32-true, 16-mixed and bf16-mixed with test accuracy;
#   (d) every shipped config with built-in data for 2 rounds through the CLI on the GPU;
#   (e) TF32 and torch.compile on the J4 step; (f) pfl-research 0.6.0 on J4 (GPU_CHECK_PFL_ROUNDS, default 1,500).
# Every step has its own time limit (and stops itself a little before it); a step that fails or
# runs out of time does not stop the next. Results go to $OUT as they are measured:
#   gpu_check.log      everything every step printed, with a header and exit status per step
#   gpu_results.jsonl  one JSON record per measurement / progress point / config / step status
#   gpu_summary.md     the tables (written last from gpu_results.jsonl; rerun: python3 -m bench.gpu_j4 summary)
#   env.txt            nvidia-smi, the wheel installs, the Python path used
#   config_errors.log  the output tail of every config that failed
# GPU_CHECK_CPU=1 shrinks everything (20 users, cohort 4, 2 rounds, accelerator cpu) to check the
# script itself on a machine without a GPU. GPU_CHECK_BUDGET (seconds, default 480 / 1200 on CPU) caps
# the whole run: later steps get what is left. GPU_CHECK_ONLY=a,b runs only configs whose names contain a or b;
# GPU_CHECK_STEPS=env,configs runs only those steps (default: all; a name before its first dash, e.g. j4, or a
# whole one, e.g. j4-vectorized-fp32); GPU_CHECK_EXTRA="--trainer.precision
# 16-mixed" adds arguments to every config's command line.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log RES=$OUT/gpu_results.jsonl ENV=$OUT/env.txt ERR=$OUT/config_errors.log
CPU=${GPU_CHECK_CPU:-0}
if [ "$CPU" = 1 ]; then
  PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
  BUDGET=${GPU_CHECK_BUDGET:-1200}
  SIZE="--users 20 --cohort 4"; VEC_ROUNDS=2; SEQ_ROUNDS=2; MIXED_ROUNDS=2; EVAL_AT=1,2; SPEED_ROUNDS=1
  ACCEL=cpu; JOBS=2; CONFIG_BUDGET=420; PRECISIONS="32-true bf16-mixed"  # 16-mixed needs CUDA
else
  PY=${PYTHON:-python3}
  BUDGET=${GPU_CHECK_BUDGET:-480}
  SIZE=""; VEC_ROUNDS=1500; SEQ_ROUNDS=60; MIXED_ROUNDS=300; EVAL_AT=300,1500; SPEED_ROUNDS=40
  ACCEL=gpu; JOBS=8; CONFIG_BUDGET=100; PRECISIONS="32-true 16-mixed bf16-mixed"
fi
START=$(date +%s)

# Packages the device lacks travel as wheels in .whl/ (the CLI's jsonargparse, docstring-parser and
# typeshed-client: pure Python); one at a time, so one that does not fit does not keep the others out.
SITE=$(mktemp -d /tmp/gpu_check_site.XXXX)
{
  echo "== $(date -u +%FT%TZ) repo $(pwd) python $($PY -c 'import sys; print(sys.version)' 2>&1)"
  nvidia-smi 2>&1 || echo "(no nvidia-smi)"
  for wheel in .whl/*.whl; do
    [ -e "$wheel" ] || { echo "no wheels in .whl/"; break; }
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$wheel" \
      && echo "installed $wheel" || echo "FAILED to install $wheel"
  done
} >> "$ENV" 2>&1
# The package is not installed there: a folder of links gives it its installed layout
# (lightning_fl.callbacks and lightning_fl.datamodules live in the top-level folders).
SHIM=$(mktemp -d /tmp/gpu_check_shim.XXXX)
mkdir "$SHIM/lightning_fl"
for entry in lightning_fl/*; do ln -s "$(pwd)/$entry" "$SHIM/lightning_fl/"; done
ln -s "$(pwd)/callbacks" "$SHIM/lightning_fl/callbacks"
ln -s "$(pwd)/datamodules" "$SHIM/lightning_fl/datamodules"
export PYTHONPATH=$SHIM:$SITE:$(pwd)${PYTHONPATH:+:$PYTHONPATH}
# `python -m` would put the working directory (the repository, whose lightning_fl/ lacks those two
# folders) before PYTHONPATH; safe-path mode (Python >= 3.11) leaves it out.
export PYTHONSAFEPATH=1 PYTHONUNBUFFERED=1
echo "PYTHONPATH=$PYTHONPATH" >> "$ENV"

# step NAME LIMIT COMMAND...: run with min(LIMIT, what the budget leaves less 20 s for the summary).
step() {
  local name=$1 limit=$2 left began rc
  shift 2
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [ "$name" != summary ] && ! [[ ",$GPU_CHECK_STEPS," == *",${name%%-*},"* ]] \
      && ! [[ ",$GPU_CHECK_STEPS," == *",$name,"* ]]; then
    return
  fi
  left=$((START + BUDGET - 20 - $(date +%s)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "===== $name SKIPPED (budget spent)" >> "$LOG"
    printf '{"step": "status", "name": "%s", "rc": "skipped", "seconds": 0, "limit": %s}\n' "$name" "$limit" >> "$RES"
    return
  fi
  echo "===== $name (limit ${limit}s) $(date -u +%T)" >> "$LOG"
  began=$(date +%s)
  GPU_CHECK_STEP_LIMIT=$limit timeout -k 10 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  echo "===== $name exit $rc after $(( $(date +%s) - began ))s" >> "$LOG"
  printf '{"step": "status", "name": "%s", "rc": %s, "seconds": %s, "limit": %s}\n' \
    "$name" "$rc" "$(( $(date +%s) - began ))" "$limit" >> "$RES"
}
J4="$PY -m bench.gpu_j4"
# budget: the seconds of training a step allows itself; its limit adds start-up and data set-up.
step env 90 $J4 env --results "$RES"
step j4-vectorized-fp32 200 $J4 harness --label j4-vectorized-fp32 --results "$RES" $SIZE --engine vectorized \
  --rounds $VEC_ROUNDS --eval-at $EVAL_AT --budget 150
step j4-sequential-fp32 70 $J4 harness --label j4-sequential-fp32 --results "$RES" $SIZE --engine sequential \
  --rounds $SEQ_ROUNDS --progress 10 --budget 35
for precision in $PRECISIONS; do
  step "j4-trainer-$precision" 75 $J4 trainer --label "j4-trainer-$precision" --results "$RES" $SIZE \
    --precision "$precision" --engine auto --rounds $MIXED_ROUNDS --budget 40
done
step configs $((CONFIG_BUDGET + 50)) env OMP_NUM_THREADS=2 $PY -m bench.gpu_configs --results "$RES" --errors "$ERR" --accelerator $ACCEL \
  --rounds 2 --jobs $JOBS --timeout 110 --budget $CONFIG_BUDGET ${GPU_CHECK_ONLY:+--only $GPU_CHECK_ONLY} \
  ${GPU_CHECK_EXTRA:+--extra "$GPU_CHECK_EXTRA"}
step speedups 120 $J4 speedups --results "$RES" $SIZE --rounds $SPEED_ROUNDS --budget 30
# (g) a million clients with lazy client data, each cohort staged on the GPU (bench/million.py; no SCAFFOLD row).
step million 150 $PY -m bench.million --rounds 3 --no-scaffold --accelerator $ACCEL ${GPU_CHECK_MILLION:-}
# (f) pfl-research 0.6.0 itself on J4 (bench/pfl_j4.py), its wheels carried in .whl/pfl/ (not a dependency of
# the project: a site folder of its own); progress lines every 50 rounds, so a cut run still gives a rate.
PFL_SITE=$(mktemp -d /tmp/gpu_check_pfl.XXXX)
# One wheel at a time: .whl/pfl/ holds multiprocess for Python 3.11 and 3.12, and only one of them installs.
step pfl ${GPU_CHECK_PFL_LIMIT:-150} bash -c "for w in .whl/pfl/*.whl; do $PY -m pip install -q --no-index --no-deps \
  --no-compile --target $PFL_SITE \$w 2>/dev/null || echo skipped \$w; done
  PYTHONPATH=$PFL_SITE:\$PYTHONPATH $PY -m bench.pfl_j4 --rounds ${GPU_CHECK_PFL_ROUNDS:-1500} --progress 50 $SIZE --out $OUT"
BUDGET=$((BUDGET + 20)) step summary 30 $J4 summary --results "$RES" --out "$OUT/gpu_summary.md"
echo "done in $(( $(date +%s) - START ))s; results in $OUT" | tee -a "$LOG"
rm -rf "$SHIM" "$SITE" "$PFL_SITE"
