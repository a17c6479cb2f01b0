#!/bin/bash
# flux: --job-name=study-pending
# flux: -N 1
# flux: -t 10m
# flux: --output=pending.out
# flux: -N 2
hostname
