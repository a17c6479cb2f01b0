#!/bin/bash
# flux: --job-name=study-command-not-found
# flux: -N 1
# flux: -t 10m
# flux: --output=command-not-found.out
no-such-command-xyz
