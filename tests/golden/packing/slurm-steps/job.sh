#!/bin/bash
#SBATCH --job-name=pk-pack-a1
#SBATCH -N 2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH -t 00:24:00
#SBATCH -A MyProject
#SBATCH --output=/scratch/results/pk/allocations/a1/allocation.log
#SBATCH --error=/scratch/results/pk/allocations/a1/allocation.log
# scalestudy 0.1.0: study pk, packed allocation a1: 2 run(s)
# as steps on up to 2 node(s); each run's own script is runs/<run-id>/job.sh.
# scalestudy submits it (`run --pack`); the step runner journals each step in
# /scratch/results/pk/allocations/a1/steps.jsonl.
set -euo pipefail
exec >> /scratch/results/pk/allocations/a1/allocation.log 2>&1
cd /scratch/results/pk/allocations/a1
scontrol show hostnames "$SLURM_JOB_NODELIST" > /scratch/results/pk/allocations/a1/nodefile
exec python3 -m scalestudy.execute.allocation /scratch/results/pk/allocations/a1 "$SLURM_JOB_ID"
