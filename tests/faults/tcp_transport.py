"""Across machines: ranks that talk only over TCP (Open MPI's ob1 + tcp transports, shared
memory and every other transport disabled, the loopback interface standing in for a
network) train 2-rank dp and 4-rank dp2 x pp2 layouts, and their losses and final
parameters equal the same layouts' shared-memory runs bit for bit (same reduction order,
only the wire differs).
usage: tcp_transport.py LOOM DATA WORKDIR"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loom_runs import fail, must_run, same_run, train_args  # noqa: E402

STEPS = 4
# Point-to-point over ob1 + tcp only, no shared-memory collectives, and no shared-memory
# one-sided window (osc/sm): as between nodes, Open MPI 4.1 then has no window for the
# watchdog's table, which must fall back instead of failing at start-up.
TCP_ONLY = ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
            "--mca", "osc", "^sm", "--mca", "coll", "^sm"]
work = sys.argv[3]
for name, ranks, layout in (("dp2", 2, ["--dp", "2"]),
                            ("dp2_pp2", 4, ["--dp", "2", "--pp", "2", "--micro-batches", "2"])):
    shm, tcp = os.path.join(work, name + "_shm"), os.path.join(work, name + "_tcp")
    for d in (shm, tcp):
        shutil.rmtree(d, ignore_errors=True)
    must_run(ranks, train_args(shm, layout, STEPS))
    out = must_run(ranks, train_args(tcp, layout, STEPS), mpi_options=[*TCP_ONLY, "--mca", "btl_base_verbose", "30"])
    # Open MPI names the transport each pair of ranks uses: tcp, never vader (shared memory).
    if "Using tcp btl for send to" not in out or "Using vader btl" in out:
        fail("the ranks did not talk over the TCP transport:\n" + out)
    same_run(tcp, shm, STEPS)
print("TCP transport: PASSED")
