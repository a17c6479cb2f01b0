#!/bin/bash
# flux: --job-name=study-cancel-mixed
# flux: -N 1
# flux: -t 10m
# flux: --output=cancel-mixed.out
sleep 300
