#!/bin/bash
# flux: --job-name=pk-b5c4c3c6af
# flux: --nodes=2
# flux: --exclusive
# flux: --time-limit=1800s
# flux: --output=/scratch/results/pk/runs/b5c4c3c6af/flux.log
# scalestudy 0.1.0: study pk, run b5c4c3c6af (repeat 0)
# 2 node(s) x 4 rank(s)/node = 8 rank(s); per-GPU batch 32, global batch 256; backend ddp, tuning default
# system generic-flux: flux + flux; GPUs: one GPU per rank: flux run --gpus-per-task=1 gives each task its own GPU and the Flux shell's gpu-affinity=per-task sets CUDA_VISIBLE_DEVICES to it (the rank sees cuda:0)
# Submit by hand with: flux batch /scratch/results/pk/runs/b5c4c3c6af/job.sh
# The script is the first program of a Flux instance of its own on the job's nodes;
# `flux run` below launches in that instance.
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/pk/runs/b5c4c3c6af
# The job's output goes next to its record (Flux joins both streams into its --output).
exec > /scratch/results/pk/runs/b5c4c3c6af/stdout.log 2> /scratch/results/pk/runs/b5c4c3c6af/stderr.log
cd /scratch/studies

# --- environment: 1 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=1

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=generic-flux
export SCALESTUDY_TAGS=''
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/pk/runs/b5c4c3c6af/env.txt)
# The job's nodes, one per line, in rank order.
flux hostlist --expand --delimiter='\n' local > /scratch/results/pk/runs/b5c4c3c6af/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where MPI and Flux take theirs. Inside a
# batch job FLUX_JOB_ID is empty: the job's id is the enclosing instance's.
MASTER_ADDR="$(head -n 1 /scratch/results/pk/runs/b5c4c3c6af/hosts.txt)"
job_number="$(flux job id --to=dec "${FLUX_ENCLOSING_ID:-$(flux getattr jobid)}")"
MASTER_PORT=$(( 20000 + job_number % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: flux ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
flux run --nodes=2 --ntasks=8 --cores-per-task=1 --gpus-per-task=1 -o cpu-affinity=per-task -o gpu-affinity=per-task python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/pk/runs/b5c4c3c6af/metrics.jsonl --device cuda
rc=$?
set -e
echo "$rc" > /scratch/results/pk/runs/b5c4c3c6af/exit_code
exit "$rc"
