#!/usr/bin/env bash
# One leg of a long pipeline run from a frozen worktree, with its workdir outside the repository.
#
#   benchmarks/long_run.sh NAME COMMIT PIPELINE PRESET [probe pipeline run options...]
#   e.g. benchmarks/long_run.sh dsprites-cpu-s47b 4068b46 modify-dsprites cpu
#
# Runs `probe pipeline run PIPELINE --preset PRESET --workdir $PROBE_RUNS/NAME ...` in the background, at `nice $NICE`
# (default 10), from the worktree $PROBE_RUNS/wt-COMMIT (made with its own venv, torch 2.13.0 CPU first, when missing:
# a fresh machine needs nothing else; one that an earlier clone made is linked to this one). The pipeline resumes
# where the previous leg stopped; a stage's digest holds the code version, so every leg of one workdir must come from
# the same commit. Each leg is a line of $PROBE_RUNS/NAME-legs.log (start, commit, the torch kernel set: a run resumed
# under other kernels is another run, README), the pipeline's output goes to $PROBE_RUNS/NAME.log, and its own wall
# times to the workdir's legs.json. Does nothing but say so when a leg of NAME is already running. PROBE_RUNS defaults
# to /root/probe-runs.
# Kernel switches in the environment (ONEDNN_MAX_CPU_ISA=AVX2, ...) pass to the run and are written in the leg's line
# with the CPU model: every leg of one workdir needs the same ones.
# To leave a core to other work, pin the leg: `taskset -c 1 benchmarks/long_run.sh ...` gives one single-threaded
# worker (the pipeline sizes its LocalCluster from the CPUs it may use); `--workers 1` alone gives that worker every
# core's torch threads (probe.pipeline.executors.local_cluster_size), which then compete with the other work.
# FROM=OTHER makes a missing workdir a hard-linked copy of $PROBE_RUNS/OTHER (its finished stages are reused; the
# files the pipeline appends to, its logs, are copied), for a part of a run that adds seeds or models to OTHER's:
#   FROM=shapes3d-cpu-p2-s105 benchmarks/long_run.sh shapes3d-cpu-p2-s106 0535676 modify-shapes3d cpu \
#     --set retrain.first_seed=106 --set retrain.seeds=1 --set retrain.models=beta-vae
set -euo pipefail
if [ $# -lt 4 ]; then
  awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" >&2  # the header comment above
  exit 2
fi
name=$1 commit=$2 pipeline=$3 preset=$4
shift 4
runs=${PROBE_RUNS:-/root/probe-runs}
repo=$(cd "$(dirname "$0")/.." && pwd)
workdir=$runs/$name
worktree=$runs/wt-$commit
mkdir -p "$runs"

running() { pgrep -f -- "--workdir $1( |$)" >/dev/null; }
if running "$workdir"; then
  echo "a leg of $name is already running (pgrep -af -- '--workdir $workdir')"
  exit 0
fi
if [ -n "${FROM:-}" ] && [ ! -d "$workdir" ]; then
  if [ ! -d "$runs/$FROM" ]; then echo "FROM: no workdir $runs/$FROM" >&2; exit 2; fi
  if running "$runs/$FROM"; then echo "FROM: a leg of $FROM is running" >&2; exit 2; fi
  rm -rf "$workdir.tmp"
  cp -al "$runs/$FROM" "$workdir.tmp"
  rm -rf "$workdir.tmp/logs" "$workdir.tmp/pipeline.lock"
  if [ -d "$runs/$FROM/logs" ]; then cp -a "$runs/$FROM/logs" "$workdir.tmp/logs"; fi
  mv "$workdir.tmp" "$workdir"
  echo "made $workdir as a hard-linked copy of $runs/$FROM"
fi
if [ ! -d "$worktree" ]; then
  git -C "$repo" worktree add --detach "$worktree" "$commit"
elif ! git -C "$worktree" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  # The worktree outlived the checkout that made it (each session may get a new clone): its administrative folder
  # (.git/worktrees/NAME) is gone, so git, and the commit every run records, cannot be read there. Link it to this
  # checkout at COMMIT again, and go on only if its files are that commit's.
  admin=$(git -C "$repo" rev-parse --absolute-git-dir)/worktrees/$(basename "$worktree")
  mkdir -p "$admin"
  echo "$worktree/.git" > "$admin/gitdir"
  echo ../.. > "$admin/commondir"
  git -C "$repo" rev-parse --verify "$commit^{commit}" > "$admin/HEAD"
  echo "gitdir: $admin" > "$worktree/.git"
  git -C "$worktree" reset -q
  if [ -n "$(git -C "$worktree" status --porcelain --untracked-files=no)" ]; then
    echo "$worktree: its files differ from $commit (git -C $worktree status); not a frozen worktree of it" >&2
    exit 2
  fi
  echo "relinked $worktree to this checkout at $commit"
fi
if [ ! -x "$worktree/.venv/bin/probe" ]; then
  python3 -m venv "$worktree/.venv"
  quiet() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }  # this machine's pip names every absent local index
  quiet "$worktree/.venv/bin/pip" install -q torch==2.13.0
  quiet "$worktree/.venv/bin/pip" install -q -e "$worktree"
fi
head=$(git -C "$worktree" rev-parse --short HEAD)
# what the run's kernels depend on, as probe.provenance.environment() records it (this checkout's code, which may be
# newer than the frozen worktree's): ATen's capability, the CPU's model and oneDNN's/MKL's switches (README)
IFS=$'\t' read -r kernels cpu switches < <(PYTHONPATH="$repo" "$worktree/.venv/bin/python" -c "
from probe.provenance import environment
e = environment()
print(e['cpu_capability'], repr(e['cpu']), ' '.join(f'{k}={v}' for k, v in sorted(e.get('kernel_switches', {}).items())), sep='\t')")
echo 0 > /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || true  # nice works across sessions' process groups
echo "leg start $(date -u +%FT%TZ) commit $head kernels $kernels ${switches:+switches $switches }cpu $cpu" \
  "$pipeline --preset $preset $*" >> "$runs/$name-legs.log"
cd "$worktree"
nohup nice -n "${NICE:-10}" .venv/bin/probe pipeline run "$pipeline" --preset "$preset" --workdir "$workdir" "$@" \
  >> "$runs/$name.log" 2>&1 &
echo "started $name (pid $!) from $worktree at $head ($kernels${switches:+; $switches}); log $runs/$name.log"
