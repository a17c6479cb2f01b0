#!/bin/bash
#PBS -N conv-29c555a57c
#PBS -l select=2:system=polaris
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -l filesystems=home:eagle
#PBS -A MyProject
#PBS -q debug-scaling
#PBS -j oe
#PBS -k doe
#PBS -o /scratch/results/conv/runs/29c555a57c/pbs.log
# scalestudy 0.1.0: study conv, run 29c555a57c (repeat 0)
# 2 node(s) x 4 rank(s)/node = 8 rank(s); per-GPU batch 32, global batch 256; backend ddp, tuning default
# system polaris: pbs + mpiexec; GPUs: one GPU per rank: set_affinity_gpu_polaris.sh exports CUDA_VISIBLE_DEVICES=(3 - PMI_LOCAL_RANK % 4), the GPU on the rank's NUMA domain; each rank then sees a single device (cuda:0)
# Submit by hand with: qsub /scratch/results/conv/runs/29c555a57c/job.sh
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/conv/runs/29c555a57c
# The job's output goes next to its record, whatever -o the submitter used.
exec > /scratch/results/conv/runs/29c555a57c/stdout.log 2> /scratch/results/conv/runs/29c555a57c/stderr.log
cd /scratch/studies

# --- site and study setup ---
set +u
module use /soft/modulefiles
module load conda
conda activate
set -u
export LD_LIBRARY_PATH="/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib/${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- environment: 8 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=8
export NCCL_NET_GDR_LEVEL=PHB
export NCCL_CROSS_NIC=1
export NCCL_COLLNET_ENABLE=1
export NCCL_NET='AWS Libfabric'
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DEFAULT_CQ_SIZE=131072

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=polaris
export SCALESTUDY_TAGS=''
export SCALESTUDY_LOCAL_STORAGE=/local/scratch  # data_stage: local copies here (variables expanded by the workload)
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
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR|NCCL_NET_GDR_LEVEL|NCCL_CROSS_NIC|NCCL_COLLNET_ENABLE|NCCL_NET|FI_CXI_DISABLE_HOST_REGISTER|FI_MR_CACHE_MONITOR|FI_CXI_DEFAULT_CQ_SIZE) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/conv/runs/29c555a57c/env.txt)
# PBS_NODEFILE lists each node once per MPI rank slot; keep each host once, in order.
awk '!seen[$0]++' "$PBS_NODEFILE" > /scratch/results/conv/runs/29c555a57c/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where srun and MPI take theirs.
MASTER_ADDR="$(head -n 1 /scratch/results/conv/runs/29c555a57c/hosts.txt)"
job_number="${PBS_JOBID%%.*}"
MASTER_PORT=$(( 20000 + ${job_number//[^0-9]/} % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: mpiexec ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
mpiexec --np 8 --ppn 4 --depth 8 --cpu-bind depth --hostfile "$PBS_NODEFILE" --envall set_affinity_gpu_polaris.sh python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/conv/runs/29c555a57c/metrics.jsonl --device cuda
rc=$?
set -e
echo "$rc" > /scratch/results/conv/runs/29c555a57c/exit_code
exit "$rc"
