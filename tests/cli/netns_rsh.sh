#!/bin/sh
# netns_rsh.sh: a remote shell for Open MPI's rsh launcher (--mca plm_rsh_agent) that "logs in"
# to a host simulated by a Linux network namespace: `netns_rsh.sh HOST COMMAND...` runs
# COMMAND (joined with spaces and run by sh, as ssh does) inside the namespace that is named
# HOST or that owns the IPv4 address HOST. The filesystem is shared, so orted and pntrain are
# found at the same paths. Used by tests/cli/multihost.sh; needs root.
set -eu
# Open MPI may put ssh-style options before the host; none of them matter here.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "netns_rsh.sh: usage: netns_rsh.sh HOST COMMAND..." >&2; exit 255; }
host="$1"
shift
ns=""
for candidate in $(ip netns list | cut -d' ' -f1); do
  if [ "$candidate" = "$host" ] ||
     ip -n "$candidate" -o -4 addr show 2>/dev/null | grep -q " inet $host/"; then
    ns="$candidate"
    break
  fi
done
# 255 is what ssh returns when it cannot reach the host; mpirun then names the host.
[ -n "$ns" ] || { echo "netns_rsh.sh: no network namespace is named or owns '$host'" >&2; exit 255; }
exec ip netns exec "$ns" sh -c "$*"
