#!/bin/bash
# flux: --job-name=study-exit3
# flux: -N 1
# flux: -t 10m
# flux: --output=exit3.out
echo failing
exit 3
