#!/usr/bin/env bash
# A real Slurm on this machine (Debian's slurm-wlm and munge): munged, slurmctld and slurmd are
# started on loopback with their keys, sockets, state and a minimal slurm.conf in a temporary
# folder. `sbatch --wait launcher/slurm/pntrain.sbatch` trains 2 ranks and its losses equal the
# plain `mpirun -np 2` run's bit for bit; `srun --mpi=list` is printed and `srun --mpi=pmix -n 2
# pntrain` (where offered) gives the same losses; the job script's preemption path (USR1 to the
# batch shell, as --signal=B:USR1@S delivers) saves, exits 143 and the resubmitted job resumes
# bit for bit; a plain scancel saves and ends the job; a requeue after the notice resumes bit for
# bit. Every daemon started here is ended by its process id.
# Needs root (exits 77, skipped, otherwise). Usage: slurm.sh REPO_ROOT BUILD_DIR
set -u
root="$1" build="$2"
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: starting slurmctld, slurmd and munged here needs root"; exit 77
fi
for c in munged munge slurmctld slurmd sbatch srun sinfo scancel; do
  command -v "$c" >/dev/null || { echo "FAIL: no '$c': launcher/pn setup installs slurm-wlm and munge"; exit 1; }
done
tmp=$(mktemp -d)
daemons=()
cleanup() {
  local p
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures+1)); }
records() { sed -n 's/.*"loss":\([^,}]*\).*"update":\([0-9]*\).*/\2 \1/p' "$1"; }
t_start=$(date +%s)

# munge: its own key, socket, pid, log and seed files.
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$tmp/munge.key"
munged --foreground --force --key-file="$tmp/munge.key" --socket="$tmp/munge.socket" \
  --pid-file="$tmp/munged.pid" --log-file="$tmp/munged.log" --seed-file="$tmp/munge.seed" \
  >"$tmp/munged.out" 2>&1 &
daemons+=($!)
for _ in $(seq 100); do [ -S "$tmp/munge.socket" ] && break; sleep 0.1; done

# Slurm: one node (this host) on loopback, ports away from the defaults.
host=$(hostname -s)
port=$((20000 + $$ % 20000))
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=pntest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -D -i >"$tmp/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D >"$tmp/slurmd.out" 2>&1 &
daemons+=($!)
for _ in $(seq 300); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.2; done
if [ "$(sinfo -h -o %T 2>/dev/null)" != idle ]; then
  fail "Slurm did not come up: node $(sinfo -h -o %T 2>&1)"
  tail -5 "$tmp/munged.out" "$tmp/slurmctld.out" "$tmp/slurmd.out" "$tmp/slurmctld.log" "$tmp/slurmd.log" 2>/dev/null
  exit 1
fi
echo "ok: munged, slurmctld and slurmd up in $(( $(date +%s) - t_start )) s: $(sinfo -h -o '%P %a %D %T %N')"
echo "srun --mpi=list:"; srun --mpi=list 2>&1 | sed 's/^/  /'

export OMP_NUM_THREADS=1
flags=(--decoder-embed-dim 32 --decoder-ffn-embed-dim 64 --decoder-layers 1 --max-tokens 256
       --tokens-per-sample 32 --log-interval 1 --norm power --dropout 0.1 --threads 1
       --validate-interval-updates 0)
config="$root/configs/default.ini"
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
job_env="ALL,PN_ROOT=$root,PN_BUILD_DIR=$build,PN_REQUEUE=0"

# 1. sbatch --wait of the repository's job script, 2 ranks, against a plain mpirun -np 2.
timeout 300 "${mpirun[@]}" "$build/bin/pntrain" --config "$config" "${flags[@]}" --max-update 8 \
  --metrics "$tmp/plain.jsonl" >"$tmp/plain.log" 2>&1 || { fail "plain mpirun run"; tail -5 "$tmp/plain.log"; }
timeout 300 sbatch --wait --output="$tmp/job1.out" --export="$job_env" \
  "$root/launcher/slurm/pntrain.sbatch" -- "${flags[@]}" --max-update 8 --metrics "$tmp/sbatch.jsonl" \
  >"$tmp/sbatch1.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ "$(records "$tmp/sbatch.jsonl" | wc -l)" -ne 8 ]; then
  fail "sbatch --wait: exit $rc"; tail -5 "$tmp/sbatch1.log" "$tmp/job1.out"
elif ! diff <(records "$tmp/plain.jsonl") <(records "$tmp/sbatch.jsonl") >/dev/null; then
  fail "sbatch losses differ from mpirun -np 2"; diff <(records "$tmp/plain.jsonl") <(records "$tmp/sbatch.jsonl") | head
else
  echo "ok: sbatch --wait launcher/slurm/pntrain.sbatch, 2 ranks: 8 losses equal mpirun -np 2's bit for bit"
  grep -E "^pntrain.sbatch|^done" "$tmp/job1.out" | sed 's/^/  /'
fi

# 2. srun with Slurm's PMIx plugin, where it is offered.
if srun --mpi=list 2>&1 | grep -qw pmix; then
  timeout 300 srun --mpi=pmix -n 2 "$build/bin/pntrain" --config "$config" "${flags[@]}" \
    --max-update 8 --metrics "$tmp/srun.jsonl" >"$tmp/srun.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! diff <(records "$tmp/plain.jsonl") <(records "$tmp/srun.jsonl") >/dev/null; then
    fail "srun --mpi=pmix -n 2: exit $rc or other losses"; tail -5 "$tmp/srun.log"
  else echo "ok: srun --mpi=pmix -n 2 pntrain: 8 losses equal mpirun -np 2's bit for bit"; fi
else
  echo "note: this Slurm offers no pmix plugin; srun runs skipped"
fi

# 3. Preemption through the job script: USR1 to the batch shell (what --signal=B:USR1@S sends),
#    the ranks save after the current update, the job ends 143 (PN_REQUEUE=0) leaving no
#    process; the same job resubmitted resumes and equals an uninterrupted run bit for bit.
long=("${flags[@]}" --max-update 1500 --log-interval 500)
timeout 300 "${mpirun[@]}" "$build/bin/pntrain" --config "$config" "${long[@]}" \
  --metrics "$tmp/straight.jsonl" >"$tmp/straight.log" 2>&1 || fail "uninterrupted mpirun run"
submit=(sbatch --parsable --output="$tmp/job2.out" --export="$job_env"
        "$root/launcher/slurm/pntrain.sbatch" -- "${long[@]}" --metrics "$tmp/preempted.jsonl"
        --save-dir "$tmp/ck")
job=$("${submit[@]}")
for _ in $(seq 600); do
  [ -s "$tmp/preempted.jsonl" ] && [ "$(wc -l <"$tmp/preempted.jsonl")" -ge 20 ] && break; sleep 0.1
done
at=$(wc -l <"$tmp/preempted.jsonl" | tr -d ' ')
scancel --batch --signal=USR1 "$job"
for _ in $(seq 600); do squeue -h -j "$job" 2>/dev/null | grep -q . || break; sleep 0.2; done
ck=$(ls -d "$tmp"/ck/checkpoint_* 2>/dev/null | head -1)
if ! grep -q "pn run: interrupted; the same command resumes" "$tmp/job2.out" || [ ! -e "$ck/DONE" ]; then
  fail "USR1 to the job script did not save"; tail -5 "$tmp/job2.out"
elif [ "${ck##*_}" -ge 1500 ]; then
  fail "the job ended before the notice (raise --max-update)"
else
  echo "ok: USR1 to the batch shell at update $at or later -> ${ck##*/}; $(grep -m1 'interrupted (' "$tmp/job2.out" | sed 's/^.*\] //' | cut -c1-120)"
fi
# Slurm drops a job from squeue while its step daemons may still be reaping the ranks: a process
# counts as left over when it outlives that by 10 s (the job's own KillWait is 30 s).
left_over() {
  local p
  for _ in $(seq 50); do pgrep -f -- "--save-dir $1( |\$)" >/dev/null || return 1; sleep 0.2; done
  for p in $(pgrep -f -- "--save-dir $1( |\$)"); do  # what it is, its parent, its children
    ps -o pid=,ppid=,stat=,etimes=,args= -p "$p" | sed 's/^/  left: /' | cut -c1-160
    ps -o pid=,ppid=,stat=,etimes=,args= --ppid "$p" | sed 's/^/    child: /' | cut -c1-160
  done
  return 0
}
left_over "$tmp/ck" && fail "processes left after the preemption"
timeout 300 "${submit[@]/--parsable/--wait}" >"$tmp/sbatch3.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "restored .*${ck##*/}" "$tmp/job2.out"; then
  fail "the resubmitted job: exit $rc"; tail -5 "$tmp/job2.out"
elif ! diff <(records "$tmp/straight.jsonl") <(records "$tmp/preempted.jsonl") >/dev/null; then
  fail "the preempted and resumed job differs from an uninterrupted run"
  diff <(records "$tmp/straight.jsonl") <(records "$tmp/preempted.jsonl") | head
else echo "ok: resubmitted, it resumed from ${ck##*/} and its 1500 losses equal an uninterrupted run's bit for bit"; fi
# 4. A plain scancel (SIGTERM to every process of the job): the ranks save after the current
#    update and the job ends, leaving no process.
wait_metrics() { for _ in $(seq 600); do [ -s "$1" ] && [ "$(wc -l <"$1")" -ge 20 ] && break; sleep 0.1; done; }
wait_gone() { for _ in $(seq "$2"); do squeue -h -j "$1" 2>/dev/null | grep -q . || return 0; sleep 0.2; done; return 1; }
job=$(sbatch --parsable --output="$tmp/job4.out" --export="$job_env" "$root/launcher/slurm/pntrain.sbatch" \
        -- "${long[@]}" --metrics "$tmp/cancelled.jsonl" --save-dir "$tmp/ck_cancel")
wait_metrics "$tmp/cancelled.jsonl"
scancel "$job"
wait_gone "$job" 600 || fail "scancel: job $job still listed"
ck=$(ls -d "$tmp"/ck_cancel/checkpoint_* 2>/dev/null | head -1)
if [ ! -e "$ck/DONE" ] || [ "${ck##*_}" -ge 1500 ]; then
  fail "scancel of a running job saved no checkpoint"; tail -5 "$tmp/job4.out"
elif left_over "$tmp/ck_cancel"; then
  fail "processes left after scancel"; grep -v '^update' "$tmp/job4.out" | tail -8
  grep -i "job[ _=]*$job\b\|kill\|signal" "$tmp/slurmd.log" | tail -12 | cut -c1-160
else echo "ok: scancel of a running job -> ${ck##*/} saved, the job ended: $(grep -m1 '^pn run: rank 0' "$tmp/job4.out" | cut -c1-160)"; fi

# 5. A requeue: the notice (USR1) with PN_REQUEUE=1 saves, the job script requeues the job, and
#    the requeued job resumes from that checkpoint and equals an uninterrupted run bit for bit.
job=$(sbatch --parsable --output="$tmp/job5.out" --export="${job_env/PN_REQUEUE=0/PN_REQUEUE=1}" \
        "$root/launcher/slurm/pntrain.sbatch" -- "${long[@]}" --metrics "$tmp/requeued.jsonl" \
        --save-dir "$tmp/ck_requeue")
wait_metrics "$tmp/requeued.jsonl"
scancel --batch --signal=USR1 "$job"
wait_gone "$job" 1500 || fail "requeue: job $job still listed after 300 s"
if ! grep -q "requeueing job $job" "$tmp/job5.out" || ! grep -q "restored .*checkpoint_" "$tmp/job5.out"; then
  fail "the job was not requeued and resumed"; tail -5 "$tmp/job5.out"
elif ! diff <(records "$tmp/straight.jsonl") <(records "$tmp/requeued.jsonl") >/dev/null; then
  fail "the requeued job differs from an uninterrupted run"
else echo "ok: USR1 with PN_REQUEUE=1 -> requeued, $(grep -m1 'restored' "$tmp/job5.out" | sed 's/^.*\] //'), 1500 losses equal an uninterrupted run's"; fi
echo "Slurm test: $(( $(date +%s) - t_start )) s including the daemons' start"
exit $failures
