"""A fake nccl-tests binary for the nccl_tests peer's tests: `python fake_nccl_tests.py NAME ARGS...`
(tests install it as NAME on PATH) prints a table in nccl-tests' own layout, one row of the size
asked (-b), with the times planted in $FAKE_NCCL_OUT_US and $FAKE_NCCL_IN_US and the bandwidths
worked out from them as nccl-tests does; it writes its arguments and CUDA_VISIBLE_DEVICES as JSON to
$FAKE_NCCL_ARGS. $FAKE_NCCL_FAULT plants a fault: `exit` (an error on stderr, exit 1) or `size` (the
row printed is of twice the size asked)."""
from __future__ import annotations

import json
import os
import sys

FACTORS = {"all_reduce_perf": lambda n: 2 * (n - 1) / n, "all_gather_perf": lambda n: (n - 1) / n,
           "reduce_scatter_perf": lambda n: (n - 1) / n, "alltoall_perf": lambda n: (n - 1) / n,
           "broadcast_perf": lambda n: 1.0, "sendrecv_perf": lambda n: 1.0}
SIZES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1, "int32": 4}


def main(name: str, argv: list[str]) -> int:
    args = dict(zip(argv[0::2], argv[1::2], strict=True))
    with open(os.environ["FAKE_NCCL_ARGS"], "w", encoding="utf-8") as f:
        json.dump({"name": name, "argv": argv, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}, f)
    if os.environ.get("FAKE_NCCL_FAULT") == "exit":
        print("fake: NCCL failure common.cu:1008 'unhandled cuda error'", file=sys.stderr)
        return 1
    ranks, dtype = int(args["-g"]), args["-d"]
    size = int(args["-b"]) * (2 if os.environ.get("FAKE_NCCL_FAULT") == "size" else 1)
    count = size // SIZES[dtype] // (ranks if name in ("all_gather_perf", "reduce_scatter_perf", "alltoall_perf")
                                     else 1)
    print("# nccl-tests version 2.13.9 nccl-headers=22102 nccl-library=22102")
    print(f"# nThread 1 nGpus {ranks} minBytes {size} maxBytes {size} step: 1048576(bytes) warmup iters: "
          f"{args['-w']} iters: {args['-n']} agg iters: 1 validation: {args['-c']} graph: 0")
    print("#\n# Using devices")
    for rank in range(ranks):
        print(f"#  Rank {rank:2d} Group  0 Pid   4242 on       host device {rank:2d} [0000:{rank:02x}:00] NVIDIA H100")
    print("#\n#                                                              out-of-place                       "
          "in-place          ")
    print("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw "
          "  busbw #wrong")
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s) "
          " (GB/s)       ")
    halves, busbws = [], []
    for env in ("FAKE_NCCL_OUT_US", "FAKE_NCCL_IN_US"):
        time_us = float(os.environ[env])
        algbw = size / time_us / 1e3
        busbws.append(algbw * FACTORS[name](ranks))
        halves.append(f"{time_us:8.2f} {algbw:7.2f} {busbws[-1]:7.2f}    N/A")
    redop = args.get("-o", "none")
    print(f"{size:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {-1:6d}  {halves[0]}  {halves[1]}")
    print("# Out of bounds values : 0 OK")
    print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):g} ")
    print("#")
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.basename(sys.argv[1]), sys.argv[2:]))
