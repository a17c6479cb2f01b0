#!/bin/bash
# flux: --job-name=conv-5f69b58c4a
# flux: --nodes=2
# flux: --exclusive
# flux: --time-limit=3600s
# flux: --queue=pbatch
# flux: --bank=MyProject
# flux: --output=/scratch/results/conv/runs/5f69b58c4a/flux.log
# flux: --setattr=rdzv_get_en=0
# scalestudy 0.1.0: study conv, run 5f69b58c4a (repeat 0)
# 2 node(s) x 4 rank(s)/node = 8 rank(s); per-GPU batch 32, global batch 256; backend ddp, tuning default
# system el-capitan: flux + flux; GPUs: one APU per rank: flux run --exclusive with 4 tasks per node lets LLNL's mpibind plugin give each task one NUMA domain (its APU's cores) and that APU's GPU through ROCR_VISIBLE_DEVICES; each rank sees a single device (cuda:0)
# Submit by hand with: flux batch /scratch/results/conv/runs/5f69b58c4a/job.sh
# The script is the first program of a Flux instance of its own on the job's nodes;
# `flux run` below launches in that instance.
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/conv/runs/5f69b58c4a
# The job's output goes next to its record (Flux joins both streams into its --output).
exec > /scratch/results/conv/runs/5f69b58c4a/stdout.log 2> /scratch/results/conv/runs/5f69b58c4a/stderr.log
cd /scratch/studies

# --- site and study setup ---
if [ -z "${ROCM_PATH:-}" ] && [ "${FLUX_JOB_NNODES:-1}" -gt 1 ]; then echo "el-capitan: ROCM_PATH is not set, so RCCL would run over TCP sockets between nodes: load the rocm module that matches your torch build before scalestudy run (flux batch copies the environment), or add it to job.setup" >&2; exit 1; fi
rccl_net_plugin="/collab/usr/global/tools/rccl/${SYS_TYPE:-unset}/$(basename "${ROCM_PATH:-/unset}")/install/lib"
if [ -n "${ROCM_PATH:-}" ] && [ -d "$rccl_net_plugin" ]; then export LD_LIBRARY_PATH="$rccl_net_plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NET_PLUGIN=librccl-net.so; else echo "el-capitan - no aws-ofi-rccl plugin for ROCM_PATH=${ROCM_PATH:-unset}, RCCL will use sockets" >&2; fi
export MIOPEN_USER_DB_PATH="/tmp/miopen-${USER:-user}-$$"
export MIOPEN_CUSTOM_CACHE_DIR="$MIOPEN_USER_DB_PATH"

# --- environment: 21 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=21
export NCCL_NET_GDR_LEVEL=3
export NCCL_MIN_NCHANNELS=24
export NCCL_CROSS_NIC=1
export NCCL_SOCKET_IFNAME=hsi0
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DEFAULT_TX_SIZE=1024
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export FI_CXI_RX_MATCH_MODE=hybrid
export FI_CXI_RDZV_PROTO=alt_read
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_RDZV_EAGER_SIZE=0
export MIOPEN_DEBUG_DISABLE_FIND_DB=0
export MIOPEN_DISABLE_CACHE=0

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=el-capitan
export SCALESTUDY_TAGS=''
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR|NCCL_NET_GDR_LEVEL|NCCL_MIN_NCHANNELS|NCCL_CROSS_NIC|NCCL_SOCKET_IFNAME|FI_MR_CACHE_MONITOR|FI_CXI_DEFAULT_TX_SIZE|FI_CXI_DISABLE_HOST_REGISTER|FI_CXI_DEFAULT_CQ_SIZE|FI_CXI_RX_MATCH_MODE|FI_CXI_RDZV_PROTO|FI_CXI_RDZV_THRESHOLD|FI_CXI_RDZV_GET_MIN|FI_CXI_RDZV_EAGER_SIZE|MIOPEN_DEBUG_DISABLE_FIND_DB|MIOPEN_DISABLE_CACHE) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/conv/runs/5f69b58c4a/env.txt)
# The job's nodes, one per line, in rank order.
flux hostlist --expand --delimiter='\n' local > /scratch/results/conv/runs/5f69b58c4a/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where MPI and Flux take theirs. Inside a
# batch job FLUX_JOB_ID is empty: the job's id is the enclosing instance's.
MASTER_ADDR="$(head -n 1 /scratch/results/conv/runs/5f69b58c4a/hosts.txt)"
job_number="$(flux job id --to=dec "${FLUX_ENCLOSING_ID:-$(flux getattr jobid)}")"
MASTER_PORT=$(( 20000 + job_number % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: flux ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
flux run --nodes=2 --ntasks=8 --cores-per-task=21 --gpus-per-task=1 --exclusive -o mpibind=omp_proc_bind,omp_places python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/conv/runs/5f69b58c4a/metrics.jsonl --device cuda
rc=$?
set -e
echo "$rc" > /scratch/results/conv/runs/5f69b58c4a/exit_code
exit "$rc"
