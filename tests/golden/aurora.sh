#!/bin/bash
#PBS -N conv-27d61dd887
#PBS -l select=2
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -l filesystems=home:flare
#PBS -A MyProject
#PBS -q prod
#PBS -j oe
#PBS -k doe
#PBS -o /scratch/results/conv/runs/27d61dd887/pbs.log
# scalestudy 0.1.0: study conv, run 27d61dd887 (repeat 0)
# 2 node(s) x 12 rank(s)/node = 24 rank(s); per-GPU batch 32, global batch 768; backend ddp, tuning default
# system aurora: pbs + mpiexec; GPUs: one tile per rank, chosen by the program: each rank sets xpu:PALS_LOCAL_RANKID among the 12 tile devices the frameworks module exposes (ZE_FLAT_DEVICE_HIERARCHY=FLAT); no per-rank ZE_AFFINITY_MASK wrapper
# Submit by hand with: qsub /scratch/results/conv/runs/27d61dd887/job.sh
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/conv/runs/27d61dd887
# The job's output goes next to its record, whatever -o the submitter used.
exec > /scratch/results/conv/runs/27d61dd887/stdout.log 2> /scratch/results/conv/runs/27d61dd887/stderr.log
cd /scratch/studies

# --- site and study setup ---
set +u
module load frameworks
set -u
export MPI_PROVIDER="${FI_PROVIDER:-}"
unset MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE

# --- environment: 8 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=8
export ZE_FLAT_DEVICE_HIERARCHY=FLAT
export CCL_PROCESS_LAUNCHER=pmix
export CCL_ATL_TRANSPORT=mpi
export CCL_ALLREDUCE_SCALEOUT='direct:0-1048576;rabenseifner:1048577-max'
export CCL_BCAST=double_tree
export CCL_KVS_MODE=mpi
export CCL_CONFIGURATION_PATH=''
export CCL_CONFIGURATION=cpu_gpu_dpcpp
export CCL_KVS_CONNECTION_TIMEOUT=600
export CCL_ZE_CACHE_OPEN_IPC_HANDLES_THRESHOLD=1024
export CCL_KVS_USE_MPI_RANKS=1

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=aurora
export SCALESTUDY_TAGS=''
SCALESTUDY_MPI_VERSION="$(mpiexec --version 2>/dev/null | grep -m 1 -E '[0-9]+[.][0-9]+' || true)"
export SCALESTUDY_MPI_VERSION
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR|ZE_FLAT_DEVICE_HIERARCHY|CCL_PROCESS_LAUNCHER|CCL_ATL_TRANSPORT|CCL_ALLREDUCE_SCALEOUT|CCL_BCAST|CCL_KVS_MODE|CCL_CONFIGURATION_PATH|CCL_CONFIGURATION|CCL_KVS_CONNECTION_TIMEOUT|CCL_ZE_CACHE_OPEN_IPC_HANDLES_THRESHOLD|CCL_KVS_USE_MPI_RANKS) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/conv/runs/27d61dd887/env.txt)
# PBS_NODEFILE lists each node once per MPI rank slot; keep each host once, in order.
awk '!seen[$0]++' "$PBS_NODEFILE" > /scratch/results/conv/runs/27d61dd887/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where srun and MPI take theirs.
MASTER_ADDR="$(head -n 1 /scratch/results/conv/runs/27d61dd887/hosts.txt)"
job_number="${PBS_JOBID%%.*}"
MASTER_PORT=$(( 20000 + ${job_number//[^0-9]/} % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: mpiexec ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
mpiexec --np 24 --ppn 12 --cpu-bind list:1-8:9-16:17-24:25-32:33-40:41-48:53-60:61-68:69-76:77-84:85-92:93-100 --hostfile "$PBS_NODEFILE" --envall python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/conv/runs/27d61dd887/metrics.jsonl --device xpu
rc=$?
set -e
echo "$rc" > /scratch/results/conv/runs/27d61dd887/exit_code
exit "$rc"
