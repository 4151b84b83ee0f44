#!/usr/bin/env bash
# Disk full during `trainbench-cli run` (issue 10): the process runs with a 1 MiB file-size limit
# (`ulimit -f`, SIGXFSZ ignored, so writes past it fail as on a full disk). The run must stop with
# an error that says the disk may be full, exit non-zero, and the store must keep every step it
# committed: integrity_check passes, `runs` shows the run crashed with its steps, `show` works.
# Prints one PASS line (exit 0) or a FAIL line (exit 1).
# Usage: disk_full.sh CLI REPO_ROOT        (ctest: e2e.disk_full)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start disk_full "CLI REPO_ROOT" 2 2 "$@"
cli=$1
config=$2/resources/configs/fmnist-mlp-adamw.toml
e2e_tmpdir
db=$tmp/runs.sqlite
# The run creates the store (about 0.3 MB) within the limit too.
(
  ulimit -f 1024
  trap '' XFSZ
  exec "$cli" --db "$db" run "$config" --set run.steps=5000 --set run.log_interval=1 \
    --set checkpoint.interval=0
) >"$tmp/run.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "the run succeeded despite the full disk"
grep -q "is the disk full" "$tmp/run.log" || fail "no disk-full message: $(tail -2 "$tmp/run.log")"
"$cli" --db "$db" runs >"$tmp/runs.txt" 2>&1 || fail "runs failed: $(cat "$tmp/runs.txt")"
grep -Eq "^1 .* crashed .* [0-9]+ " "$tmp/runs.txt" || fail "run 1 not shown crashed: $(cat "$tmp/runs.txt")"
"$cli" --db "$db" show 1 >/dev/null 2>&1 || fail "show 1 failed"
python3 - "$db" <<'PY' || exit 1
import sqlite3, struct, sys
c = sqlite3.connect(sys.argv[1])
if c.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
    print("FAIL: disk_full: integrity_check"); sys.exit(1)
# metric_chunks rows pack (step int64, value float64, time float64) records, little-endian.
steps = sorted({s for (blob,) in c.execute(
    "SELECT m.points FROM metric_chunks m JOIN metric_keys k ON k.id = m.key_id "
    "WHERE m.run_id = 1 AND k.name = 'loss' ORDER BY m.id")
    for s, _, _ in struct.iter_unpack("<qdd", blob)})
if not steps or steps != list(range(steps[0], steps[0] + len(steps))):
    print(f"FAIL: disk_full: committed loss steps are not contiguous ({len(steps)} rows)"); sys.exit(1)
print(f"PASS: disk_full: run stopped with a disk-full error, {len(steps)} committed steps kept")
PY
