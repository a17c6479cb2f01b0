#!/bin/bash
#BSUB -J conv-fa317bc2a1
#BSUB -nnodes 2
#BSUB -W 1:00
#BSUB -P MyProject
#BSUB -q pbatch
#BSUB -oo /scratch/results/conv/runs/fa317bc2a1/lsf.log
# scalestudy 0.1.0: study conv, run fa317bc2a1 (repeat 0)
# 2 node(s) x 4 rank(s)/node = 8 rank(s); per-GPU batch 32, global batch 256; backend ddp, tuning default
# system lassen: lsf + jsrun; GPUs: jsrun gives each rank's resource set its GPU (CUDA_VISIBLE_DEVICES)
# Submit by hand with: bsub < /scratch/results/conv/runs/fa317bc2a1/job.sh
# (bsub reads #BSUB lines from its standard input; from a file it is given by name only
# where lsf.conf sets LSB_BSUB_PARSE_SCRIPT=Y: scalestudy passes them as options.)
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/conv/runs/fa317bc2a1
# The job's output goes next to its record; LSF's report of the job goes to its -oo file.
exec > /scratch/results/conv/runs/fa317bc2a1/stdout.log 2> /scratch/results/conv/runs/fa317bc2a1/stderr.log
cd /scratch/studies

# --- environment: 10 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=10

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=lassen
export SCALESTUDY_TAGS=''
# env.txt: the variables that shape performance and those the spec names (job.record_env),
# sorted, one a line; a secret-looking name's value redacted, a URL's password masked.
scalestudy_record_env() {
    local name value masked
    local secret='TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY'
    local url='([A-Za-z][A-Za-z0-9+.-]*://[^:/@[:space:]]*):[^@/[:space:]]*@'
    for name in $(compgen -e | LC_ALL=C sort); do
        case $name in
            NCCL_*|TORCH_*|PYTORCH_*|GLOO_*|TP_*|FI_*|UCX_*|CXI_*|NVSHMEM_*|MPICH_*|MPIR_*|OMPI_*|PMI_*|PMIX_*|PALS_*|I_MPI_*|MV2_*|HOROVOD_*|OMP_*|KMP_*|GOMP_*|MKL_*|OPENBLAS_*|CUDA_*|NVIDIA_*|HIP_*|ROCM_*|HSA_*|MIOPEN_*|RCCL_*|ZE_*|CCL_*|ONEAPI_*|SYCL_*|XLA_*|FLUX_*|LSB_*|PBS_*|SLURM_*|SRUN_*|APPTAINER_*|SINGULARITY_*|SHIFTER_*|PODMAN_*|ENROOT_*|CRAY_*|PE_*|SCALESTUDY_*|MASTER_*|PET_*|DS_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|HOSTNAME|PATH|LD_LIBRARY_PATH|LD_PRELOAD|PYTHONPATH|VIRTUAL_ENV|CONDA_PREFIX|LOADEDMODULES|TMPDIR) ;;
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
(umask 027; scalestudy_record_env > /scratch/results/conv/runs/fa317bc2a1/env.txt)
# The job's compute nodes, each once, in LSF's order: this script runs on the launch
# node, the first host LSF lists (LSB_DJOB_HOSTFILE, one line per slot; else
# LSB_MCPU_HOSTS, "host slots ..."), where no rank runs.
if [ -r "${LSB_DJOB_HOSTFILE:-}" ]; then
    cat "$LSB_DJOB_HOSTFILE"
else
    awk '{for (i = 1; i < NF; i += 2) for (j = 0; j < $(i + 1); j++) print $i}' \
        <<< "${LSB_MCPU_HOSTS:-}"
fi | awk 'NR == 1 {launch = $0; next} $0 != launch && !seen[$0]++' \
    > /scratch/results/conv/runs/fa317bc2a1/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where jsrun and MPI take theirs.
MASTER_ADDR="$(head -n 1 /scratch/results/conv/runs/fa317bc2a1/hosts.txt)"
MASTER_PORT=$(( 20000 + LSB_JOBID % 10000 ))
export MASTER_ADDR MASTER_PORT

# --- launch: jsrun ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
jsrun -n 8 -r 4 -a 1 -c 10 -g 1 -b packed:10 --smpiargs=-disable_gpu_hooks python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/conv/runs/fa317bc2a1/metrics.jsonl --device cuda
rc=$?
set -e
echo "$rc" > /scratch/results/conv/runs/fa317bc2a1/exit_code
exit "$rc"
