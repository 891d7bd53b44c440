#!/usr/bin/env bash
# The examples, the preflight, doctor --bandwidth, stacks and a Ctrl-C teardown on
# this machine's GPUs, through clusterlaunch's whole launch path (host: localhost):
# what the suite cannot show on a CPU-only machine.  Needs python3 with torch; with
# no nvidia-smi it runs the same steps on 2 CPU processes (gloo), which is how the
# script itself is tested.  Writes OUT/gpu-check.log (every command and its output)
# and OUT/summary.txt (one line per step: ok or FAILED, its exit status, seconds).
#     scripts/gpu-check.sh OUT        (PYTHON=... to choose the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:?usage: scripts/gpu-check.sh OUT}" && cd "$1" && pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d)
log=$out/gpu-check.log summary=$out/summary.txt
: >"$log" && : >"$summary"
# A command, not a function, so that timeout can run it.
printf '#!/bin/sh\nexec %q -m clusterlaunch "$@"\n' "$PY" >"$work/cl" && chmod +x "$work/cl"
cl=$work/cl

if command -v nvidia-smi >/dev/null; then gpus=auto; else gpus=2; fi
printf 'hosts:\n  - host: localhost\n    gpus: %s\n' "$gpus" >"$work/hosts.yaml"
# Only GPU 0, named: devices: becomes CUDA_VISIBLE_DEVICES on the host.
printf 'hosts:\n  - host: localhost\n    gpus: 1\n    devices: [0]\n' >"$work/dev0.yaml"
# A device the machine lacks: the preflight must refuse it, and nothing start.
printf 'hosts:\n  - host: localhost\n    gpus: 1\n    devices: [7]\n' >"$work/dev7.yaml"

# step NAME EXPECTED_STATUS COMMAND...: runs it, logs it, checks its exit status.
step() {
    local name=$1 want=$2 start rc
    shift 2
    printf '\n===== %s: %s\n' "$name" "$*" >>"$log"
    start=$EPOCHREALTIME
    timeout -s INT 240 "$@" >>"$log" 2>&1
    rc=$?
    local took
    took=$(awk "BEGIN { print $EPOCHREALTIME - $start }")
    if [ "$rc" -eq "$want" ]; then verdict=ok; else verdict=FAILED; fi
    printf '%-28s %-6s exit %-3s (want %s) %6.1f s\n' "$name" "$verdict" "$rc" "$want" "$took" \
        | tee -a "$summary"
}
# expect NAME PATTERN: the log's last step printed PATTERN (an extended regex).
# No pipeline: under pipefail, a reader that stops early (sed q, grep -q) makes the
# writer's next write die of SIGPIPE, and the match reads as a failure (a CI run
# did this once; a writer slowed between two writes does it every time).
expect() {
    local last_step
    last_step=$(awk '/^===== /{text = ""} {text = text $0 "\n"} END {printf "%s", text}' "$log")
    if grep -Eq "$2" <<<"$last_step"; then verdict=ok; else verdict=FAILED; fi
    printf '%-28s %-6s output matches /%s/\n' "  $1" "$verdict" "$2" | tee -a "$summary"
}

step machine 0 bash -c "command -v nvidia-smi && nvidia-smi; $PY -c 'import sys, torch
print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())
print(torch.cuda.nccl.version() if torch.cuda.is_available() else \"no NCCL\")'"
step dry-run 0 "$cl" run --dry-run "$work/hosts.yaml" examples/hello_ranks.py
step check 0 "$cl" check "$work/hosts.yaml"
step hello_ranks 0 "$cl" run "$work/hosts.yaml" examples/hello_ranks.py
[ "$gpus" = auto ] && expect hello-on-gpu 'device=cuda:0 backend=nccl'
step collectives 0 "$cl" run "$work/hosts.yaml" examples/collectives.py
expect all-checks-passed 'all checks passed'
step ddp_train 0 "$cl" run "$work/hosts.yaml" examples/ddp_train.py --epochs 3 --fresh \
    --checkpoint "$work/ckpt.pt"
expect trained 'epoch 3/3 loss'
step ddp-fails-rank-0 3 "$cl" run "$work/hosts.yaml" examples/ddp_train.py --fresh \
    --checkpoint "$work/ckpt.pt" --fail-at-epoch 2 --fail-rank 0
expect names-the-rank 'rank 0 on localhost exited with code 3'
if [ "$gpus" = auto ]; then
    step devices-0 0 "$cl" run "$work/dev0.yaml" examples/hello_ranks.py
    expect sees-one-gpu 'WORLD_SIZE=1 .*device=cuda:0'
    step devices-7-refused 2 "$cl" check "$work/dev7.yaml"
fi
step doctor-bandwidth 0 "$cl" doctor --bandwidth "$work/hosts.yaml"
expect all-reduce-measured 'all_reduce|busbw'

# interrupt NAME WHOM: SIGINT in the middle of training, to the controller's whole
# process group as a terminal's Ctrl-C sends it (WHOM=group; set -m gives the
# background job its own group), or to the controller alone (WHOM=controller);
# then nothing of the job may be left, and its GPU memory must be freed.
interrupt() {
    local name=$1 whom=$2 job rc took
    printf '\n===== %s: run --job-id %s ddp_train.py --pace 1, SIGINT to the %s\n' \
        "$name" "$jobid" "$whom" >>"$log"
    set -m
    "$cl" run --job-id "$jobid" "$work/hosts.yaml" examples/ddp_train.py --epochs 500 --pace 1 \
        --fresh --checkpoint "$work/ckpt.pt" >"$work/interrupt.log" 2>&1 &
    job=$!
    set +m
    for _ in $(seq 120); do grep -q 'epoch 2/' "$work/interrupt.log" && break; sleep 0.5; done
    if [ "$whom" = group ]; then
        step ps 0 "$cl" ps "$work/hosts.yaml"
        expect ps-lists-the-job "$jobid"
        step stacks 0 "$cl" stacks "$work/hosts.yaml" "$jobid"
        expect stacks-show-training 'ddp_train.py'
    fi
    # The check below finds the job's processes while they run (so its "none" means none).
    step "  found-by-id" 0 grep -lasq "CLUSTERLAUNCH_JOB_ID=$jobid" /proc/[0-9]*/environ
    start=$EPOCHREALTIME
    if [ "$whom" = group ]; then kill -INT -- "-$job"; else kill -INT "$job"; fi
    wait "$job"
    rc=$?
    took=$(awk "BEGIN { print $EPOCHREALTIME - $start }")
    cat "$work/interrupt.log" >>"$log"
    if [ "$rc" -eq 130 ]; then verdict=ok; else verdict=FAILED; fi
    printf '%-28s %-6s exit %-3s (want 130), %.2f s after SIGINT\n' "$name" "$verdict" "$rc" "$took" \
        | tee -a "$summary"
    # Every process of the job inherits its id: none may be left (zombies have no environment).
    step "  nothing-left" 0 bash -c "! grep -las 'CLUSTERLAUNCH_JOB_ID=$jobid' /proc/[0-9]*/environ"
    # The driver frees a context a moment after its process ends: poll, log each look.
    [ "$gpus" = auto ] && step "  gpu-freed" 0 bash -c 'for i in $(seq 20); do
        apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader)
        echo "look $i at $(date +%T.%N): ${apps:-no compute apps}"
        [ -z "$apps" ] && exit 0; sleep 0.5; done; exit 1'
}
jobid=gpucheck-$$
interrupt ctrl-c group
interrupt sigint-controller controller

if [ "$gpus" = auto ]; then
    # A process holding GPU memory: doctor warns and names it.
    "$PY" -c 'import time, torch; x = torch.ones(1 << 28, device="cuda"); print("holding", flush=True); time.sleep(120)' \
        >"$work/holder.log" 2>&1 &
    holder=$!
    for _ in $(seq 60); do grep -q holding "$work/holder.log" && break; sleep 0.5; done
    step holder-listed 0 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
    step doctor-busy-gpu 0 "$cl" doctor "$work/hosts.yaml"
    expect warns-of-gpu-memory "$holder"
    kill "$holder"
    wait "$holder"
fi
rm -rf "$work"
! grep -q FAILED "$summary"
