"""site/ports.py: one rendezvous-port rule for job scripts and packed steps."""

from __future__ import annotations

import subprocess
from pathlib import Path

from scalestudy.site import ports

GOLDEN = Path(__file__).parent / "golden"


def test_job_number_reads_the_digits_of_the_first_part() -> None:
    assert ports.job_number("123456") == 123456
    assert ports.job_number("4711.pbs-server") == 4711
    assert ports.job_number("f2bT8nq") == 28
    assert ports.job_number("") == 0


def test_step_ports_are_distinct_below_the_ephemeral_range() -> None:
    got = [ports.step_port("1234567", n) for n in range(ports.STEP_BLOCK)]
    assert len(set(got)) == ports.STEP_BLOCK
    assert all(ports.BASE <= p < ports.BASE + ports.SPAN < 32768 for p in got)
    # another allocation whose number differs in the last digit takes another block
    other = {ports.step_port("1234568", n) for n in range(ports.STEP_BLOCK)}
    assert not other & set(got)


def _port_line(script: str) -> list[str]:
    lines = (GOLDEN / script).read_text().splitlines()
    return [line for line in lines if line.startswith(("job_number=", "MASTER_PORT="))]


def test_the_slurm_and_pbs_scripts_compute_the_same_rule_in_shell() -> None:
    for script, env, number in (("generic-slurm.sh", {"SLURM_JOB_ID": "987654"}, 987654),
                                ("generic-pbs.sh", {"PBS_JOBID": "31337.head"}, 31337)):
        snippet = "\n".join([*_port_line(script), 'echo "$MASTER_PORT"'])
        out = subprocess.run(["bash", "-c", snippet], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert int(out) == ports.BASE + number % ports.SPAN, script
