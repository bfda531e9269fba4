"""The orchestration of processes: the supervisor and its worker processes, a run session, shards,
rank groups of collectives and the progress display. A night over a cluster is runners/cluster/."""
