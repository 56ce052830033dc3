// The scheduling priority of Loom's communication threads. Such a thread does little work,
// but its peers wait for that work: a peer's all-gather cannot finish until this rank's thread
// has copied its part. Where threads share cores with compute (more ranks than cores, or a
// rank's compute threads on every core), the OS runs a woken communication thread only at its
// turn, and the overlap waits for it: with 4 and 8 ranks on 2 cores the 3D grids hid 23-51% of
// their communication at nice 0 and 47-86% at nice -20, in about the same step time. So each
// communication thread lowers its nice value when it starts (LOOM_COMM_NICE, default -20).
// Lowering nice needs CAP_SYS_NICE (root, or a raised RLIMIT_NICE); without it the threads stay
// at the default, and comm_priority_report() says so. Under LOOM_COMM_WAIT=spin they stay at the
// default too: a thread spinning at high priority would take its core from compute.
#pragma once

#include <string>

namespace loom::comm {

// LOOM_COMM_NICE: an integer from -20 to 19, the nice value communication threads ask for
// (0: leave them at the default). loom::Error naming the variable otherwise. Default -20.
int comm_nice_from_environment();
int comm_nice();  // read once per process

// Run by each communication thread as it starts: gives the calling thread `nice` (comm_nice()).
void prioritize_this_communication_thread(int nice);

// For the log, once a communication thread has started: "communication threads at nice -20",
// or that they were left at the default and why; "" when none has started.
std::string comm_priority_report();

}  // namespace loom::comm
