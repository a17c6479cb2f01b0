"""A ReFrame site configuration for the samples of `history import --format reframe`:
system `testbed`, partition `cpu` (local scheduler) and partition `slurm` (sbatch + srun,
for the localhost testbed of scripts/slurm-testbed), environment `builtin`.

The performance log is ReFrame's default one (one line per test case, a header line);
with SCALESTUDY_RFM_PERFLOG=multiline it is one line per performance variable in the
pre-4.0 layout (`perflog_multiline`), with its own header."""

import os

_MULTILINE = os.environ.get('SCALESTUDY_RFM_PERFLOG') == 'multiline'

site_configuration = {
    'systems': [
        {
            'name': 'testbed',
            'descr': 'scalestudy test machine',
            'hostnames': ['.*'],
            'modules_system': 'nomod',
            'partitions': [
                {
                    'name': 'cpu',
                    'descr': 'this machine, no scheduler',
                    'scheduler': 'local',
                    'launcher': 'local',
                    'environs': ['builtin'],
                    'max_jobs': 1,
                },
                {
                    'name': 'slurm',
                    'descr': 'the localhost Slurm testbed (scripts/slurm-testbed)',
                    'scheduler': 'slurm',
                    'launcher': 'srun',
                    'access': ['--partition=debug'],
                    'environs': ['builtin'],
                    'max_jobs': 2,
                },
            ],
        },
    ],
    'environments': [
        {'name': 'builtin', 'cc': 'cc', 'cxx': '', 'ftn': ''},
    ],
}

if _MULTILINE:
    site_configuration['logging'] = [{
        'perflog_multiline': True,
        'handlers_perflog': [{
            'type': 'filelog',
            'prefix': '%(check_system)s/%(check_partition)s',
            'level': 'info',
            'format': ('%(check_job_completion_time)s|reframe %(version)s|'
                       '%(check_info)s|jobid=%(check_jobid)s|'
                       'num_tasks=%(check_num_tasks)s|'
                       '%(check_perf_var)s=%(check_perf_value)s|'
                       'ref=%(check_perf_ref)s '
                       '(l=%(check_perf_lower_thres)s, u=%(check_perf_upper_thres)s)|'
                       '%(check_perf_unit)s|%(check_result)s'),
            'datefmt': '%FT%T%:z',
            'append': True,
        }],
    }]
