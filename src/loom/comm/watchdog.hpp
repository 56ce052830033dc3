// The watchdog: every rank publishes, in one MPI window over the world, the number and name
// of the collective it most recently started on each of its process groups, what it has
// been waiting for longer than half a second (a collective, or a transfer with a peer), and
// a heartbeat that a thread of its own advances five times a second. When a wait (a
// collective or a point-to-point transfer) has lasted longer than its group's timeout, the
// waiting rank reads every rank's entries and reports the wait, the ranks that never arrived
// (for a transfer: the peer) and, following who waits for whom, the rank that holds the job
// up: one whose heartbeat stopped (a stopped or frozen process), one that waits for nothing
// (a rank that skipped the call, or hangs outside communication), or a cycle of waits; then
// it aborts the whole job: a failure everywhere, never a hang, and never a bystander named.
// One window for the process (made by MpiRuntime) because Open MPI 4.1 cannot create
// windows on many split communicators of one job at once. Where the transport offers no
// window (Open MPI 4.1 over TCP between nodes) the table stays local and the report names
// only what this rank knows (a transfer's peer).
// The call check: before a collective the group's ranks compare what they are about to call
// (operation and size) and stop with an error on every rank at the first mismatch; always
// on for a group's first collectives and then every kCheckEvery-th, on every call in debug mode.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

namespace loom::comm {

// What a wait is for: collective #sequence of the group `key` (members: its ranks in the
// world), or, with sequence 0, a transfer with the world rank `peer`.
struct WaitSite {
  std::string key;
  std::vector<int> members;
  int64_t sequence = 0;
  int peer = -1;
};

class Watchdog {
 public:
  static constexpr int kKeyBytes = 64;
  static constexpr int kNameBytes = 96;
  static constexpr int kSlots = 64;  // process groups one rank can be watched in
  // A wait is published once it has lasted this long (shorter ones cost nothing).
  static constexpr double kPublishAfterSeconds = 0.5;
  static constexpr double kHeartbeatSeconds = 0.2;
  // A rank whose heartbeat did not advance for this long is reported as stopped.
  static constexpr double kStoppedAfterSeconds = 2.0;
  // The call check runs on a group's first kCheckFirst collectives, then on every
  // kCheckEvery-th (debug mode: on every one).
  static constexpr int64_t kCheckFirst = 64;
  static constexpr int64_t kCheckEvery = 16;

  // Collective over world; the process's one watchdog until destroyed.
  explicit Watchdog(MPI_Comm world);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // The live watchdog, or null (no MpiRuntime): then collectives are not watched.
  static Watchdog* instance();

  // A slot for the group identified by key (the same string on all its members).
  int register_group(const std::string& key);
  void release_group(int slot);
  // Called on the communication thread as collective #sequence starts.
  void entered(int slot, int64_t sequence, const std::string& operation);
  // This rank has been waiting for `site` for a while (description: the wait, for reports);
  // done_waiting() when it ends.
  void waiting(const WaitSite& site, const std::string& description);
  void done_waiting();
  // Reports the wait that did not end within timeout_s and aborts the job.
  [[noreturn]] void report_stuck(const WaitSite& site, const std::string& description, double timeout_s);
  // The call check: the group's ranks compare the operation they are about to run; throws
  // loom::Error naming each rank's call on a mismatch (on every rank alike).
  static void check_same_call(MPI_Comm check_comm, const std::string& group_name, int64_t sequence,
                              const std::string& operation);
  // Whether collective #sequence of a group gets the call check.
  static bool checked(int64_t sequence, bool debug) {
    return debug || sequence <= kCheckFirst || sequence % kCheckEvery == 0;
  }

 private:
  // Writes to the own table, one at a time (table_mutex_: each group's communication thread
  // records its collectives here). Where the window's memory is the process's own (MPI's
  // unified model) a write takes no MPI lock: it marks the table's version odd while it
  // writes, and a reader retries a reading that saw an odd or changed version. So a rank
  // stopped in the middle of a write cannot keep the others from reading its table, as it
  // would holding the window's exclusive lock (which the separate model still needs).
  void begin_table_update();
  void end_table_update();
  void beat();  // the heartbeat thread's loop
  // Every rank's table, read through the window (empty when a rank's window did not answer
  // within 10 s).
  std::vector<char> read_tables();
  // Rank q's table as one consistent version (after a few tries, as it is: q stopped
  // while writing it).
  void read_table(int q, char* to);
  std::mutex table_mutex_;
  MPI_Win window_ = MPI_WIN_NULL;  // MPI_WIN_NULL: no one-sided support, table_ is local_table_
  bool unified_ = false;           // the window's memory model is MPI_WIN_UNIFIED
  std::vector<char> local_table_;
  char* table_ = nullptr;  // the wait record, then kSlots entries: key, int64 sequence, operation name
  int rank_ = 0, size_ = 1;
  std::vector<bool> slot_used_ = std::vector<bool>(kSlots, false);
  std::mutex beat_mutex_;
  std::condition_variable beat_cv_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

}  // namespace loom::comm
