#!/bin/bash
# flux: --job-name=study-dependent
# flux: -N 1
# flux: -t 10m
# flux: --output=dependent.out
# flux: --dependency=afterok:f6E16DYb
hostname
