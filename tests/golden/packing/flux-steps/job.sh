#!/bin/bash
# flux: --job-name=pk-pack-a1
# flux: --nodes=2
# flux: --exclusive
# flux: --time-limit=1440s
# flux: --bank=MyProject
# flux: --output=/scratch/results/pk/allocations/a1/allocation.log
# scalestudy 0.1.0: study pk, packed allocation a1: 2 run(s)
# as steps on up to 2 node(s); each run's own script is runs/<run-id>/job.sh.
# scalestudy submits it (`run --pack`); the step runner journals each step in
# /scratch/results/pk/allocations/a1/steps.jsonl.
set -euo pipefail
exec >> /scratch/results/pk/allocations/a1/allocation.log 2>&1
cd /scratch/results/pk/allocations/a1
flux hostlist --expand --delimiter='\n' local > /scratch/results/pk/allocations/a1/nodefile
# The steps are Flux jobs of this job's own Flux instance;
# the engine submits them and journals what Flux says of them.
exec python3 -m scalestudy.execute.allocation /scratch/results/pk/allocations/a1 "$FLUX_ENCLOSING_ID"
