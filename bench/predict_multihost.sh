#!/usr/bin/env bash
# pnbench --predict across two "hosts": Linux network namespaces joined by a veth pair, one rank
# each, talking TCP only (the setup of tests/cli/multihost.sh). The all-reduce sweep and the
# replayed statistics of one update go to OUT/allreduce.csv and OUT/replay.csv, with the fit
# printed by launcher/analysis/predict.py. Needs root and `ip netns`.
# Usage: bench/predict_multihost.sh PNBENCH OUT [PNBENCH FLAGS, e.g. --config configs/default.ini]
set -u
pnbench="$1"; out="$2"; shift 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "predict_multihost: needs root (network namespaces)" >&2; exit 2; }
ns_a="pnpr$$a" ns_b="pnpr$$b" veth_a="pnq$$a" veth_b="pnq$$b"
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
set -e
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.78.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.78.0.2/24 dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
set +e
printf '10.78.0.1 slots=1\n10.78.0.2 slots=1\n' > "$tmp/hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mkdir -p "$out"
ip netns exec "$ns_a" mpirun --allow-run-as-root --hostfile "$tmp/hostfile" -np 2 \
  --map-by ppr:1:node --bind-to none --mca plm_rsh_agent "$here/../tests/cli/netns_rsh.sh" \
  --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.78.0.0/24 \
  --mca oob_tcp_if_include 10.78.0.0/24 -x OMP_NUM_THREADS \
  "$pnbench" --predict --predict-out "$(cd "$out" && pwd)" "$@"
