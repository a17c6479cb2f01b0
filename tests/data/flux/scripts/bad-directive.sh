#!/bin/bash
# flux: -N 1
# flux: --no-such-option
exit 0
