#!/usr/bin/env python3
"""e2e.sweep_early_stopping: early stopping stops the expected trials.

The 2 x 2 x 2 grid of tests/data/sweep_grid.toml (4 points x 2 seeds, eval every 10 of 30
steps) is run once without early stopping; its stored eval.loss curves are the oracle. The same
grid with successive halving at steps 10 and 20 (reduction factor 4, so that it differs from the
median rule here) must stop, at each rung, exactly the points that rank below ceil(n / 4) by
their seeds' mean eval.loss there in the oracle's curves, and the median rule exactly those worse
than the median; the points that run
to the end must finish with the oracle's table row (pausing at a rung and resuming from its
checkpoint changes nothing).

  sweep_early_stopping.py TRAINBENCH_CLI SOURCE_DIR
"""
import csv
import io
import math
import os
import re
import subprocess
import sys
import tempfile

cli, src = sys.argv[1], sys.argv[2]
RUNGS = [10, 20]
FACTOR = 4  # successive halving's reduction factor


def fail(why):
    print(f"FAIL: sweep_early_stopping: {why}")
    sys.exit(1)


def run(*args):
    p = subprocess.run([cli, "--db", db, *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(args)} exited with {p.returncode}: {p.stdout}{p.stderr}")
    return p.stdout


def table(name):
    """point -> (statistic column, finished column) of `sweep --show NAME`."""
    rows = {}
    for line in run("sweep", "--show", name).splitlines():
        m = re.match(r"^p(\d+)\s+(.*?)\s{2,}(\d+/\d+)\s", line)
        if m:
            rows[int(m.group(1))] = (m.group(2).strip(), m.group(3))
    return rows


def expected_stops(values, method):
    """point -> rung it stops at, by the rules on the oracle's values at each rung."""
    stops, alive = {}, sorted(values)
    for rung in RUNGS:
        scores = []
        for p in alive:
            vs = values[p][rung]
            scores.append((sum(vs) / len(vs), p))
        scores.sort(key=lambda sp: sp[0])  # stable: ties keep point order
        n = len(scores)
        if method == "successive_halving":
            stopped = [p for _, p in scores[max(1, math.ceil(n / FACTOR)):]]
        else:
            mid = scores[n // 2][0] if n % 2 else (scores[n // 2 - 1][0] + scores[n // 2][0]) / 2
            stopped = [p for s, p in scores if s > mid]
        for p in stopped:
            stops[p] = rung
        alive = [p for p in alive if p not in stopped]
    return stops


with tempfile.TemporaryDirectory() as work:
    db = os.path.join(work, "runs.sqlite")
    grid = os.path.join(src, "tests", "data", "sweep_grid.toml")
    run("sweep", grid, "--parallel", "2")
    # The oracle: each point's seeds' eval.loss at every rung, from the stored curves.
    values = {}
    for line in run("runs", "--sweep", "opt-lr").splitlines()[1:]:
        run_id, point = int(line.split()[0]), int(re.search(r"\bp(\d+)\b", line).group(1))
        series = {}
        for row in csv.DictReader(io.StringIO(run("export", str(run_id)))):
            if row.get("eval.loss"):
                series[int(row["step"])] = float(row["eval.loss"])
        for rung in RUNGS:
            at = max(s for s in series if s <= rung)
            values.setdefault(point, {}).setdefault(rung, []).append(series[at])
    whole = table("opt-lr")
    if len(values) != 4 or any(len(values[p][10]) != 2 for p in values):
        fail(f"expected 4 points x 2 seeds in the oracle, got {values}")

    text = open(grid).read()
    for method in ("successive_halving", "median"):
        name = "es-" + method.replace("_", "-")
        config = os.path.join(work, name + ".toml")
        with open(config, "w") as f:
            f.write(text.replace('name = "opt-lr"', f'name = "{name}"'))
            f.write(f'\n[sweep.early_stopping]\nmethod = "{method}"\nsteps = {RUNGS}\n')
            if method == "successive_halving":
                f.write(f"reduction_factor = {FACTOR}\n")
        out = run("sweep", config, "--parallel", "2")
        print("\n".join(l for l in out.splitlines() if l.startswith("early stopping")))
        want = expected_stops(values, method)
        got_table = table(name)
        got = {p: int(re.match(r"stopped @(\d+)", stat).group(1))
               for p, (stat, _) in got_table.items() if stat.startswith("stopped")}
        print(f"{method}: expected stops {want}, got {got}")
        if got != want:
            fail(f"{method} stopped {got}, expected {want}")
        for p, (stat, finished) in got_table.items():
            if p not in want and (stat, finished) != whole[p]:
                fail(f"{method}: p{p} finished with {stat} {finished}, "
                     f"uninterrupted {whole[p][0]} {whole[p][1]}")
        # A trial paused at a rung is the sweep's to continue: its log does not tell the user
        # to resume it by hand (a run stopped by a user's own --stop-at does).
        logs = os.path.join(work, "sweeps", name)
        for log in sorted(f for f in os.listdir(logs) if f.endswith(".log")):
            if "continue it with" in open(os.path.join(logs, log)).read():
                fail(f"{method}: {log} tells the user to continue a trial the sweep continues")
        listed = run("sweeps")
        if not re.search(rf"\b{name}\s+finished\b", listed):
            fail(f"`sweeps` does not list {name} as finished:\n{listed}")
    print("PASS: sweep_early_stopping: successive halving and the median rule stop the "
          "expected points; the kept ones end as if never paused")
