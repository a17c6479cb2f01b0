#!/bin/bash
# flux: --job-name=study-sigkill
# flux: -N 1
# flux: -t 10m
# flux: --output=sigkill.out
kill -9 $$
