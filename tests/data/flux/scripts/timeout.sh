#!/bin/bash
# flux: --job-name=study-timeout
# flux: -N 1
# flux: -t 10m
# flux: --output=timeout.out
# flux: -t 5s
sleep 60
