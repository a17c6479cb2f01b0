"""Which of a job's environment variables env.txt records: the ones that shape performance
(an allowlist of prefixes and names), plus those the spec names; a value whose name looks
secret is redacted and a URL's password masked (the shell side: templates/_record_env.sh.j2)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from scalestudy.site import schedulers

#: Prefixes of the variables recorded: communication libraries and fabrics, threading and
#: math libraries, GPU runtimes, launchers' and containers' own, and scalestudy's; each
#: registered scheduler adds its own (`in_job.env_prefixes`) after XLA_. Anything else only when
#: the spec names it (job.record_env).
PREFIXES: tuple[str, ...] = (
    "NCCL_", "TORCH_", "PYTORCH_", "GLOO_", "TP_", "FI_", "UCX_", "CXI_", "NVSHMEM_",
    "MPICH_", "MPIR_", "OMPI_", "PMI_", "PMIX_", "PALS_", "I_MPI_", "MV2_", "HOROVOD_",
    "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "CUDA_", "NVIDIA_", "HIP_", "ROCM_",
    "HSA_", "MIOPEN_", "RCCL_", "ZE_", "CCL_", "ONEAPI_", "SYCL_", "XLA_",
    "APPTAINER_", "SINGULARITY_", "SHIFTER_",
    "PODMAN_", "ENROOT_", "CRAY_", "PE_", "SCALESTUDY_", "MASTER_", "PET_", "DS_",
)
_SCHEDULERS_AT = PREFIXES.index("XLA_") + 1
#: Whole names recorded.
NAMES: tuple[str, ...] = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "HOSTNAME",
    "PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX",
    "LOADEDMODULES", "TMPDIR",
)
#: A name that looks as if it holds a secret (matched on the upper-cased name, as a POSIX
#: extended regex: bash's =~ reads it): its value is never written, allowlisted or not.
SECRET_NAME = (r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE|AUTH|"
               r"SESSION|SIGNATURE|CERT|(^|_)(API_?)?KEYS?($|_)|ACCESS_?KEY")
REDACTED = "<redacted>"
_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def case_pattern(extra: Iterable[str] = ()) -> str:
    """The bash `case` pattern of the names recorded: the allowlist and `extra` (names,
    or prefixes ending in `*`, validated: the pattern is written into the script)."""
    return _case_pattern(tuple(extra), schedulers.env_prefixes())


def prefixes() -> tuple[str, ...]:
    """Every prefix recorded: the list above with the registered schedulers' own."""
    return _prefixes(schedulers.env_prefixes())


def _prefixes(own: tuple[str, ...]) -> tuple[str, ...]:
    return (*PREFIXES[:_SCHEDULERS_AT], *dict.fromkeys(own), *PREFIXES[_SCHEDULERS_AT:])


@lru_cache(maxsize=64)
def _case_pattern(extra: tuple[str, ...], own: tuple[str, ...]) -> str:
    named = list(dict.fromkeys(extra))
    for prefix in own:  # a plugin's words, written into the script too
        if not _PATTERN.match(prefix) or prefix.endswith("*"):
            raise ValueError(f"scheduler env prefix {prefix!r}: not the start of a variable name")
    for name in named:
        if not _PATTERN.match(name):
            raise ValueError(f"{name!r}: not a variable name or a NAME* prefix")
    return "|".join([*(f"{p}*" for p in _prefixes(own)), *NAMES, *named])
