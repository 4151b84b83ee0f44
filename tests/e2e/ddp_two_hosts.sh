#!/usr/bin/env bash
# Two "hosts" for real: two network namespaces joined by a veth pair (10.77.0.1 <-> 10.77.0.2),
# Open MPI restricted to TCP over that link (no shared memory, no loopback), mpirun started in
# the first namespace by `trainbench-cli launch --ddp --hosts 10.77.0.1:1,10.77.0.2:1`, its
# remote launch agent `ip netns exec` instead of ssh. The 2-rank run must log the losses of one
# process with the doubled batch (rtol 1e-5, 10 steps) and record a rank on each address. Then
# the same ranks started by a torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR=10.77.0.1,
# MASTER_PORT), one per namespace, must log mpirun's losses bit for bit.
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; without them it reports SKIP (exit 77).
# Usage: ddp_two_hosts.sh CLI REPO_ROOT        (ctest: e2e.ddp_two_hosts)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start ddp_two_hosts "CLI REPO_ROOT" 2 2 "$@"
cli=$1
repo=$2
config=$repo/tests/ui/data/blobs.toml
command -v mpirun > /dev/null || fail "mpirun not found (Debian's openmpi-bin)"
skip() {
  echo "SKIP: ddp_two_hosts: $*"
  exit 77
}
command -v ip > /dev/null || skip "no ip(8) (iproute2)"
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
ns_a=tb-host-a-$$
ns_b=tb-host-b-$$
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-ddp_two_hosts.XXXXXX") || fail "mktemp -d failed"
cleanup() {
  ip netns del "$ns_a" 2> /dev/null
  ip netns del "$ns_b" 2> /dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$ns_a" 2> "$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "$ns_b" || fail "second namespace"
ip link add tb-veth-a netns "$ns_a" type veth peer name tb-veth-b netns "$ns_b" ||
  fail "cannot create the veth pair"
ip -n "$ns_a" addr add 10.77.0.1/24 dev tb-veth-a
ip -n "$ns_b" addr add 10.77.0.2/24 dev tb-veth-b
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set tb-veth-a up
ip -n "$ns_b" link set tb-veth-b up

# mpirun's remote launch agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespace.
agent=$tmp/netns-agent.sh
cat > "$agent" << EOF
#!/bin/sh
host=\$1
shift
echo "\$host" >> "$tmp/agent.log"
case \$host in
  10.77.0.1) ns=$ns_a ;;
  10.77.0.2) ns=$ns_b ;;
  *) echo "netns-agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
EOF
chmod +x "$agent"

sets=(--set threads=1 --set run.steps=10 --set data.workers=0)
"$cli" --db "$tmp/one.sqlite" run "$config" "${sets[@]}" --set data.batch_size=64 \
  > "$tmp/one.log" 2>&1 || fail "the one-process run failed: $(tail -3 "$tmp/one.log")"
# TCP only (no shared memory between the "hosts"), on the veth subnet only.
ip netns exec "$ns_a" env OMPI_MCA_plm_rsh_agent="$agent" OMPI_MCA_btl=tcp,self \
  OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 \
  timeout 120 "$cli" --db "$tmp/two.sqlite" launch --ddp --nproc 2 \
  --hosts 10.77.0.1:1,10.77.0.2:1 "$config" "${sets[@]}" --set data.batch_size=32 \
  --set distributed.check_replicas=true > "$tmp/two.log" 2>&1 ||
  fail "the 2-host run failed: $(grep -a 'run 1\|error\|ORTE\|refused' "$tmp/two.log" | tail -5)"
losses() {
  "$cli" --db "$1" export 1 --format csv |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next } { print $c }'
}
losses "$tmp/one.sqlite" > "$tmp/one.txt"
losses "$tmp/two.sqlite" > "$tmp/two.txt"
[ "$(wc -l < "$tmp/one.txt")" -eq 10 ] && [ "$(wc -l < "$tmp/two.txt")" -eq 10 ] ||
  fail "expected 10 losses each: $(wc -l < "$tmp/one.txt") and $(wc -l < "$tmp/two.txt")"
worst=$(paste -d' ' "$tmp/one.txt" "$tmp/two.txt" | awk '
  { d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; rel = d / m; if (rel > w) w = rel }
  END { printf "%.3g", w }')
awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' || fail "losses differ by $worst (rtol 1e-5)"
# mpirun started the second host's daemon through the agent, i.e. in the second namespace.
grep -qx 10.77.0.2 "$tmp/agent.log" 2> /dev/null || fail "mpirun never launched on 10.77.0.2"
"$cli" --db "$tmp/two.sqlite" show 1 | grep -q 'info: data-parallel: 2 ranks over mpi' ||
  fail "the run did not record its ranks"
echo "10 losses within $worst of the one-process run; $(grep -a -c 'PASS\|run 1 finished' "$tmp/two.log") ranks finished"

# The same two hosts with the ranks started by a torchrun-style environment, one per namespace:
# rank 0 listens on 10.77.0.1 (MASTER_ADDR), the ranks join over TCP on the veth link, and log
# the mpirun launch's losses bit for bit.
port=29517
for r in 1 0; do
  ns=$ns_a
  [ "$r" = 1 ] && ns=$ns_b
  ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR=10.77.0.1 MASTER_PORT=$port OMPI_MCA_btl=tcp,self \
    OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 \
    timeout 120 "$cli" --db "$tmp/env-$r.sqlite" run "$config" "${sets[@]}" \
    --set data.batch_size=32 --set distributed.check_replicas=true \
    --set distributed.backend='"mpi"' --set distributed.world_size=2 --set distributed.timeout_s=60 \
    > "$tmp/env-$r.log" 2>&1 &
  eval "pid_$r=\$!"
done
# shellcheck disable=SC2154
wait "$pid_0" || fail "torchrun-style rank 0 failed: $(tail -n 3 "$tmp/env-0.log")"
# shellcheck disable=SC2154
wait "$pid_1" || fail "torchrun-style rank 1 failed: $(tail -n 3 "$tmp/env-1.log")"
losses "$tmp/env-0.sqlite" > "$tmp/env.txt"
cmp -s "$tmp/two.txt" "$tmp/env.txt" ||
  fail "the torchrun-style ranks' losses differ from mpirun's: $(paste -d' ' "$tmp/two.txt" "$tmp/env.txt" | head -3 | tr '\n' ';')"
"$cli" --db "$tmp/env-0.sqlite" show 1 | grep -q 'info: data-parallel: 2 ranks over mpi' ||
  fail "the torchrun-style run did not record its ranks"
echo "torchrun-style ranks on the two hosts: mpirun's 10 losses, bit for bit"
echo "PASS: ddp_two_hosts"
