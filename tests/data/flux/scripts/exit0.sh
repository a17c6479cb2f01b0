#!/bin/bash
# flux: --job-name=study-exit0
# flux: -N 1
# flux: -t 10m
# flux: --output=exit0.out
echo hello
exit 0
