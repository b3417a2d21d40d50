#!/usr/bin/env bash
# A real multi-host run on one machine: two "hosts" are Linux network namespaces joined by a veth
# pair (10.77.0.1/24 and 10.77.0.2/24, nothing else reachable). mpirun starts in the first,
# reads a hostfile of the two addresses and starts the second host's orted through Open MPI's
# rsh launcher, whose agent (netns_rsh.sh) enters the namespace that owns the address instead
# of ssh-ing. Ranks talk over TCP only (pml ob1, btl tcp,self on the veth subnet).
#
# For sync_batch and power it trains a few updates at 2 ranks (one per host) and the same
# command single-host (`mpirun -np 2`), then requires the per-update losses and the saved
# checkpoint (model.bin: parameters and Adam moments; rank<r>.bin: the norms' running state)
# to be equal bit for bit: an update is split into the same per-rank shares and the sums of
# two ranks are a + b whatever the transport, so nothing may differ.
#
# Needs root, iproute2 with `ip netns`, and a kernel that lets us create namespaces; otherwise
# it exits 77 (ctest SKIP) saying which is missing.
# Usage: multihost.sh PNTRAIN [MPIRUN]
set -u
pntrain="$1"
mpirun="${2:-mpirun}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=/usr/bin/python3; [ -x "$py" ] || py=python3

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "not root: building network namespaces needs root (run ctest as root)"
command -v ip >/dev/null || skip "no 'ip' command: install iproute2"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available (iproute2 without netns?)"

# Names unique to this run, so concurrent runs do not collide; veth names are at most 15 chars.
ns_a="pnmh$$a" ns_b="pnmh$$b" veth_a="pnv$$a" veth_b="pnv$$b"
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null  # deleting a namespace deletes its end of the veth pair
  ip netns del "$ns_b" 2>/dev/null
  ip link del "$veth_a" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$ns_a" 2>"$tmp/err" ||
  skip "cannot create a network namespace (an unprivileged container?): $(cat "$tmp/err")"
ip netns add "$ns_b" 2>"$tmp/err" || skip "cannot create a second network namespace: $(cat "$tmp/err")"
ip link add "$veth_a" type veth peer name "$veth_b" 2>"$tmp/err" ||
  skip "cannot create a veth pair (no veth module?): $(cat "$tmp/err")"
set -e
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up  # MPI also talks to itself through loopback
done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up
set +e
echo "hosts: $ns_a (10.77.0.1) <-> $ns_b (10.77.0.2) over $veth_a/$veth_b"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }

printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$tmp/hostfile"
# OMPI_ALLOW_RUN_AS_ROOT*: the remote orted is root too and reads these, not the flag.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
multihost=("$mpirun" --allow-run-as-root --hostfile "$tmp/hostfile" -np 2 --map-by ppr:1:node
           --bind-to none --mca plm_rsh_agent "$here/netns_rsh.sh"
           --mca pml ob1 --mca btl tcp,self
           --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24
           -x OMP_NUM_THREADS)
singlehost=("$mpirun" --allow-run-as-root -np 2 --bind-to none -x OMP_NUM_THREADS)
train=(--data builtin --tokens-per-sample 32 --max-tokens 256 --max-update 6
       --validate-interval-updates 6 --decoder-layers 1 --decoder-embed-dim 32
       --decoder-attention-heads 2 --decoder-ffn-embed-dim 64 --threads 1 --log-interval 1
       --warmup-updates 2 --lr 3e-3)

# First the launch alone: one rank per host, each printing the veth address it sees.
seen=$(ip netns exec "$ns_a" "${multihost[@]}" sh -c 'ip -o -4 addr show | grep -o "10\.77\.0\.[0-9]*"' 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ "$(sort <<<"$seen" | tr '\n' ' ')" != "10.77.0.1 10.77.0.2 " ]; then
  fail "launch across the namespaces: exit $rc, ranks saw: $seen"
  exit 1
fi
echo "ranks run on: $(sort <<<"$seen" | tr '\n' ' ')"

for norm in sync_batch power; do
  log="$tmp/multi_$norm.log"
  # mpirun runs on the first host, like a login on a cluster's first node.
  ip netns exec "$ns_a" "${multihost[@]}" "$pntrain" "${train[@]}" --norm "$norm" \
    --metrics "$tmp/multi_$norm.jsonl" --save-dir "$tmp/multi_$norm" > "$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then fail "$norm: multi-host run exit $rc"; tail -30 "$log"; continue; fi
  grep -q "ranks 2 (mpi)" "$log" || fail "$norm: multi-host log does not show 2 MPI ranks"
  "${singlehost[@]}" "$pntrain" "${train[@]}" --norm "$norm" \
    --metrics "$tmp/single_$norm.jsonl" --save-dir "$tmp/single_$norm" > "$tmp/single_$norm.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then fail "$norm: single-host run exit $rc"; tail -30 "$tmp/single_$norm.log"; continue; fi
  grep -E "^I.*(update [0-9]+ \||valid \|)" "$log" | sed 's/^.*\] /  multi-host: /' | tail -3
  "$py" - "$tmp/multi_$norm.jsonl" "$tmp/single_$norm.jsonl" "$norm" <<'PY' || fail "$norm: losses differ"
import json, sys
def records(path):
    out = []
    for line in open(path):
        j = json.loads(line)
        if "event" not in j:  # the attempts' start and end records differ in time
            out.append({k: j[k] for k in ("update", "loss", "nll_loss", "ntokens", "valid_loss")
                        if k in j})
    return out
multi, single, norm = records(sys.argv[1]), records(sys.argv[2]), sys.argv[3]
if len(multi) != len(single) or len(multi) < 7:
    sys.exit("%s: %d multi-host records, %d single-host (want 6 updates + 1 validation)" %
             (norm, len(multi), len(single)))
for m, s in zip(multi, single):
    if m != s:  # exact float equality: the same math in the same order
        sys.exit("%s: multi-host %s != single-host %s" % (norm, m, s))
print("  %s: %d records equal bit for bit (last loss %.17g, valid loss %.17g)" %
      (norm, len(multi), multi[-2]["loss"], multi[-1]["valid_loss"]))
PY
  ckpt_multi="$tmp/multi_$norm/checkpoint_6" ckpt_single="$tmp/single_$norm/checkpoint_6"
  for f in model.bin rank0.bin rank1.bin; do
    if [ ! -f "$ckpt_multi/$f" ] || [ ! -f "$ckpt_single/$f" ]; then
      fail "$norm: checkpoint file $f missing ($(ls "$ckpt_multi" "$ckpt_single" 2>&1 | tr '\n' ' '))"
    elif cmp -s "$ckpt_multi/$f" "$ckpt_single/$f"; then
      echo "  $norm: checkpoint_6/$f identical ($(stat -c %s "$ckpt_multi/$f") bytes)"
    else
      fail "$norm: checkpoint_6/$f differs between the multi-host and the single-host run"
    fi
  done
done

[ $failures -eq 0 ] && echo "multihost: all passed"
exit $((failures > 0))
