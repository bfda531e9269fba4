"""The cluster: a night of runs over many nodes, as Slurm jobs, and its last step.

slurm_job.py (what `rooflab slurm` is asked to write, each argument checked; the command that
starts rooflab on the nodes), sbatch.py (what every kind of job shares: the #SBATCH lines, the
database and run id a job script sets, the submit script that chains the jobs, the writing of the
scripts), slurm.py (the nightly kind: a shard array, the collective step over every node, the
finalising job, and its submit script), links.py (a links night: each node's pairs of GPUs, then
the pairs of nodes; or the bisection's job), bisect.py (`rooflab bisect`: the halving search for a
slow node inside an allocation), nightly.py (`rooflab nightly`: run, judge the history, write the
report, the night's summary and exit code; the finalising job runs it).

A new kind of job (a health night, a link night) is a module here that renders its scripts from
sbatch.py's pieces and a checked SlurmJob, and a command of `rooflab slurm` (runners/cli/cluster_cmd.py).
Nothing else in runners/orchestration imports this package; it starts rooflab's commands (`rooflab run`,
`rooflab collectives`, `rooflab nightly`) in the jobs it writes.
"""
