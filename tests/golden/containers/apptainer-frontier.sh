#!/bin/bash
#SBATCH --job-name=conv-ce969fd70e
#SBATCH -N 2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=7
#SBATCH -t 01:00:00
#SBATCH -A MyProject
#SBATCH -p batch
#SBATCH --output=/scratch/results/conv/runs/ce969fd70e/stdout.log
#SBATCH --error=/scratch/results/conv/runs/ce969fd70e/stderr.log
#SBATCH --network=disable_rdzv_get
# scalestudy 0.1.0: study conv, run ce969fd70e (repeat 0)
# 2 node(s) x 8 rank(s)/node = 16 rank(s); per-GPU batch 32, global batch 512; backend ddp, tuning default
# system frontier: slurm + srun; GPUs: one GCD per rank: srun --gpus-per-task=1 --gpu-bind=closest maps each rank to the GCD attached to the L3 region of its cores; the rank sees a single device (cuda:0)
# Submit by hand with: sbatch /scratch/results/conv/runs/ce969fd70e/job.sh
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/conv/runs/ce969fd70e
cd /scratch/studies

# --- site and study setup ---
set +u
module load PrgEnv-gnu/8.7.0
module load cpe/26.03
module load miniforge3/23.11.0-0
module load rocm/7.1.1
module load rccl-net-plugin
module load craype-accel-amd-gfx90a
set -u
export LD_LIBRARY_PATH="$CRAY_LD_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MIOPEN_USER_DB_PATH="/tmp/miopen-cache-${SLURM_JOB_ID:-$$}"
export MIOPEN_CUSTOM_CACHE_DIR="$MIOPEN_USER_DB_PATH"
rm -rf "$MIOPEN_USER_DB_PATH" && mkdir -p "$MIOPEN_USER_DB_PATH"
set +u
module load cray-mpich-abi
set -u
export APPTAINERENV_LD_LIBRARY_PATH="/opt/cray/lib64:/opt/rocm/lib:/opt/rocm/lib64:$CRAY_LD_LIBRARY_PATH:$LD_LIBRARY_PATH:/opt/cray/pe/lib64"
export APPTAINER_CONTAINLIBS="/usr/lib64/libjansson.so.4,/usr/lib64/libnl-3.so.200,/usr/lib64/libjson-c.so.5,/usr/lib64/libcxi.so.1,/opt/xpmem/lib64/libxpmem.so.0"

# --- environment: 7 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=7
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export HSA_FORCE_FINE_GRAIN_PCIE=1
export FI_MR_CACHE_MONITOR=kdreg2
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export FI_CXI_RDZV_PROTO=alt_read
export FI_CXI_RDZV_EAGER_SIZE=0
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_DEFAULT_TX_SIZE=2048
export FI_CXI_RX_MATCH_MODE=hybrid

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=frontier
export SCALESTUDY_TAGS=''
export SCALESTUDY_LOCAL_STORAGE='/mnt/bb/$USER'  # data_stage: local copies here (variables expanded by the workload)
export USER="${USER:-$(id -un)}"  # container runtimes read it (ch-run refuses to start without)
export SCALESTUDY_CONTAINER=apptainer:/lustre/orion/proj/pytorch.sif SCALESTUDY_CONTAINER_RUNTIME=apptainer
export SCALESTUDY_CONTAINER_IMAGE=/lustre/orion/proj/pytorch.sif
SCALESTUDY_CONTAINER_RUNTIME_VERSION="$(apptainer --version 2>&1 | head -n 1 || true)"
export SCALESTUDY_CONTAINER_RUNTIME_VERSION
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR|NCCL_SOCKET_IFNAME|NCCL_CROSS_NIC|NCCL_NET_GDR_LEVEL|HSA_FORCE_FINE_GRAIN_PCIE|FI_MR_CACHE_MONITOR|FI_CXI_DISABLE_HOST_REGISTER|FI_CXI_DEFAULT_CQ_SIZE|FI_CXI_RDZV_PROTO|FI_CXI_RDZV_EAGER_SIZE|FI_CXI_RDZV_THRESHOLD|FI_CXI_RDZV_GET_MIN|FI_CXI_DEFAULT_TX_SIZE|FI_CXI_RX_MATCH_MODE) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/conv/runs/ce969fd70e/env.txt)
scontrol show hostnames "$SLURM_JOB_NODELIST" > /scratch/results/conv/runs/ce969fd70e/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where srun and MPI take theirs.
MASTER_ADDR="$(head -n 1 /scratch/results/conv/runs/ce969fd70e/hosts.txt)"
MASTER_PORT=$(( 20000 + SLURM_JOB_ID % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: srun (ranks in apptainer containers) ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
srun --nodes=2 --ntasks-per-node=8 --cpus-per-task=7 --cpu-bind=threads --gpus-per-task=1 --gpu-bind=closest apptainer exec --rocm -B /usr/share/libdrm -B /var/spool/slurmd -B /opt/cray -B /scratch/results/conv /lustre/orion/proj/pytorch.sif python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/conv/runs/ce969fd70e/metrics.jsonl --device cuda
rc=$?
set -e
echo "$rc" > /scratch/results/conv/runs/ce969fd70e/exit_code
exit "$rc"
