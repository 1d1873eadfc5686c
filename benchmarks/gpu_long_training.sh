#!/usr/bin/env bash
# One device lease (issue 24, items 1 and 5): the training-length hypothesis on one GPU.
# Renders the Shapes3D-like (10,10,10,4,4,4) and dSprites-like (3,6,10,16,16) grids at 64×64 (the paper's
# resolution, so w = 1 is Table 2's balance), then trains the β-VAE at Table 2's settings (β 32 / 8, 6 / 5 latents,
# lr 1e-4, batch 64, fp32), 5 seeds per dataset as one vmapped job, the two jobs side by side on the GPU, extended leg
# by leg toward 300k steps until DEADLINE_S seconds after this script started. Rows land in $OUT as they are written.
# usage (device tool, repo root, wheels of zarr/numcodecs/donfig/google-crc32c/dask/partd/locket in .whl):
#   DEADLINE_S=450 bash benchmarks/gpu_long_training.sh
set -u
START=$(date +%s)
DEADLINE_AT=$((START + ${DEADLINE_S:-450}))
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
W=${WORK:-/tmp/gpu-work}; mkdir -p "$W"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader;
  nproc; $PY -c "import torch, zarr, dask; print('torch', torch.__version__, 'zarr', zarr.__version__, 'cuda', torch.cuda.is_available())"; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
probe() { $PY -c "import sys; from probe.cli import main; sys.exit(main())" "$@"; }
t=$(date +%s)
[ -d "$W/ds64.zarr" ] || probe datasets generate dsprites --out "$W/ds64.zarr" --resolution 64 --factor-sizes 3,6,10,16,16 --workers 4 >/dev/null 2>"$W/gen-ds.log" &
[ -d "$W/s3d64.zarr" ] || probe datasets generate shapes3d --out "$W/s3d64.zarr" --resolution 64 --factor-sizes ${S3D_SIZES:-10,10,10,4,4,4} --processes \
  --workers "$(nproc)" >/dev/null 2>"$W/gen-s3d.log" || { tail -5 "$W/gen-s3d.log"; exit 4; }
wait
echo "stores rendered in $(( $(date +%s) - t )) s" | tee -a "$OUT/env.txt"
( while sleep 15; do nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader; done ) > "$OUT/gpu_util.csv" 2>&1 &
MON=$!
train() {  # name store [engine]; the vmapped engine's first CUDA run: if it fails before any row, the loop engine
  local name=$1 store=$2 engine=${3:-${ENGINE:-auto}}
  $PY benchmarks/long_training.py --store "$store" --model beta-vae --seeds 0,1,2,3,4 --out "$W/runs-$name-$engine" \
      --rows "$OUT/long_training_$name.jsonl" --deadline-at "$DEADLINE_AT" --tag "$name" --engine "$engine" \
      ${STEPS:+--steps $STEPS} >> "$OUT/log_$name.txt" 2>&1 && return 0
  [ -s "$OUT/long_training_$name.jsonl" ] || [ "$engine" = loop ] || train "$name" "$store" loop
}
# a second call on the same warm machine resumes both (the stores and run folders are kept); ONLY=shapes3d64 trains one
# wait on the training jobs by pid: a bare `wait` would also wait on the endless monitor loop (it did, on 2026-11-26,
# and held the GPU idle for four minutes until the call's timeout)
JOBS=()
if [ "${ONLY:-shapes3d64}" = shapes3d64 ]; then train shapes3d64 "$W/s3d64.zarr" & JOBS+=($!); fi
if [ "${ONLY:-dsprites64}" = dsprites64 ]; then train dsprites64 "$W/ds64.zarr" & JOBS+=($!); fi
for pid in "${JOBS[@]}"; do wait "$pid"; echo "job $pid rc $?"; done
kill $MON 2>/dev/null
tail -n 3 "$OUT"/log_*.txt
echo "total $(( $(date +%s) - START )) s"
