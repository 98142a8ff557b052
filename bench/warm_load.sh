#!/usr/bin/env bash
# Cold and warm load of a Matrix-Game 2.0 pipeline through the plan cache:
# `flick serve` from start to its "serving" log line (every pipeline loaded),
# then SIGTERM. The first start fills an empty plan cache (cold); the next
# RUNS-1 map it (warm). Prints wall seconds and the process's peak RSS
# (VmHWM) per start. The spool and the cache live under DIR (a disk, not
# tmpfs, measures the reads of the cache entries too; their pages stay in
# the page cache between warm starts, as on a daemon's restart).
#
#   bench/warm_load.sh WEIGHTS [FLICK=build/flick] [RUNS=3] [PRECISION=int8]
#                      [VAE_PRECISION=int8] [DIR=$TMPDIR or /tmp]
#
# WEIGHTS: a Matrix-Game 2.0 folder (`flick synth DIR --size full` makes one).
set -euo pipefail
weights=$(realpath "$1")
flick=$(realpath "${2:-build/flick}")
runs=${3:-3}
precision=${4:-int8}
vae_precision=${5:-int8}
base=${6:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$base/flick-warm.XXXXXX")
pid=
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/in" "$work/out"
cat > "$work/flick.toml" <<TOML
[daemon]
spool = "$work/spool"
input_roots = ["$work/in"]
output_roots = ["$work/out"]
plan_cache = "$work/cache"
[[pipeline]]
name = "mg2"
kind = "matrix-game-2"
mode = "universal"
weights = "$weights"
precision = "$precision"
vae_precision = "$vae_precision"
TOML
for i in $(seq 1 "$runs"); do
  log="$work/serve$i.log"
  start=$(date +%s.%N)
  "$flick" serve --config "$work/flick.toml" > "$log" 2>&1 &
  pid=$!
  until grep -q "serving" "$log"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "flick serve exited before serving:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.05
  done
  end=$(date +%s.%N)
  hwm=$(awk '/VmHWM/ {printf "%.2f GiB", $2 / 1048576}' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" || true
  pid=
  kind=warm
  [[ $i == 1 ]] && kind="cold (fills the cache)"
  printf '%s: %.2f s to serving, peak RSS %s\n' "$kind" "$(echo "$end - $start" | bc)" "$hwm"
done
echo "cache: $(find "$work/cache" -name '*.plan' | wc -l) entries, $(du -sh "$work/cache" | cut -f1)"
