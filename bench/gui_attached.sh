#!/usr/bin/env bash
# The application itself with its plots open against the headless CLI, on one config: each
# round runs `trainbench-cli run CONFIG` and `trainbench CONFIG --run` (under xvfb-run when
# there is no display; the window closes itself after --gui-seconds), alternating which goes
# first so the machine's drift falls on both alike. Per run, from its store: the wall time per
# step between the warm-up and the last step (what a user waits for, GUI work included) and the
# median time.step_ms. Prints per round and the median over rounds of
#
#   ratio = wall per step (CLI) / wall per step (GUI)    (target >= 0.95)
#
#   bench/gui_attached.sh [CONFIG] [--rounds R] [--steps S] [--warmup W] [--threads T]
#                         [--build DIR] [--gui-seconds N]
#
# CONFIG defaults to resources/configs/fmnist-mlp-adamw.toml; the run is cut to S steps
# (default 2000), logged at every step (the plots' worst case), evaluated once at the end
# (not measured); --threads T sets its threads (default: the config's own). Uses DIR/app/cli
# and DIR/app/gui (default build/release, else build/ci). Results: docs/benchmarks.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
config=$here/resources/configs/fmnist-mlp-adamw.toml
rounds=3 steps=2000 warmup=50 threads=0 build="" gui_seconds=""
# shellcheck source=bench/common.sh
. "$here/bench/common.sh"
while [ $# -gt 0 ]; do
  bench_option gui_attached.sh "$@"
  if [ "$bench_shift" -gt 0 ]; then shift "$bench_shift"; continue; fi
  case "$1" in
    --gui-seconds) gui_seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "gui_attached.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) config=$1; shift ;;
  esac
done
if [ -z "$build" ]; then
  for d in build/release build/ci; do
    if [ -x "$here/$d/app/gui/trainbench" ]; then build=$here/$d; break; fi
  done
fi
cli=$build/app/cli/trainbench-cli
gui=$build/app/gui/trainbench
if [ ! -x "$cli" ] || [ ! -x "$gui" ]; then
  echo "gui_attached.sh: no trainbench and trainbench-cli under build/release or build/ci" >&2
  exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-gui-attached.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The GUI takes no --set: a first headless run (a warm-up too) stores the effective config,
# which both sides then run.
sets=(--set run.steps="$steps" --set run.epochs=0 --set run.log_interval=1
      --set eval.interval="$steps" --set eval.batches=1 --set checkpoint.interval=0)
[ "$threads" = 0 ] || sets+=(--set threads="$threads")
"$cli" --db "$tmp/config.sqlite" run "$config" "${sets[@]}" > "$tmp/config.log" 2>&1 ||
  { tail -3 "$tmp/config.log" >&2; exit 1; }
"$cli" --db "$tmp/config.sqlite" show 1 | sed -n '/^config:$/,$p' | tail -n +2 > "$tmp/run.toml"
# Long enough for the run; the window then saves a screenshot and closes.
[ -n "$gui_seconds" ] || gui_seconds=$((5 + steps / 200))

display=()
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ]; then
  command -v xvfb-run > /dev/null || { echo "gui_attached.sh: no display and no xvfb-run" >&2; exit 2; }
  display=(xvfb-run -a -s "-screen 0 1600x1000x24")
fi

# measure STORE: "wall_ms_per_step median_step_ms" of run 1 between the warm-up and the last step.
measure() {
  "$cli" --db "$1" export 1 --format csv > "$tmp/metrics.csv"
  # The rows of the measured steps, as "time step_ms".
  awk -F, -v w="$warmup" -v last="$steps" '
    NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "time") t = i; if ($i == "time.step_ms") s = i }; next }
    $1 > w && $1 < last && $s != "" { print $t, $s }' "$tmp/metrics.csv" > "$tmp/rows"
  local wall step
  wall=$(awk 'NR == 1 { t0 = $1 } { t1 = $1; n++ } END { if (n < 2) print "nan"; else printf "%.4f", 1000 * (t1 - t0) / (n - 1) }' "$tmp/rows")
  step=$(awk '{ print $2 }' "$tmp/rows" | sort -g | awk '{ v[n++] = $1 } END { if (n == 0) print "nan"; else printf "%.4f", v[int((n - 1) / 2)] }')
  echo "$wall $step"
}
headless() {
  rm -f "$tmp/cli.sqlite"*
  "$cli" --db "$tmp/cli.sqlite" run "$tmp/run.toml" > "$tmp/cli.log" 2>&1 ||
    { tail -3 "$tmp/cli.log" >&2; exit 1; }
  measure "$tmp/cli.sqlite"
}
attached() {
  rm -f "$tmp/gui.sqlite"*
  "${display[@]}" "$gui" --db "$tmp/gui.sqlite" "$tmp/run.toml" --run \
    --screenshot "$tmp/gui.png" --screenshot-delay $((gui_seconds * 1000)) > "$tmp/gui.log" 2>&1 ||
    { tail -3 "$tmp/gui.log" >&2; exit 1; }
  local status
  status=$("$cli" --db "$tmp/gui.sqlite" runs 2>/dev/null | awk 'NR == 2 { print $3 }')
  [ "$status" = finished ] || {
    echo "gui_attached.sh: the GUI's run did not finish in ${gui_seconds} s (--gui-seconds)" >&2
    exit 1
  }
  measure "$tmp/gui.sqlite"
}

echo "# $(basename "$config"): the GUI with its plots vs the headless CLI, $steps steps logged at each (after $warmup)"
printf '%-6s %14s %14s %14s %14s %8s\n' round cli_wall_ms gui_wall_ms cli_step_ms gui_step_ms ratio
ratios=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2 == 1)); then read -r cw cs < <(headless); read -r gw gs < <(attached)
  else read -r gw gs < <(attached); read -r cw cs < <(headless); fi
  ratio=$(awk -v a="$cw" -v b="$gw" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$ratio")
  printf '%-6s %14s %14s %14s %14s %8s\n' "$r" "$cw" "$gw" "$cs" "$gs" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g |
  awk '{ v[n++] = $1 } END { printf "median ratio %s\n", v[int((n - 1) / 2)] }'
