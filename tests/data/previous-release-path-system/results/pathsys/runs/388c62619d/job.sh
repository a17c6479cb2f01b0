#!/usr/bin/env bash
# scalestudy 0.1.0: study pathsys, run 388c62619d (repeat 0)
# 1 node(s) x 1 rank(s)/node = 1 rank(s); per-GPU batch 8, global batch 8; backend ddp, tuning default
# system mylab: local + torchrun
# A "node" here is one torchrun agent with its ranks; the agents meet (c10d rendezvous)
# on 127.0.0.1 at a free port.
# Run by hand with: bash /tmp/prevpath/results/pathsys/runs/388c62619d/job.sh
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/tmp/prevpath/results/pathsys/runs/388c62619d
# torchrun leaves torchelastic_* folders in TMPDIR: keep them in the run, remove at exit.
export TMPDIR=/tmp/prevpath/results/pathsys/runs/388c62619d/tmp
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
cd /tmp/prevpath

# --- environment: 1 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=1

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=mylab
export SCALESTUDY_TAGS=''
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|SLURM_*|SRUN_*|PBS_*|FLUX_*|LSB_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR) ;;
            *) continue ;;
        esac
        value=${!name}
        if [[ ${name^^} =~ $secret ]]; then
            value='<redacted>'
        else
            masked=
            while [[ $value =~ $url ]]; do
                masked+=${value%%"${BASH_REMATCH[0]}"*}${BASH_REMATCH[1]}':***@'
                value=${value#*"${BASH_REMATCH[0]}"}
            done
            value=$masked$value
        fi
        value=${value//$'\n'/ }
        printf '%s=%s\n' "$name" "${value//$'\r'/ }"
    done
}
(umask 027; scalestudy_record_env > /tmp/prevpath/results/pathsys/runs/388c62619d/env.txt)
hostname > /tmp/prevpath/results/pathsys/runs/388c62619d/hosts.txt

# This host, and a free port for the rendezvous (the executor passes one in
# SCALESTUDY_MASTER_PORT).
MASTER_ADDR=127.0.0.1
MASTER_PORT="${SCALESTUDY_MASTER_PORT:-$(/work/main/.venv/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export MASTER_ADDR MASTER_PORT

# scalestudy_agents COUNT COMMAND...: COUNT torchrun agents side by side, the first
# hosting the rendezvous (torchrun reads --rdzv-conf from PET_RDZV_CONF). When one
# fails, stop the others instead of letting them wait for it.
scalestudy_agents() {
    local count=$1 node_rank status=0 rc pids=()
    shift
    for node_rank in $(seq 0 $((count - 1))); do
        PET_RDZV_CONF="is_host=$((node_rank == 0 ? 1 : 0))" "$@" &
        pids+=("$!")
    done
    for _ in "${pids[@]}"; do
        wait -n || {
            rc=$?
            [ "$status" -eq 0 ] && status=$rc
            kill "${pids[@]}" 2>/dev/null || true
        }
    done
    return "$status"
}

# --- launch: torchrun ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
scalestudy_agents 1 /work/main/.venv/bin/python3 -m torch.distributed.run --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint="${MASTER_ADDR}:${MASTER_PORT}" --rdzv-id=388c62619d --max-restarts=0 --monitor-interval=1 -m scalestudy.workload --model small_cnn --image-size 32 --num-classes 1000 --batch-size 8 --precision fp32 --warmup-iters 1 --iters 2 --batches-per-iter 2 --backend ddp --metrics /tmp/prevpath/results/pathsys/runs/388c62619d/metrics.jsonl
rc=$?
set -e
echo "$rc" > /tmp/prevpath/results/pathsys/runs/388c62619d/exit_code
exit "$rc"
