#!/usr/bin/env bash
# τ sweep on the Slurm testbed: the same seeded kill clock (trial i's kill times are the
# same at every interval), 2 trials per checkpoint interval.
set -u
cd "$(git rev-parse --show-toplevel)"
eval "$(scripts/slurm-testbed start)"
for every in 20 76 300; do
  echo "== every $every $(date -u +%T)"
  .venv/bin/python benchmarks/goodput_slurm.py --trials 2 --steps 5000 --every-steps $every \
      --mtbf-s 60 --seed 49 --deadline 15:58 --json dev/goodput-sweep-2026-11-29/sweep-$every.json \
      --keep dev/goodput-sweep-2026-11-29/work-$every
done
echo "== done $(date -u +%T)"
