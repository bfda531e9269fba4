"""`rooflab counters`: every case's byte and FLOP model held against the hardware's counters.

Each case is prepared exactly as `rooflab run` prepares it, in a child process launched under
Nsight Compute (`ncu`), which counts what one timed call moved and computed (the kernels inside an
NVTX range around it). `metrics` names what is asked of ncu and what each metric becomes,
`ncu_csv` reads ncu's CSV (a pure function on text), `ncu` builds and runs the command line,
`child` is the profiled process, `session` runs it all and stores the readings (db.counters).
docs/counters.md says what each counter can and cannot count.
"""
