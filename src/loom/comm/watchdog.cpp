#include "loom/comm/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <sstream>

#include "loom/comm/mpi_util.hpp"
#include "loom/error.hpp"

namespace loom::comm {

namespace {

constexpr int kEntryBytes = Watchdog::kKeyBytes + 8 + Watchdog::kNameBytes;
constexpr int kTableBytes = Watchdog::kSlots * kEntryBytes;
Watchdog* g_instance = nullptr;

void copy_text(char* dst, const std::string& text, int capacity) {
  std::memset(dst, 0, static_cast<size_t>(capacity));
  std::memcpy(dst, text.data(), std::min<size_t>(text.size(), static_cast<size_t>(capacity - 1)));
}

}  // namespace

Watchdog::Watchdog(MPI_Comm world) {
  rank_ = comm_rank(world);
  // Open MPI 4.1 has no one-sided window for a multi-threaded process whose ranks talk over
  // TCP (osc/sm needs one node, osc/rdma an RDMA network, osc/pt2pt refuses
  // MPI_THREAD_MULTIPLE): then the table stays local, the watchdog still turns a stuck
  // collective into an aborted job, and its report says it cannot name the late ranks.
  MPI_Errhandler previous;
  MPI_Comm_get_errhandler(world, &previous);
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  int ok = MPI_Win_allocate(kTableBytes, 1, MPI_INFO_NULL, world, &table_, &window_) == MPI_SUCCESS ? 1 : 0;
  MPI_Comm_set_errhandler(world, previous);
  MPI_Errhandler_free(&previous);
  int all_ok = 0;
  check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  if (all_ok == 0) {
    window_ = MPI_WIN_NULL;  // a window some rank lacks cannot be freed collectively: leave it
    local_table_.assign(kTableBytes, 0);
    table_ = local_table_.data();
  } else {
    lock_own_table();
    std::memset(table_, 0, kTableBytes);
    unlock_own_table();
  }
  MPI_Barrier(world);  // every table is initialised before anyone may read it
  g_instance = this;
}

Watchdog::~Watchdog() {
  g_instance = nullptr;
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
}

void Watchdog::lock_own_table() {
  if (window_ != MPI_WIN_NULL) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, window_);
}

void Watchdog::unlock_own_table() {
  if (window_ != MPI_WIN_NULL) MPI_Win_unlock(rank_, window_);
}

Watchdog* Watchdog::instance() { return g_instance; }

int Watchdog::register_group(const std::string& key) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  const auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  check(free_slot != slot_used_.end(), "more than ", kSlots, " live process groups on one rank");
  *free_slot = true;
  const int slot = static_cast<int>(free_slot - slot_used_.begin());
  lock_own_table();
  char* entry = table_ + slot * kEntryBytes;
  copy_text(entry, key, kKeyBytes);
  std::memset(entry + kKeyBytes, 0, 8);
  copy_text(entry + kKeyBytes + 8, "(none yet)", kNameBytes);
  unlock_own_table();
  return slot;
}

void Watchdog::release_group(int slot) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  lock_own_table();
  std::memset(table_ + slot * kEntryBytes, 0, kEntryBytes);
  unlock_own_table();
  slot_used_[slot] = false;
}

void Watchdog::entered(int slot, int64_t sequence, const std::string& operation) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  lock_own_table();
  char* entry = table_ + slot * kEntryBytes;
  std::memcpy(entry + kKeyBytes, &sequence, 8);
  copy_text(entry + kKeyBytes + 8, operation, kNameBytes);
  unlock_own_table();
}

void Watchdog::report_stuck(const std::string& key, const std::vector<int>& members, int64_t sequence,
                            const std::string& description, double timeout_s) {
  std::ostringstream os;
  os << "loom: watchdog on rank " << rank_ << ": " << description << " did not complete within " << timeout_s << " s.";
  if (window_ == MPI_WIN_NULL) {
    os << " The late ranks cannot be named: this MPI transport offers no one-sided window.";
    std::fprintf(stderr, "%s\nloom: aborting the job\n", os.str().c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    std::_Exit(3);
  }
  // Read every member's table; a dead rank's window may never answer, so give up after 10 s.
  auto tables = std::async(std::launch::async, [this, members]() {
    std::vector<char> all(members.size() * kTableBytes);
    for (size_t i = 0; i < members.size(); ++i) {
      MPI_Win_lock(MPI_LOCK_SHARED, members[i], 0, window_);
      MPI_Get(all.data() + i * kTableBytes, kTableBytes, MPI_CHAR, members[i], 0, kTableBytes, MPI_CHAR, window_);
      MPI_Win_unlock(members[i], window_);
    }
    return all;
  });
  if (tables.wait_for(std::chrono::seconds(10)) == std::future_status::ready) {
    const std::vector<char> all = tables.get();
    std::ostringstream missing, progress;
    for (size_t i = 0; i < members.size(); ++i) {
      int64_t seq = 0;
      std::string op = "(no collective started on this group)";
      for (int s = 0; s < kSlots; ++s) {
        const char* entry = all.data() + i * kTableBytes + s * kEntryBytes;
        if (std::strncmp(entry, key.c_str(), kKeyBytes - 1) != 0) continue;
        std::memcpy(&seq, entry + kKeyBytes, 8);
        op = std::string(entry + kKeyBytes + 8);
      }
      if (seq < sequence) missing << (missing.tellp() > 0 ? " " : "") << members[i];
      progress << "\n  rank " << members[i] << ": last started #" << seq << " " << op;
    }
    os << " Ranks that did not arrive at #" << sequence << ": [" << missing.str() << "]" << progress.str();
  } else {
    os << " The other ranks' progress could not be read: a rank may have died.";
  }
  std::fprintf(stderr, "%s\nloom: aborting the job\n", os.str().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

void Watchdog::check_same_call(MPI_Comm debug_comm, const std::string& group_name, int64_t sequence,
                               const std::string& operation) {
  const int size = comm_size(debug_comm);
  std::vector<char> mine(kNameBytes, 0), all(static_cast<size_t>(size) * kNameBytes);
  copy_text(mine.data(), operation, kNameBytes);
  check_mpi(MPI_Allgather(mine.data(), kNameBytes, MPI_CHAR, all.data(), kNameBytes, MPI_CHAR, debug_comm),
            "MPI_Allgather");
  bool same = true;
  for (int q = 1; q < size; ++q) same = same && std::strcmp(all.data(), all.data() + q * kNameBytes) == 0;
  if (same) return;
  std::ostringstream os;
  os << "collective mismatch on group '" << group_name << "' at #" << sequence << ":";
  for (int q = 0; q < size; ++q) os << "\n  rank " << q << " calls " << (all.data() + q * kNameBytes);
  throw Error(os.str());
}

}  // namespace loom::comm
