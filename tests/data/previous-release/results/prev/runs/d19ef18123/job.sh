#!/usr/bin/env bash
# scalestudy 0.1.0: study prev, run d19ef18123 (repeat 0)
# 1 node(s) x 1 rank(s)/node = 1 rank(s);
# per-GPU batch 8, global batch 8; backend ddp, tuning default
# system local: local + torchrun
# A "node" here is one torchrun agent with its ranks; the agents meet (c10d rendezvous)
# on 127.0.0.1 at a free port.
# Run by hand with: bash /tmp/prev/results/prev/runs/d19ef18123/job.sh
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/tmp/prev/results/prev/runs/d19ef18123
# torchrun leaves torchelastic_* folders in TMPDIR: keep them in the run, remove at exit.
export TMPDIR=/tmp/prev/results/prev/runs/d19ef18123/tmp
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
cd /tmp/prev

# --- environment: 1 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=1

# --- provenance: the job's environment, next to the log ---
env | LC_ALL=C sort > /tmp/prev/results/prev/runs/d19ef18123/env.txt
hostname > /tmp/prev/results/prev/runs/d19ef18123/hosts.txt

# A free port for the rendezvous (the executor passes one in SCALESTUDY_MASTER_PORT).
port="${SCALESTUDY_MASTER_PORT:-$(/work/main/.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"

pids=()
for node_rank in $(seq 0 0); do
    is_host=0
    [ "$node_rank" -eq 0 ] && is_host=1
    /work/main/.venv/bin/python -m torch.distributed.run \
        --nnodes=1 --nproc-per-node=1 \
        --rdzv-backend=c10d --rdzv-endpoint="127.0.0.1:${port}" \
        --rdzv-id=d19ef18123 --rdzv-conf="is_host=${is_host}" \
        --max-restarts=0 --monitor-interval=1 \
        -m scalestudy.workload --model small_cnn --image-size 32 --num-classes 1000 --batch-size 8 --precision fp32 --warmup-iters 1 --iters 3 --batches-per-iter 2 --backend ddp --metrics /tmp/prev/results/prev/runs/d19ef18123/metrics.jsonl &
    pids+=("$!")
done

# Wait for every agent; when one fails, stop the others instead of letting them hang.
status=0
for _ in "${pids[@]}"; do
    wait -n || {
        rc=$?
        [ "$status" -eq 0 ] && status=$rc
        kill "${pids[@]}" 2>/dev/null || true
    }
done
exit "$status"
