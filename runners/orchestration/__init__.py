"""The orchestration of processes: the supervisor and its worker processes, a run session, shards,
the nightly job, the Slurm script and the progress display."""
