#!/usr/bin/env bash
# One device lease of issue 24's training-length curves (items 1 and 5), resumable across leases.
#
# Trains the β-VAE at Table 2's settings (β 32 / 8, 6 / 5 latents, lr 1e-4, batch 64, fp32) on the Shapes3D-like
# (10,10,10,4,4,4) and/or dSprites-like (3,6,10,16,16) grid at 64×64 (the paper's resolution, so w = 1 is Table 2's
# balance), 5 seeds per dataset as one vmapped job (benchmarks/long_training.py), the jobs side by side on the GPU,
# extended leg by leg toward 300k steps until DEADLINE_S seconds after this script started.
#
# A 15-minute lease reaches ≈ 70k steps, the paper trains 300k, so the curves continue over leases: with CARRY
# (default .gpu-carry, ignored by git, named in the device call's `carry`) holding
#   CARRY/<job>.zarr.tar.xz        the job's store <job>.zarr, rendered on the CPU (else rendered there: ≈ 170 s for
#                                  Shapes3D; `tar -C DIR -cf - shapes3d64.zarr | xz -9e -T2 > CARRY/shapes3d64.zarr.tar.xz`:
#                                  4.8 MB, so the store, 5 run folders, the wheels and the repo fit the 64 MiB carry)
#   CARRY/<job>_s<seed>.tar.xz     a run folder returned by the previous lease (resumed from its checkpoint)
# and the lease returns the run folders of the jobs in RETURN (default: every job) as $OUT/<job>_s<seed>.tar.xz (≈ 7.1 MB
# each: weights and Adam state) beside the rows of every job, $OUT/long_training.jsonl (a row's `tag` names its job), and
# $OUT/log.txt (the jobs' own logs appended). Copy the tars into CARRY for the next lease. At most 8 files come back from
# a call: the two text files and 5 seeds of one job. So a second job beside the first (the GPU was 30-45 % busy with one
# on 2026-11-26) runs with RETURN naming the first only: its rows come back, its run folders stay behind.
#
# usage (device tool, repo root; wheels of zarr/numcodecs/donfig/google-crc32c [+ dask/partd/locket to render] in .whl):
#   DEADLINE_S=530 ONLY=shapes3d64 STEPS=2000,10000,25000,40000,55000,70000 bash benchmarks/gpu_long_training.sh
# One call runs at most 600 s (the device tool's limit; timeout_s=590 for the line above). A lease's second call on the
# still-warm machine finds WORK's store and run folders where the first left them and resumes from their checkpoints
# (a 2k-step leg first measures the rate); give it DEADLINE_S = the lease's budget_left_s minus ≈ 60 s. The machine's
# start took ≈ 190 s of the 900 s on 2026-11-26 (session 21), ≈ 30 s in session 14.
set -u
START=$(date +%s)
DEADLINE_AT=$((START + ${DEADLINE_S:-450}))
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
W=${WORK:-/tmp/gpu-work}; mkdir -p "$W"
CARRY=${CARRY:-.gpu-carry}
LOG="$OUT/log.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
{ date -u +%FT%TZ; git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader;
  nproc; $PY -c "import torch, zarr; print('torch', torch.__version__, 'zarr', zarr.__version__, 'cuda', torch.cuda.is_available())"; } >> "$LOG" 2>&1
probe() { $PY -c "import sys; from probe.cli import main; sys.exit(main())" "$@"; }
untar_xz() {  # archive folder: Python's lzma, so no xz binary is needed there
  $PY -c "import sys, tarfile; tarfile.open(sys.argv[1], 'r:xz').extractall(sys.argv[2], filter='data')" "$1" "$2"
}

JOBS_WANTED=${ONLY:-shapes3d64 dsprites64}
JOBS_RETURNED=${RETURN:-$JOBS_WANTED}
ROWS="$OUT/long_training.jsonl"
# a job names its store and its model settings; two jobs may share a store
store_name() { case $1 in dsprites64full*) echo dsprites64full ;; dsprites64*) echo dsprites64 ;; s3d32near-*-w[0-9]*) echo "${1%-w*}" ;;
  s3d64near-w[0-9]*) echo shapes3d64near ;; *) echo "$1" ;; esac; }
# s3d32near-<variant> jobs: a 32×32 closer-camera store carried in (orig, or a mod store written by `probe perturb
# apply` on the CPU: CARRY/s3d32near-<variant>.zarr.tar.xz), trained at the cpu preset's retrain settings (w 4, lr 5e-4,
# 6 latents) for the seeds in SEEDS (default 0-4; the pipeline's retrain seeds are 100-104). The tar holds the store
# under the job's name: `tar -C DIR -cf - s3d32near-mod.zarr | xz -6 -T2 > CARRY/s3d32near-mod.zarr.tar.xz`. Three
# such jobs × 5 seeds return 15 run folders, over a call's 8 files: RETURN=none brings back the rows only.
# s3d32near-<variant>-w<N>: the same store at reconstruction weight N (w 2: the KL weighs 2× Table 2's balance; w 1: 4×).
# Issue 24, session 27: at w 4 the β-VAE often holds a hue as a circle on two latents (MIG ≈ 0.3); at w 1 (the old
# quick presets, default camera) it kept two latents open, each room hue cut onto one; w 2 is the variable between.
# s3d64near-w<N>: the 64×64 closer-camera store (shapes3d64near) at lr 5e-4, 6 latents, reconstruction weight N (w 1 is
# Table 2's balance there, w 2 the KL at half of it): the CPU curves of issue 24's fifty-first to fifty-third legs
# (benchmarks/results/learning_curves_shapes3d64near_w{1,2}_lr5e-4_cpu.jsonl) continued on a GPU, e.g.
#   ONLY="s3d64near-w2 s3d64near-w1" RETURN=none SEEDS=0,1,2,3,4,5,6,7,8,9 STEPS=20000,40000,60000 ...
# (ten seeds' run folders are more than a call's 8 files: RETURN=none brings back the rows; a lease's second call
# still finds the run folders in WORK while the machine is warm)
store_of() { echo "$W/$(store_name "$1").zarr"; }
job_sets() {  # a job's hyperparameters beyond Table 2's
  case $1 in
    dsprites64b32) echo "--set beta=32" ;;  # 4x Table 2's KL weight (issue 24: dSprites-like's next single variable)
    s3d32near-*-w[0-9]*|s3d64near-w[0-9]*) echo "--set lr=5e-4 --set reconstruction_weight=${1##*-w} --set num_latent=6" ;;
    s3d32near-*) echo "--set lr=5e-4 --set reconstruction_weight=4 --set num_latent=6" ;;
  esac
}
prepare_store() {  # store name: from CARRY, else rendered
  local name=$1 store="$W/$1.zarr"
  if [ ! -d "$store" ] && [ -f "$CARRY/$name.zarr.tar.xz" ]; then
    untar_xz "$CARRY/$name.zarr.tar.xz" "$W" || return 1
  fi
  if [ ! -d "$store" ]; then
    case $name in
      shapes3d64) probe datasets generate shapes3d --out "$store" --resolution 64 --factor-sizes 10,10,10,4,4,4 --processes \
                    --workers "$(nproc)" >/dev/null ;;
      shapes3d64near) probe datasets generate shapes3d --out "$store" --resolution 64 --factor-sizes 10,10,10,4,4,4 --processes \
                    --workers "$(nproc)" --option camera_distance=2.6 --option fov_deg=40 >/dev/null ;;  # the regime preset's camera
      dsprites64) probe datasets generate dsprites --out "$store" --resolution 64 --factor-sizes 3,6,10,16,16 --workers 4 >/dev/null ;;
      # the official grid (737,280 images, 3 GB): at 32×32 its positions are under a pixel apart for the largest sprites
      dsprites64full) probe datasets generate dsprites --out "$store" --resolution 64 --factor-sizes 3,6,40,32,32 \
                    --workers "$(nproc)" >/dev/null ;;
    esac || return 1
  fi
}
prepare_runs() {  # job: the run folders the last lease returned
  local job=$1
  mkdir -p "$W/runs-$job"
  # a carried run folder only where WORK has none: a lease's second call finds the first call's newer checkpoints in
  # WORK, and unpacking CARRY over them set the runs back to the last lease's step (it did, on 2026-11-27: 62k → 30k)
  local t seed
  for t in "$CARRY/${job}"_s*.tar.xz; do
    [ -f "$t" ] || continue
    seed=${t%.tar.xz}; seed=${seed##*_s}
    if ls -d "$W/runs-$job"/*-s"$seed" >/dev/null 2>&1; then echo "$job seed $seed: WORK's run folder kept"; continue; fi
    untar_xz "$t" "$W/runs-$job"
  done
  return 0
}
t=$(date +%s)
for name in $(for job in $JOBS_WANTED; do store_name "$job"; done | sort -u); do prepare_store "$name" >> "$LOG" 2>&1 & done; wait
for job in $JOBS_WANTED; do prepare_runs "$job" >> "$LOG" 2>&1; done
echo "stores ready in $(( $(date +%s) - t )) s; runs carried in: $(ls "$W"/runs-*/ 2>/dev/null | tr '\n' ' ')" | tee -a "$LOG"
( while sleep 15; do nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader; done ) >> "$LOG" 2>&1 &
MON=$!
train() {  # job [engine]; if the vmapped engine fails (not the timeout) before any row, the loop engine
  local job=$1 engine=${2:-${ENGINE:-auto}} left rc
  left=$(( DEADLINE_AT + 20 - $(date +%s) ))   # the leg in flight is cut 20 s after the deadline: the tars still go back
  [ "$left" -ge 30 ] || { echo "$job: no time left for the $engine engine"; return 1; }  # (`timeout 0` = no limit)
  timeout "$left" $PY benchmarks/long_training.py --store "$(store_of "$job")" --model beta-vae --seeds "${SEEDS:-0,1,2,3,4}" \
      --out "$W/runs-$job" --rows "$ROWS" --deadline-at "$DEADLINE_AT" --tag "$job" \
      --engine "$engine" --checkpoint-every 5000 ${STEPS:+--steps $STEPS} $(job_sets "$job") >> "$W/log_$job.txt" 2>&1
  rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 124 ] || grep -qs "\"tag\": \"$job\"" "$ROWS" || [ "$engine" = loop ] || train "$job" loop
  return $rc
}
# wait on the training jobs by pid: a bare `wait` would also wait on the endless monitor loop (it did, on 2026-11-26,
# and held the GPU idle for four minutes until the call's timeout)
for job in $JOBS_WANTED; do : > "$W/log_$job.txt"; done  # this call's log only (WORK outlives a call)
PIDS=()
for job in $JOBS_WANTED; do train "$job" & PIDS+=($!); done
for pid in "${PIDS[@]}"; do wait "$pid"; echo "job $pid rc $?" | tee -a "$LOG"; done
kill $MON 2>/dev/null
for job in $JOBS_RETURNED; do
  for run in "$W/runs-$job"/*/; do
    [ -f "$run/config.json" ] || continue
    seed=${run%/}; seed=${seed##*-s}
    $PY -c "import sys, tarfile; tarfile.open(sys.argv[1], 'w:xz').add(sys.argv[2], arcname=sys.argv[3])" \
        "$OUT/${job}_s$seed.tar.xz" "$run" "$(basename "$run")" &
  done
done
wait
for job in $JOBS_WANTED; do { echo "== $job"; cat "$W/log_$job.txt"; } >> "$LOG" 2>&1; tail -n 2 "$W/log_$job.txt"; done
echo "total $(( $(date +%s) - START )) s" | tee -a "$LOG"
