"""scalestudy-lsf: IBM Spectrum LSF (with CSM's `bsub -nnodes`) and jsrun, as a plugin.

Installed with pip, it names its scheduler (`lsf`, scalestudy_lsf.scheduler) and its
starter (`jsrun`, scalestudy_lsf.jsrun) in the entry-point groups scalestudy loads them
from; a profile then says `scheduler: lsf` and `launcher: jsrun`. Nothing in scalestudy
is edited for it.
"""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.1.0"
