#!/bin/bash
# flux: --job-name=study-unsatisfiable
# flux: -N 1
# flux: -t 10m
# flux: --output=unsatisfiable.out
# flux: -N 5
hostname
