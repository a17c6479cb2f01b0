#!/bin/bash
# flux: --job-name=study-running
# flux: -N 1
# flux: -t 10m
# flux: --output=running.out
# flux: -N 4
# flux: --exclusive
sleep 300
