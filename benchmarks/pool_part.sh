#!/usr/bin/env bash
# Pool one finished part (a workdir that adds seeds or models, benchmarks/long_run.sh with FROM=...) into a committed
# report whose earlier parts are archived under REPORT/inputs/part-<n>:
#
#   benchmarks/pool_part.sh REPORT WORKDIR NOTE
#   e.g. benchmarks/pool_part.sh reports/modify-dsprites-cpu /root/probe-runs/dsprites-cpu-p3-s100 \
#          '(part 3, first part: FactorVAE, seed 100, ...; inputs/part-8; "done in 5211.1s (7 job(s) run)")'
#
# Renders `probe report` over every archived part (in part order) and WORKDIR into a scratch folder beside REPORT, and
# takes it only when the pooled report repeats what REPORT holds: every archived part comes back byte for byte, and
# runs.csv only gains rows (none changes or goes). Then the scratch report replaces REPORT, REPORT's own legs.json
# (its first part's wall times) and legs.log are kept, and NOTE and the part's legs ($PROBE_RUNS/NAME-legs.log, the
# lines long_run.sh wrote for WORKDIR's legs) are appended to legs.log. It commits nothing: read `git diff --stat`,
# then commit. Any refusal exits 2 and leaves REPORT as it was. PROBE (default: this checkout's .venv/bin/probe, else
# `probe` on PATH) is the renderer; PROBE_RUNS defaults to /root/probe-runs.
set -euo pipefail
if [ $# -ne 3 ]; then
  awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" >&2  # the header comment above
  exit 2
fi
report=${1%/} workdir=${2%/} note=$3
repo=$(cd "$(dirname "$0")/.." && pwd)
runs=${PROBE_RUNS:-/root/probe-runs}
probe=${PROBE:-$repo/.venv/bin/probe}
[ -x "$probe" ] || probe=probe
fail() { echo "pool_part: $*" >&2; exit 2; }

[ -d "$report/inputs" ] || fail "$report has no inputs/ (a report that pools parts archives them there)"
[ -f "$workdir/report_inputs.json" ] || fail "$workdir has no report_inputs.json: its pipeline has not finished"
mapfile -t parts < <(find "$report/inputs" -mindepth 1 -maxdepth 1 -type d -name 'part-*' | sort -V)
[ ${#parts[@]} -gt 0 ] || fail "$report/inputs holds no part-<n>"
legs_log=$runs/$(basename "$workdir")-legs.log
[ -f "$legs_log" ] || fail "no legs log $legs_log (long_run.sh writes one per workdir)"
# A FROM copy starts with its source's report_inputs.json (hard-linked, the source's time): the part has finished only
# when its own last leg wrote a newer one.
last_leg=$(awk '/^leg start/ {t = $3} END {print t}' "$legs_log")
[ -n "$last_leg" ] || fail "$legs_log has no 'leg start' line"
[ "$(stat -c %Y "$workdir/report_inputs.json")" -ge "$(date -d "$last_leg" +%s)" ] \
  || fail "$workdir/report_inputs.json is older than its last leg ($last_leg): that leg has not finished"

scratch=$(mktemp -d "$(dirname "$report")/.pool-$(basename "$report").XXXXXX")
trap 'rm -rf "$scratch"' EXIT
"$probe" report "${parts[@]}" "$workdir" --out "$scratch/report"

for part in "${parts[@]}"; do
  name=$(basename "$part")
  diff -rq "$part" "$scratch/report/inputs/$name" >/dev/null \
    || fail "the pooled report's inputs/$name differs from $part (diff -r them): not the same archive"
done
"${PYTHON:-python3}" - "$report/runs.csv" "$scratch/report/runs.csv" <<'EOF' || exit 2
import csv, sys
old, new = (list(csv.reader(open(p, newline=""))) for p in sys.argv[1:3])
if old[0] != new[0]:
    sys.exit(f"pool_part: runs.csv's columns changed ({old[0]} -> {new[0]})")
pooled = set(map(tuple, new[1:]))
missing = [row for row in old[1:] if tuple(row) not in pooled]
if missing:
    sys.exit(f"pool_part: {len(missing)} row(s) of {sys.argv[1]} are not in the pooled runs.csv, e.g. {missing[0]}")
print(f"runs.csv: {len(old) - 1} rows kept, {len(new) - len(old)} added")
EOF

cp -p "$report/legs.json" "$report/legs.log" "$scratch/report/" 2>/dev/null || true
{ echo "$note"; cat "$legs_log"; } >> "$scratch/report/legs.log"
rm -rf "$report"
mv "$scratch/report" "$report"
echo "pooled $workdir into $report as inputs/$(basename "$(find "$report/inputs" -mindepth 1 -maxdepth 1 -type d -name 'part-*' | sort -V | tail -1)")"
