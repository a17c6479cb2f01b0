"""ReFrame checks that make the `history import --format reframe` samples: a memory-copy
rate and its time (run-only, python3 alone), one reference met, one not, and one test
that fails before it measures. Run them with tests/data/reframe/settings.py."""

# ReFrame's test variables are class attributes by design (its DSL copies them per test).
# ruff: noqa: RUF012

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import parameter, performance_function, run_after, sanity_function

# Each rank copies SIZE MB ten times and prints its rate and time.
COPY = ("import sys, time; n = int(sys.argv[1]) * 2**20; a = bytearray(n); "
        "t = time.perf_counter(); [bytes(a) for _ in range(10)]; "
        "dt = time.perf_counter() - t; "
        "print(f'copy: {10 * n / 2**20 / dt:.1f} MB/s in {dt:.4f} s')")


class _CopyBase(rfm.RunOnlyRegressionTest):
    valid_systems = ['testbed:cpu', 'testbed:slurm']
    valid_prog_environs = ['builtin']
    executable = 'python3'
    time_limit = '2m'
    tags = {'scalestudy'}

    @run_after('setup')
    def set_tasks(self):
        # the Slurm partition spreads one rank on each of two nodes
        if self.current_partition.name == 'slurm':
            self.num_tasks = 2
            self.num_tasks_per_node = 1
        else:
            self.num_tasks = 1

    @sanity_function
    def validate(self):
        return sn.assert_eq(sn.count(sn.findall(r'^copy: ', self.stdout)), self.num_tasks)

    @performance_function('MB/s')
    def copy_bw(self):
        # all ranks together: the sum of their rates
        return sn.sum(sn.extractall(r'copy: (\S+) MB/s', self.stdout, 1, float))

    @performance_function('s')
    def elapsed(self):
        return sn.max(sn.extractall(r'in (\S+) s', self.stdout, 1, float))


@rfm.simple_test
class ScalestudyCopyCheck(_CopyBase):
    size_mb = parameter([8, 32])
    reference = {
        '*': {'copy_bw': (100.0, -0.9, None, 'MB/s'), 'elapsed': (1.0, None, 9.0, 's')}
    }

    @run_after('init')
    def set_args(self):
        self.executable_opts = ['-c', f'"{COPY}"', str(self.size_mb)]


@rfm.simple_test
class ScalestudyUnreachableCheck(_CopyBase):
    """Measures, then misses its reference: a performance failure, still a measurement."""

    reference = {'*': {'copy_bw': (1.0e9, -0.1, None, 'MB/s')}}
    executable_opts = ['-c', f'"{COPY}"', '8']


@rfm.simple_test
class ScalestudyBrokenCheck(_CopyBase):
    """Fails its sanity check before anything is measured (an error, not a result)."""

    reference = {'*': {'copy_bw': (100.0, -0.9, None, 'MB/s')}}
    executable_opts = ['-c', '"import sys; sys.exit(\'no copy today\')"']
