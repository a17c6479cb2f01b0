#!/bin/bash
# flux: --job-name=study-held
# flux: -N 1
# flux: -t 10m
# flux: --output=held.out
# flux: --urgency=0
hostname
