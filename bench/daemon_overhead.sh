#!/usr/bin/env bash
# Daemon overhead: N one-frame encode jobs (32x24 PNG in, one PNG out) through
# `flick drain` on a scratch spool. Prints the claim -> status-committed time
# per job (from the status files' timing.total_ms) and jobs/s over the whole
# drain. The spool and outputs live under DIR: a disk measures the fsyncs of
# the commit protocol too; /dev/shm (tmpfs) the CPU cost alone.
#
#   bench/daemon_overhead.sh [FLICK=build/flick] [JOBS=1000] [DIR=$TMPDIR or /tmp]
set -euo pipefail
flick=$(realpath "${1:-build/flick}")
n=${2:-1000}
base=${3:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$base/flick-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in/f" "$work/out"
echo "iVBORw0KGgoAAAANSUhEUgAAACAAAAAYCAIAAAAUMWhjAAAACXBIWXMAAAABAAAAAQBPJcTWAAAAxUlEQVR4nO3V4REBMRCG4bcDOqADOqADOqADOqADOqADOqADOqADOvhcyOQ2ZtydY/ww2dv7k73sk0wyc2BCJrM3ex5pKwqj4qkS0gavANOnEnBfU2Ug7lMVCEYJ4D+qBfjFFQD5NusCigliQV8B7DZ+CMQ9PwWCkYAEJOAvADfURWO0RHt05SQ2YiYGouXKTdRHU7RGR9f4IFZiInqioTYaojnaorMrX8ROLMRIdBJQDtjIT6nuIfsLUvDLtFPeBfIbaOIGKiZN61TsiFoAAAAASUVORK5CYII=" | base64 -d > "$work/in/f/f0.png"
cat > "$work/flick.toml" <<TOML
[daemon]
spool = "$work/spool"
input_roots = ["$work/in"]
output_roots = ["$work/out"]
[[pipeline]]
name = "encode"
kind = "encode"
TOML
"$flick" drain --config "$work/flick.toml" 2>/dev/null   # creates the spool
for i in $(seq -w 1 "$n"); do
  cat > "$work/spool/incoming/.j$i.tmp" <<TOML
version = 1
pipeline = "encode"
[input]
frames = "$work/in/f/*.png"
[output]
dir = "$work/out/j$i"
frames = { format = "png" }
TOML
  mv "$work/spool/incoming/.j$i.tmp" "$work/spool/incoming/j$i.toml"
done
start=$(date +%s.%N)
"$flick" drain --config "$work/flick.toml" 2>/dev/null
end=$(date +%s.%N)
done_jobs=$(ls "$work/spool/done" | grep -c 'status.toml$')
echo "filesystem: $(stat -f -c %T "$work")  jobs done: $done_jobs of $n"
grep -h '^total_ms' "$work"/spool/done/*.status.toml | awk '{print $3}' | sort -n | awk -v s="$start" -v e="$end" '
  { t[NR] = $1; sum += $1 }
  END {
    printf "claim -> status committed per job: median %.2f ms, p90 %.2f ms, max %.2f ms, mean %.2f ms\n",
           t[int(NR * 0.5 + 0.5)], t[int(NR * 0.9 + 0.5)], t[NR], sum / NR
    printf "throughput: %.1f jobs/s (%d jobs in %.2f s, drain start to exit)\n", NR / (e - s), NR, e - s
  }'
