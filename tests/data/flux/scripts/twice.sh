#!/bin/bash
# flux: --job-name=study-c000000042
# flux: -N 1
# flux: --output=twice.out
exit 0
