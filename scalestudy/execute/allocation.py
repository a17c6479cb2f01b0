"""The command a packed allocation's job script runs on its first node:
`python -m scalestudy.execute.allocation DIR JOB_ID` starts the engine allocation.json
names (execute.packing.engines). The engines live in execute.packing; this module stays
at this path because the job scripts of allocations already queued (or requeued after an
upgrade) name it."""

from __future__ import annotations

import sys

from scalestudy.execute.packing.engines import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
