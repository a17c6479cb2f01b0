#!/bin/bash
# scalestudy 0.1.0: study pk, run b5cd28d04d (repeat 0)
# 2 node(s) x 4 rank(s)/node = 8 rank(s); per-GPU batch 32, global batch 256; backend ddp, tuning default
# system generic-pbs: pbs + mpiexec; GPUs: all GPUs of the node visible to every rank; rank uses cuda:<local rank> from the MPI's environment (PMI_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, ...)
# A step of a packed allocation (run --pack): scalestudy's step runner starts it inside
# the allocation on its own nodes, $SCALESTUDY_STEP_HOSTS (their host file:
# $SCALESTUDY_STEP_HOSTFILE), with a rendezvous port of its own, $SCALESTUDY_STEP_PORT.
set -euo pipefail
# The setup lines and the program run in the spec's directory, where relative paths
# resolve as written; the run's own files go to its directory, $SCALESTUDY_RUN_DIR.
export SCALESTUDY_RUN_DIR=/scratch/results/pk/runs/b5cd28d04d
# The job's output goes next to its record, whatever -o the submitter used.
exec > /scratch/results/pk/runs/b5cd28d04d/stdout.log 2> /scratch/results/pk/runs/b5cd28d04d/stderr.log
cd /scratch/studies

# --- environment: 1 thread(s) per rank, tuning variant default ---
export OMP_NUM_THREADS=1

# --- provenance: the job's environment, next to the log (the results store reads it) ---
export SCALESTUDY_VERSION=0.1.0 SCALESTUDY_SYSTEM=generic-pbs
export SCALESTUDY_TAGS=''
SCALESTUDY_MPI_VERSION="$(mpiexec --version 2>/dev/null | grep -m 1 -E '[0-9]+[.][0-9]+' || true)"
export SCALESTUDY_MPI_VERSION
# Every step's mpirun starts on the allocation's first node, in one $TMPDIR, where Open MPI
# creates its session directory and removes it when empty: a step starting while another
# ends can fail ("mkdir failed ... File exists"). Each step has a base of its own, which
# mpirun hands to its daemons on the other nodes.
export OMPI_MCA_orte_tmpdir_base="${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}/ss-b5cd28d04d"
export PRTE_MCA_prte_tmpdir_base="$OMPI_MCA_orte_tmpdir_base"
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
(umask 027; scalestudy_record_env > /scratch/results/pk/runs/b5cd28d04d/env.txt)
# PBS_NODEFILE lists each node once per MPI rank slot; keep each host once, in order.
awk '!seen[$0]++' "$SCALESTUDY_STEP_HOSTFILE" > /scratch/results/pk/runs/b5cd28d04d/hosts.txt

# Rank 0's node, and a port from the job id (jobs may share nodes) below the
# kernel's ephemeral range (32768 and up), where srun and MPI take theirs.
MASTER_ADDR="$(head -n 1 /scratch/results/pk/runs/b5cd28d04d/hosts.txt)"
MASTER_PORT="$SCALESTUDY_STEP_PORT"
export MASTER_ADDR MASTER_PORT

# --- launch: mpiexec ---
SCALESTUDY_LAUNCHED_AT="$(date +%s.%N)"  # the record's start-up time counts from here
export SCALESTUDY_LAUNCHED_AT
set +e
mpiexec --np 8 --ppn 4 --hostfile "$SCALESTUDY_STEP_HOSTFILE" --envall python3 -m scalestudy.workload --model resnet50 --image-size 224 --num-classes 1000 --batch-size 32 --precision fp32 --warmup-iters 2 --iters 10 --batches-per-iter 5 --backend ddp --metrics /scratch/results/pk/runs/b5cd28d04d/metrics.jsonl --device cuda
rc=$?
set -e
rm -rf "$OMPI_MCA_orte_tmpdir_base"  # this step's own Open MPI session base
echo "$rc" > /scratch/results/pk/runs/b5cd28d04d/exit_code
exit "$rc"
