"""`rooflab crosscheck`: rooflab's timing engine held against other timers on the same callables.

Each case is prepared exactly as `rooflab run` prepares it (runners.orchestration.prepare.ready_case), then the
same callable is timed by rooflab's engine and by every available peer, round after round
(A B C A B C ...), in one process. `verdict` turns the per-round figures into medians, spreads,
ratios and marked disagreements; `session` runs it all; the peers live one per module.
"""
