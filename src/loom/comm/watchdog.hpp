// The watchdog: every rank publishes, in one MPI window over the world, the number and name
// of the collective it most recently started on each of its process groups. When a
// collective has waited longer than its group's timeout, the waiting rank reads the other
// members' entries and reports the group, the operation, its sequence number and the ranks
// that never arrived (a crashed rank, one that skipped the call, or one that called another
// collective), then aborts the whole job: a failure everywhere, never a hang.
// One window for the process (made by MpiRuntime) because Open MPI 4.1 cannot create
// windows on many split communicators of one job at once. Where the transport offers no
// window (Open MPI 4.1 over TCP between nodes) the table stays local and the report cannot
// name the late ranks.
// The debug mode goes further: before each collective the group's ranks exchange what they
// are about to call and stop with an error on every rank at the first mismatch.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <mpi.h>

namespace loom::comm {

class Watchdog {
 public:
  static constexpr int kKeyBytes = 64;
  static constexpr int kNameBytes = 96;
  static constexpr int kSlots = 64;  // process groups one rank can be watched in

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
  // Reports and aborts the job; members are the group's ranks in the world.
  [[noreturn]] void report_stuck(const std::string& key, const std::vector<int>& members, int64_t sequence,
                                 const std::string& description, double timeout_s);
  // Debug mode: the group's ranks compare the operation they are about to run; throws
  // loom::Error naming each rank's call on a mismatch (on every rank alike).
  static void check_same_call(MPI_Comm debug_comm, const std::string& group_name, int64_t sequence,
                              const std::string& operation);

 private:
  // One lock of the own table at a time: each group's communication thread records its
  // collectives here, and MPI forbids a process two concurrent locks on the same target.
  void lock_own_table();  // the window's lock; nothing when the table is local
  void unlock_own_table();
  std::mutex table_mutex_;
  MPI_Win window_ = MPI_WIN_NULL;  // MPI_WIN_NULL: no one-sided support, table_ is local_table_
  std::vector<char> local_table_;
  char* table_ = nullptr;  // kSlots entries: key, int64 sequence, operation name
  int rank_ = 0;
  std::vector<bool> slot_used_ = std::vector<bool>(kSlots, false);
};

}  // namespace loom::comm
