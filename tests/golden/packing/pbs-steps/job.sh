#!/bin/bash
#PBS -N pk-pack-a1
#PBS -l select=2
#PBS -l place=scatter:excl
#PBS -l walltime=00:24:00
#PBS -A MyProject
#PBS -j oe
#PBS -k doe
#PBS -o /scratch/results/pk/allocations/a1/allocation.log
# scalestudy 0.1.0: study pk, packed allocation a1: 2 run(s)
# as steps on up to 2 node(s); each run's own script is runs/<run-id>/job.sh.
# scalestudy submits it (`run --pack`); the step runner journals each step in
# /scratch/results/pk/allocations/a1/steps.jsonl.
set -euo pipefail
exec >> /scratch/results/pk/allocations/a1/allocation.log 2>&1
cd /scratch/results/pk/allocations/a1
cat "$PBS_NODEFILE" > /scratch/results/pk/allocations/a1/nodefile
exec python3 -m scalestudy.execute.allocation /scratch/results/pk/allocations/a1 "$PBS_JOBID"
