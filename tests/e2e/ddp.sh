#!/usr/bin/env bash
# Data-parallel training over Open MPI (`trainbench-cli launch --ddp`), 2 ranks on loopback with
# one compute thread each:
#   equivalence  world size 1 through the distributed path logs the plain run's losses bit for
#                bit; 2 ranks x batch b log the losses of 1 process x batch 2b (same seed) within
#                rtol 1e-5 for 10 steps (SGD, AdamW, Muon distributed and replicated — and
#                the two bit for bit; with dropout) and 1e-4 for 50 steps (and for 3 ranks
#                across an epoch whose last batch leaves one rank no rows; with gradient
#                accumulation, 2 and 3 ranks); distributed.check_replicas compares the ranks' parameters bit for bit at
#                every step (a difference fails the run).
#   env          2 ranks started by a torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR,
#                MASTER_PORT; no mpirun) log the mpirun launch's losses bit for bit; rank 0
#                alone names the missing rank at the deadline; with PyTorch's torchrun installed,
#                torchrun --no_python does the same.
#   device       2 ranks on openreg:0 (the exchange on a device, staged through the host;
#                distributed Muon on the device) log the CPU's 2-rank losses.
#   kill         kill -9 of rank 1 mid-run: the launch exits non-zero within 10 s and the stored
#                run is failed, naming rank 1; kill -9 of rank 0: the launcher closes its run as
#                crashed; SIGTERM to the launcher, and to it and its process group at once: the
#                job stops, no rank is left running.
#   stop         SIGSTOP of rank 1: the job ends within distributed.timeout_s + 5 s, the run
#                failed naming rank 1.
#   cancel       SIGUSR1 to mpirun: every rank stops after the same step, the run is cancelled;
#                run --stop-at N given to every rank stops each after step N.
#   resume       a 2-rank run (distributed Muon, dropout) killed after its first checkpoint and resumed with
#                `launch --ddp --resume` logs the losses of the uninterrupted 2-rank run, bit for
#                bit.
# Usage: ddp.sh CLI REPO_ROOT MODE
#        (ctest: e2e.ddp_equivalence, e2e.ddp_env, e2e.ddp_device, e2e.ddp_kill, e2e.ddp_stop, e2e.ddp_cancel, e2e.ddp_resume)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start ddp "CLI REPO_ROOT MODE" 3 3 "$@"
cli=$1
repo=$2
mode=$3
config=$repo/tests/ui/data/blobs.toml
e2e_tmpdir
# The same run with Muon for the hidden matrices and AdamW for the rest.
muon=$tmp/muon.toml
sed -e '/^\[optimizer\]/,$d' "$config" > "$muon"
cat >> "$muon" << 'EOF'
[optimizer]
kind = "muon"

[optimizer.muon]
lr = 0.02

[optimizer.adamw]
lr = 0.01
EOF
command -v mpirun > /dev/null || fail "mpirun not found (Debian's openmpi-bin)"

# The losses of run 1 of store $1, one per line (a step logged twice, before a crash and after
# the resume: the last one).
losses() {
  "$cli" --db "$1" export 1 --format csv |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
             { if (!($1 in v)) order[n++] = $1; v[$1] = $c }
             END { for (i = 0; i < n; i++) print v[order[i]] }'
}

# start_endless_job DB LOG [WRAPPER...]: a 2-rank job of run.steps = 10^8 through `launch --ddp`
# in the background (its pid in $launcher, its output in LOG; started through WRAPPER, e.g.
# setsid, which must exec it), once its run is running in DB.
start_endless_job() {
  "${@:3}" "$cli" --db "$1" launch --ddp --nproc 2 "$config" --set threads=1 \
    --set run.steps=100000000 --set run.log_interval=50 > "$2" 2>&1 &
  launcher=$!
  for _ in $(seq 1 100); do
    "$cli" --db "$1" runs 2> /dev/null | grep -q ' running ' && break
    sleep 0.2
  done
}

# compare NAME A B RTOL: the same number of losses, each pair within RTOL (0 = identical text).
compare() {
  local name=$1 a=$2 b=$3 rtol=$4
  [ "$(wc -l < "$a")" -eq "$(wc -l < "$b")" ] && [ -s "$a" ] ||
    fail "$name: $(wc -l < "$a") vs $(wc -l < "$b") logged losses"
  if [ "$rtol" = 0 ]; then
    cmp -s "$a" "$b" || fail "$name: losses differ: $(paste -d' ' "$a" "$b" | head -5 | tr '\n' ';')"
    echo "$name: $(wc -l < "$a") losses identical"
    return
  fi
  worst=$(paste -d' ' "$a" "$b" | awk -v r="$rtol" '
    { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; rel = m > 0 ? d / m : d
      if (rel > worst) worst = rel; if (rel > r) bad = bad " step " NR ": " $1 " vs " $2 }
    END { printf "%.3g%s\n", worst, bad }')
  case $worst in
    *step*) fail "$name: beyond rtol $rtol:${worst#* }" ;;
  esac
  echo "$name: $(wc -l < "$a") losses, max relative difference $worst (rtol $rtol)"
}

# run_pair NAME CONFIG STEPS RTOL SETTINGS...: 1 process x 2b against 2 ranks x b (NPROC ranks
# x B when those are set: 1 process x NPROC*B).
run_pair() {
  local name=$1 config=$2 steps=$3 rtol=$4 nproc=${NPROC:-2} b=${B:-32}
  shift 4
  local sets=(--set threads=1 --set run.steps="$steps" --set data.workers=0)
  for s in "$@"; do sets+=(--set "$s"); done
  "$cli" --db "$tmp/$name-1.sqlite" run "$config" "${sets[@]}" \
    --set data.batch_size=$((nproc * b)) \
    > "$tmp/$name-1.log" 2>&1 || fail "$name: the one-process run failed: $(tail -3 "$tmp/$name-1.log")"
  "$cli" --db "$tmp/$name-2.sqlite" launch --ddp --nproc "$nproc" "$config" "${sets[@]}" \
    --set data.batch_size="$b" --set distributed.check_replicas=true > "$tmp/$name-2.log" 2>&1 ||
    fail "$name: the 2-rank run failed: $(grep -a 'run 1\|error' "$tmp/$name-2.log" | tail -3)"
  # Ranks write on mpirun's pseudo-terminal: progress as lines, no bar redrawn with '\r', in a
  # job whose output goes to a file.
  if grep -aq $'\r' "$tmp/$name-2.log"; then
    fail "$name: carriage returns in the job's output: $(grep -a -m 2 $'\r' "$tmp/$name-2.log" | cat -A | cut -c1-160)"
  fi
  losses "$tmp/$name-1.sqlite" > "$tmp/$name-1.txt"
  losses "$tmp/$name-2.sqlite" > "$tmp/$name-2.txt"
  compare "$name" "$tmp/$name-1.txt" "$tmp/$name-2.txt" "$rtol"
  # A longer pair: its first 10 steps within 1e-5 as well.
  if [ "$steps" -gt 10 ]; then
    head -10 "$tmp/$name-1.txt" > "$tmp/$name-1.first10"
    head -10 "$tmp/$name-2.txt" > "$tmp/$name-2.first10"
    compare "$name (first 10 steps)" "$tmp/$name-1.first10" "$tmp/$name-2.first10" 1e-5
  fi
}

# A free TCP port on loopback (the kernel's pick, released).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# rank_pid STORE RANK: the pid of that rank of the job writing STORE.
rank_pid() {
  for p in $(pgrep -f "$1 run"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}

# job_rank_pid LAUNCHER RANK: the pid of that rank of the job `launch --ddp` process LAUNCHER
# started (its ranks carry the job's name, host:LAUNCHER:n, in TB_LAUNCH_JOB).
job_rank_pid() {
  for p in $(pgrep -f " run "); do
    local env
    env=$(tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null) || continue
    if echo "$env" | grep -q "^TB_LAUNCH_JOB=.*:$1:" && echo "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}

# lose_rank SIGNAL LIMIT_S TIMEOUT_S: starts a long 2-rank run, sends SIGNAL to rank 1 once it
# trains, and checks the job's end.
lose_rank() {
  local sig=$1 limit=$2 timeout=$3 db=$tmp/lost.sqlite
  "$cli" --db "$db" launch --ddp --nproc 2 "$config" --set threads=1 --set run.steps=100000000 \
    --set run.log_interval=50 --set distributed.timeout_s="$timeout" > "$tmp/lost.log" 2>&1 &
  local launcher=$! pid=""
  for _ in $(seq 1 100); do
    pid=$(rank_pid "$db" 1)
    [ -n "$pid" ] && "$cli" --db "$db" runs 2> /dev/null | grep -q ' running ' && break
    sleep 0.2
  done
  [ -n "$pid" ] || fail "$sig: rank 1 never started: $(tail -5 "$tmp/lost.log")"
  sleep "0.$((RANDOM % 9 + 1))"
  local t0 rc t1
  t0=$(date +%s%N)
  kill "-$sig" "$pid"
  wait "$launcher"
  rc=$?
  t1=$(date +%s%N)
  local ms=$(((t1 - t0) / 1000000))
  [ "$rc" -ne 0 ] || fail "$sig: the launch exited 0 after rank 1 was lost"
  [ "$ms" -le $((limit * 1000)) ] || fail "$sig: the job took $ms ms to end (limit $limit s)"
  local row
  row=$("$cli" --db "$db" runs | awk '$1 == 1')
  case $row in
    *failed*"rank 1 ("*"lost at step"*) ;;
    *) fail "$sig: the run is not failed naming rank 1: $row" ;;
  esac
  echo "$sig: the job ended $ms ms after rank 1 was hit, exit $rc; run: ${row#*failed}"
}

case $mode in
  equivalence)
    # World size 1 through the distributed path: the plain run, bit for bit.
    "$cli" --db "$tmp/w1-plain.sqlite" run "$config" --set threads=1 --set run.steps=20 \
      > "$tmp/w1-plain.log" 2>&1 || fail "plain run failed"
    "$cli" --db "$tmp/w1-ddp.sqlite" launch --ddp --nproc 1 "$config" --set threads=1 \
      --set run.steps=20 > "$tmp/w1-ddp.log" 2>&1 ||
      fail "world size 1 failed: $(tail -3 "$tmp/w1-ddp.log")"
    losses "$tmp/w1-plain.sqlite" > "$tmp/w1-plain.txt"
    losses "$tmp/w1-ddp.sqlite" > "$tmp/w1-ddp.txt"
    compare world_size_1 "$tmp/w1-plain.txt" "$tmp/w1-ddp.txt" 0
    # Each pair 50 steps within rtol 1e-4, its first 10 within 1e-5.
    run_pair sgd "$config" 50 1e-4 'optimizer.kind="sgd"' optimizer.lr=0.05
    run_pair adamw "$config" 50 1e-4
    # Muon: distributed (each rank a share of the matrices; the default) and replicated.
    run_pair muon "$muon" 50 1e-4 'model.hidden=[32, 32, 32]'
    run_pair muon_replicated "$muon" 50 1e-4 'model.hidden=[32, 32, 32]' \
      'distributed.muon="replicated"'
    compare muon_distributed_vs_replicated "$tmp/muon-2.txt" "$tmp/muon_replicated-2.txt" 0
    run_pair dropout "$config" 50 1e-4 model.dropout=0.3
    run_pair muon_dropout "$muon" 50 1e-4 'model.hidden=[32, 32, 32]' model.dropout=0.1
    # 3 ranks x 11 over the 2048 blobs: the epoch's last global batch has 2 rows, so rank 2's
    # share is empty at step 63; it replays the forward pass for Dropout's draws, and the next
    # epoch's masks still match the one-process run's.
    NPROC=3 B=11 run_pair empty_shard "$config" 70 1e-4 model.dropout=0.3 eval.interval=0
    # Gradient accumulation: 2 ranks x 16 x 2 batches a step against 1 process x 32 x 2; and 3
    # ranks x 11 x 3 with dropout across epochs (63 global batches, 21 steps: the last step's
    # third batch has 2 rows, rank 2's share empty), each batch weighted by its rows.
    B=16 run_pair accumulation "$config" 30 1e-4 run.gradient_accumulation_steps=2
    NPROC=3 B=11 run_pair accumulation_epoch "$config" 70 1e-4 \
      run.gradient_accumulation_steps=3 model.dropout=0.3 eval.interval=0
    rows=$("$cli" --db "$tmp/accumulation-2.sqlite" export 1 --format csv | awk -F, '
      NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "samples_per_s") a = i; if ($i == "time.step_ms") b = i }; next }
      $a != "" && $b != "" { printf "%.0f\n", $a * $b / 1000 }' | sort -u)
    [ "$rows" = 64 ] || fail "accumulation: '$rows' samples per step, not 2 ranks x 16 x 2 = 64"
    "$cli" --db "$tmp/adamw-2.sqlite" show 1 | grep -q 'info: data-parallel: 2 ranks over mpi' ||
      fail "the run did not record its ranks"
    # A finished run is not resumed: said before mpirun starts.
    out=$("$cli" --db "$tmp/adamw-2.sqlite" launch --ddp --resume 1 2>&1) &&
      fail "launch --ddp --resume of a finished run ran"
    case $out in
      "error: [launch] run 1 has finished: there is nothing to resume"*) ;;
      *) fail "launch --ddp --resume of a finished run said: $out" ;;
    esac
    # Throughput counts the global batch (2 x 32), though each rank's loader built its 32 rows.
    rows=$("$cli" --db "$tmp/adamw-2.sqlite" export 1 --format csv | awk -F, '
      NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "samples_per_s") a = i; if ($i == "time.step_ms") b = i }; next }
      $a != "" && $b != "" { printf "%.0f\n", $a * $b / 1000 }' | sort -u)
    [ "$rows" = 64 ] || fail "samples_per_s x step time is '$rows' samples per step, not the global 64"
    # Every rank's times are of the logged step: rank 0's exchange and optimizer times equal the
    # run's own (rank 0 writes it) on every row, the last one included. They were the step
    # before's, one row late.
    late=$("$cli" --db "$tmp/adamw-2.sqlite" export 1 --format csv | awk -F, '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      { n++; if ($c["time.comm_ms"] != $c["rank0/time.comm_ms"] ||
                 $c["time.optimizer_ms"] != $c["rank0/time.optimizer_ms"] ||
                 $c["rank1/time.comm_ms"] == "" || $c["rank1/time.optimizer_ms"] == "") bad++ }
      END { print n + 0, bad + 0 }')
    [ "${late% *}" -ge 50 ] && [ "${late#* }" = 0 ] ||
      fail "rank 0's exchange or optimizer time is not the step's on ${late#* } of ${late% *} rows"
    "$cli" --db "$tmp/muon-2.sqlite" show 1 | grep -q 'Muon distributed, matrices per rank: 2 1' ||
      fail "distributed Muon did not split its three matrices 2 + 1: $("$cli" --db "$tmp/muon-2.sqlite" show 1 | grep data-parallel)"
    ;;
  env)
    # Ranks started by a torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
    # without mpirun: they meet over the TCP rendezvous and log mpirun's losses bit for bit.
    sets=(--set threads=1 --set run.steps=10 --set data.workers=0 --set data.batch_size=32
      --set distributed.check_replicas=true)
    "$cli" --db "$tmp/mpirun.sqlite" launch --ddp --nproc 2 "$config" "${sets[@]}" \
      > "$tmp/mpirun.log" 2>&1 || fail "env: the mpirun launch failed: $(tail -3 "$tmp/mpirun.log")"
    losses "$tmp/mpirun.sqlite" > "$tmp/mpirun.txt"
    sets+=(--set distributed.backend='"mpi"' --set distributed.world_size=2)
    port=$(free_port)
    pids=()
    for r in 1 0; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port "$cli" --db "$tmp/env.sqlite" run "$config" "${sets[@]}" \
        > "$tmp/env-$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p" || fail "env: a rank failed: $(tail -n 3 "$tmp"/env-*.log)"
    done
    losses "$tmp/env.sqlite" > "$tmp/env.txt"
    compare env_vs_mpirun "$tmp/mpirun.txt" "$tmp/env.txt" 0
    # A rank that never comes: rank 0 gives up at the deadline and names it.
    t0=$(date +%s)
    if RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) "$cli" \
      --db "$tmp/alone.sqlite" run "$config" "${sets[@]}" --set distributed.timeout_s=2 \
      > "$tmp/alone.log" 2>&1; then
      fail "env: rank 0 ran without rank 1"
    fi
    grep -q 'rank 1 of 2 did not connect before the deadline' "$tmp/alone.log" ||
      fail "env: rank 0 did not name the missing rank: $(tail -n 2 "$tmp/alone.log")"
    [ $(($(date +%s) - t0)) -le 10 ] || fail "env: rank 0 took over 10 s to give up"
    echo "env: rank 0 alone gave up: $(grep -o 'rank 1 of 2 did not connect[^(]*' "$tmp/alone.log")"
    # PyTorch's own torchrun, where it is installed (Debian's python3-torch). --redirects/--tee 1:
    # torch 1.13's default (0) fails on Python 3.11.
    if command -v torchrun > /dev/null && torchrun --help 2>&1 | grep -q -- '--no[-_]python'; then
      torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 --no_python \
        "$cli" --db "$tmp/torchrun.sqlite" run "$config" "${sets[@]}" > "$tmp/torchrun.log" 2>&1 ||
        fail "env: torchrun failed: $(tail -n 5 "$tmp/torchrun.log")"
      losses "$tmp/torchrun.sqlite" > "$tmp/torchrun.txt"
      compare torchrun_vs_mpirun "$tmp/mpirun.txt" "$tmp/torchrun.txt" 0
    else
      echo "env: torchrun not installed, skipped that part"
    fi
    ;;
  device)
    # The exchange on a device (openreg:0, the reference accelerator: what CUDA with mpi does):
    # the flat buffer on the device, staged through the host for Open MPI; distributed Muon
    # gathers its matrices on the device. 2 ranks log the CPU's 2-rank losses (rtol 1e-5; openreg
    # has its own add/mul kernels), and the replica check passes at every step.
    sets=(--set threads=1 --set run.steps=10 --set data.workers=0 --set data.batch_size=32
      --set distributed.check_replicas=true --set 'model.hidden=[32, 32, 32]'
      --set model.dropout=0.1)
    for dev in cpu openreg:0; do
      "$cli" --db "$tmp/dev-$dev.sqlite" launch --ddp --nproc 2 "$muon" "${sets[@]}" \
        --set run.device="\"$dev\"" > "$tmp/dev-$dev.log" 2>&1 ||
        fail "device: the 2-rank run on $dev failed: $(grep -a 'run 1\|error' "$tmp/dev-$dev.log" | tail -3)"
      losses "$tmp/dev-$dev.sqlite" > "$tmp/dev-$dev.txt"
    done
    compare openreg_vs_cpu "$tmp/dev-cpu.txt" "$tmp/dev-openreg:0.txt" 1e-5
    ;;
  kill)
    lose_rank KILL 10 60
    # Rank 0, the process that writes the store: no rank can record why, the run is found
    # crashed, and the launcher says so after the job, with the command that continues it.
    # Another job training into the same store, started after it, is left alone; a job name
    # inherited from an outer job (TB_LAUNCH_JOB) does not hide the launcher's own.
    db=$tmp/rank0.sqlite
    TB_LAUNCH_JOB=outer:1:1:1 \
      "$cli" --db "$db" launch --ddp --nproc 2 "$config" --set threads=1 --set run.steps=100000000 \
      --set run.log_interval=50 --set checkpoint.interval=20 > "$tmp/rank0.log" 2>&1 &
    launcher=$!
    for _ in $(seq 1 100); do
      [ -n "$(find "$tmp/checkpoints" -maxdepth 3 -name 'step-*' 2> /dev/null)" ] && break
      sleep 0.1
    done
    [ -n "$(find "$tmp/checkpoints" -maxdepth 3 -name 'step-*' 2> /dev/null)" ] ||
      fail "no checkpoint within 10 s: $(tail -3 "$tmp/rank0.log")"
    "$cli" --db "$db" launch --ddp --nproc 2 "$config" --set threads=1 \
      --set run.steps=100000000 --set run.log_interval=50 > "$tmp/term.log" 2>&1 &
    other=$!
    for _ in $(seq 1 100); do
      "$cli" --db "$db" runs 2> /dev/null | awk '$1 == 2' | grep -q ' running ' && break
      sleep 0.2
    done
    pid=$(job_rank_pid "$launcher" 0)
    [ -n "$pid" ] || fail "rank 0 never started: $(tail -3 "$tmp/rank0.log")"
    kill -KILL "$pid"
    wait "$launcher" && fail "the launch exited 0 after rank 0 was killed"
    grep -aq '^run 1 crashed: rank 0, the process that writes the store, ended without closing the run (killed, or out of memory); every committed step is kept (last step [0-9]*)$' "$tmp/rank0.log" ||
      fail "the launcher did not say rank 0 was lost: $(tail -4 "$tmp/rank0.log")"
    grep -aqx "continue it with: trainbench-cli --db $db launch --ddp --resume 1" "$tmp/rank0.log" ||
      fail "the launcher did not say how to continue: $(tail -4 "$tmp/rank0.log")"
    grep -aq '^run 2 \|--resume 2$' "$tmp/rank0.log" &&
      fail "the launcher spoke of another job's run: $(grep -a '^run 2 \|--resume 2$' "$tmp/rank0.log")"
    "$cli" --db "$db" runs | awk '$1 == 2' | grep -q ' running ' ||
      fail "the other job's run was closed: $("$cli" --db "$db" runs)"
    echo "rank 0 killed: the launcher said its run crashed, and how to continue it"
    # SIGTERM to the launcher stops the whole job: failed with the signal, no rank blamed.
    launcher=$other
    kill -TERM "$launcher"
    wait "$launcher" && fail "the launch exited 0 after SIGTERM"
    # Failed, said by rank 0 ("... ended by signal 15 ...: the job was stopped") or, when it
    # was ended before it could write, by the launcher.
    row=$("$cli" --db "$db" runs | awk '$1 == 2')
    case $row in
      *failed*"this rank was ended by signal 15 (Terminated); every other rank was running: the job was stopped (or this rank alone was signalled)"*) ;;
      *failed*"the job was stopped (a signal to mpirun or to launch --ddp) before rank 0, which writes the store, could record it"*) ;;
      *) fail "SIGTERM to the launcher: $row" ;;
    esac
    grep -aq '^run 2 failed: ' "$tmp/term.log" || fail "the launcher did not say how the run ended"
    grep -aqx "continue it with: trainbench-cli --db $db launch --ddp --resume 2" "$tmp/term.log" ||
      grep -aqx 'run 2 has no checkpoint to continue from (checkpoint.interval = N saves one every N steps)' "$tmp/term.log" ||
      fail "the launcher did not say whether the run can continue: $(tail -3 "$tmp/term.log")"
    case $row in *lost*) fail "SIGTERM to the launcher blamed a rank: $row" ;; esac
    "$cli" --db "$db" runs | awk '$1 == 1' | grep -q ' crashed ' ||
      fail "the other job's crashed run changed: $("$cli" --db "$db" runs)"
    echo "SIGTERM to the launcher: ${row#*failed}"
    # A supervisor's stop (GNU timeout signals the launcher, then its process group) and a
    # Ctrl-C half a second later: mpirun hears one signal and ends every rank. In the launcher's
    # group it heard them all, and Open MPI's mpirun quits at once on a second one, leaving the
    # ranks training on without it. (setsid: a group of its own to signal; env: SIGINT back to
    # its default, which a background job of a script starts without.)
    db=$tmp/group.sqlite
    start_endless_job "$db" "$tmp/group.log" setsid env --default-signal=INT
    [ -n "$(job_rank_pid "$launcher" 1)" ] || fail "group: rank 1 never started: $(tail -3 "$tmp/group.log")"
    kill -TERM "$launcher"
    sleep 0.1
    kill -TERM -- "-$launcher"
    sleep 0.5
    int_sent=0
    kill -INT "$launcher" 2> /dev/null && int_sent=1
    wait "$launcher" && fail "group: the launch exited 0 after SIGTERM"
    for _ in $(seq 1 50); do
      [ -z "$(job_rank_pid "$launcher" 0)$(job_rank_pid "$launcher" 1)" ] && break
      sleep 0.1
    done
    if [ -n "$(job_rank_pid "$launcher" 0)$(job_rank_pid "$launcher" 1)" ]; then
      pkill -f -- "--db $db "
      fail "group: ranks still ran 5 s after the launcher ended: $(tail -3 "$tmp/group.log")"
    fi
    row=$("$cli" --db "$db" runs | awk '$1 == 1')
    case $row in
      *failed*"the job was stopped"*) ;;
      *) fail "group: the run is not failed as stopped: $row" ;;
    esac
    if [ "$int_sent" = 1 ]; then
      grep -aq '^launch --ddp: the job is stopping already' "$tmp/group.log" ||
        fail "group: the Ctrl-C after the stop was not answered: $(tail -3 "$tmp/group.log")"
    fi
    echo "group: SIGTERM to the launcher and its group, then SIGINT: one stop, no rank left"
    # SIGINT sent to the launcher alone (not the terminal's, which reached mpirun too) is passed
    # on: it used to be remembered only, and the job trained on.
    # (A background job of a script starts with SIGINT ignored, and keeps it so: env gives it
    # back its default.)
    db=$tmp/int.sqlite
    start_endless_job "$db" "$tmp/int.log" env --default-signal=INT
    kill -INT "$launcher"
    deadline=$((SECONDS + 20))
    while kill -0 "$launcher" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$launcher" 2> /dev/null; then
      kill -TERM "$launcher"
      fail "int: launch --ddp still ran 20 s after SIGINT"
    fi
    wait "$launcher" && fail "int: the launch exited 0 after SIGINT"
    row=$("$cli" --db "$db" runs | awk '$1 == 1')
    case $row in
      *failed*"the job was stopped"*) ;;
      *) fail "int: the run is not failed as stopped: $row" ;;
    esac
    echo "int: SIGINT to the launcher alone stopped the job"
    ;;
  cancel)
    # SIGUSR1 to mpirun: forwarded to every rank, which agree in the step's exchange to stop.
    db=$tmp/cancel.sqlite
    start_endless_job "$db" "$tmp/cancel.log"
    mpirun_pid=$(pgrep -f "mpirun .*$db" | head -1)
    [ -n "$mpirun_pid" ] || fail "cancel: no mpirun for the job: $(tail -3 "$tmp/cancel.log")"
    kill -USR1 "$mpirun_pid"
    t0=$(date +%s)
    wait "$launcher"
    t1=$(date +%s)
    row=$("$cli" --db "$db" runs | awk '$1 == 1')
    case $row in
      *cancelled*"cancelled at step"*) ;;
      *) fail "cancel: the run is not cancelled: $row; $(grep -a 'run 1' "$tmp/cancel.log" | tail -2)" ;;
    esac
    [ $((t1 - t0)) -le 10 ] || fail "cancel: the job took $((t1 - t0)) s to end"
    [ "$(grep -a -c -E '^(rank 1: )?run 1 cancelled at step' "$tmp/cancel.log")" -eq 2 ] ||
      fail "cancel: both ranks should say cancelled: $(grep -a 'run 1' "$tmp/cancel.log")"
    echo "cancel: ${row#*cancelled}, both ranks at the same step, $((t1 - t0)) s"
    # How to go on: over the ranks. `run --resume` is refused naming that command, and a resume
    # with another config is refused before mpirun starts (not by each rank under its banner).
    grep -aqx "continue it with: trainbench-cli --db $db launch --ddp --resume 1" "$tmp/cancel.log" ||
      fail "cancel: no hint to continue over the ranks: $(grep -a 'continue it' "$tmp/cancel.log")"
    out=$("$cli" --db "$db" run --resume 1 2>&1) && fail "cancel: run --resume of a 2-rank run ran"
    [ "$out" = "error: [run] run 1 is a data-parallel run (distributed.backend 'mpi', 2 ranks): continue it over its ranks with trainbench-cli launch --ddp --resume 1" ] ||
      fail "cancel: run --resume said: $out"
    out=$("$cli" --db "$db" launch --ddp --resume 1 --set run.steps=7 2>&1) &&
      fail "cancel: a resume with another run.steps ran"
    case $out in
      *mpirun*) fail "cancel: mpirun started for a resume its checkpoint refuses: $out" ;;
      "error: [checkpoint] "*"was written by a run with another config (run.steps: 100000000 in the checkpoint, 7 now)"*) ;;
      *) fail "cancel: a resume with another run.steps said: $out" ;;
    esac
    # run --stop-at on every rank (as mpirun or torchrun starts it): each rank stops after that
    # step. Only rank 0 used to: rank 1 went on into the next step's exchange and the job died
    # of heap corruption, the run crashed without a checkpoint.
    db=$tmp/stop-at.sqlite
    port=$(free_port)
    pids=()
    for r in 1 0; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port "$cli" --db "$db" run "$config" --set threads=1 \
        --set distributed.backend='"mpi"' --set distributed.world_size=2 --set run.steps=30 \
        --stop-at 5 > "$tmp/stop-at-$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do
      wait "$p" || fail "stop-at: a rank failed: $(tail -n 3 "$tmp"/stop-at-*.log)"
    done
    row=$("$cli" --db "$db" runs | awk '$1 == 1')
    case $row in
      *cancelled*"at step 5"*) ;;
      *) fail "stop-at: run 1 did not stop at step 5: $row" ;;
    esac
    echo "stop-at: both ranks stopped after step 5"
    # SIGUSR1 sent to `launch --ddp` itself is passed on to mpirun (it ended only the launcher,
    # and the job ran on to its end).
    db=$tmp/launcher.sqlite
    start_endless_job "$db" "$tmp/launcher.log"
    kill -USR1 "$launcher"
    deadline=$((SECONDS + 30))
    while kill -0 "$launcher" 2> /dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
    if kill -0 "$launcher" 2> /dev/null; then
      pkill -f "mpirun .*$db"
      fail "launcher: launch --ddp still runs 30 s after SIGUSR1"
    fi
    wait "$launcher"
    pkill -f "mpirun .*$db"  # (a launcher that died of the signal left its job running)
    row=$("$cli" --db "$db" runs | awk '$1 == 1')
    case $row in
      *cancelled*"cancelled at step"*) ;;
      *) fail "launcher: SIGUSR1 to launch --ddp did not cancel the run: $row" ;;
    esac
    echo "launcher: SIGUSR1 to launch --ddp cancelled the run"
    ;;
  resume)
    sets=(--set threads=1 --set run.steps=6000 --set run.log_interval=100 --set eval.interval=2000
      --set checkpoint.interval=1000 --set 'model.hidden=[32, 32, 32]' --set model.dropout=0.1)
    "$cli" --db "$tmp/whole.sqlite" launch --ddp --nproc 2 "$muon" "${sets[@]}" \
      > "$tmp/whole.log" 2>&1 || fail "the uninterrupted run failed: $(tail -3 "$tmp/whole.log")"
    mkdir -p "$tmp/cut"
    db=$tmp/cut/cut.sqlite
    "$cli" --db "$db" launch --ddp --nproc 2 "$muon" "${sets[@]}" > "$tmp/cut.log" 2>&1 &
    launcher=$!
    for _ in $(seq 1 300); do
      [ -n "$(find "$tmp/cut/checkpoints" -maxdepth 3 -name 'step-00001000' 2> /dev/null)" ] && break
      sleep 0.05
    done
    [ -n "$(find "$tmp/cut/checkpoints" -maxdepth 3 -name 'step-00001000' 2> /dev/null)" ] ||
      fail "no checkpoint of step 1000 within 15 s: $(tail -3 "$tmp/cut.log")"
    pid=$(rank_pid "$db" 1)
    [ -n "$pid" ] || fail "rank 1 is gone before the kill: $(tail -3 "$tmp/cut.log")"
    kill -KILL "$pid"
    wait "$launcher" && fail "the launch exited 0 after rank 1 was killed"
    cut_at=$("$cli" --db "$db" runs | awk '$1 == 1 { print $0 }')
    case $cut_at in *failed*) ;; *) fail "the cut run is not failed: $cut_at" ;; esac
    "$cli" --db "$db" launch --ddp --nproc 2 --resume 1 > "$tmp/resume.log" 2>&1 ||
      fail "the resume failed: $(grep -a 'run 1\|error' "$tmp/resume.log" | tail -3)"
    grep -aq 'resuming run 1' "$tmp/resume.log" || fail "no resume: $(tail -3 "$tmp/resume.log")"
    # From a checkpoint the cut run wrote (step 1000 or later), not trained again from step 0.
    "$cli" --db "$db" show 1 | grep -Eq 'resumed from .*/step-0000[1-9]000 at step [1-9]000(;|$)' ||
      fail "the run did not continue from a checkpoint: $("$cli" --db "$db" show 1 | grep -a resumed)"
    losses "$tmp/whole.sqlite" > "$tmp/whole.txt"
    losses "$db" > "$tmp/cut.txt"
    compare resumed_after_kill "$tmp/whole.txt" "$tmp/cut.txt" 0
    ;;
  stop) lose_rank STOP 8 3 ;;
  *) fail "unknown mode '$mode' (equivalence, env, device, kill, stop, cancel, resume)" ;;
esac
echo "PASS: ddp $mode"
