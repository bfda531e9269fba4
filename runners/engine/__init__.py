"""The timing engine: one method, two clocks (CUDA events on a GPU, perf_counter on a CPU), the
cache flush, the stream hold, the stopping rule and the statistics of a sample, and the profile
of a block split into its parts."""
