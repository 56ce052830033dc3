#include "loom/comm/watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "loom/comm/mpi_collectives.hpp"
#include "loom/comm/mpi_util.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"

namespace loom::comm {

namespace {

// The head of each rank's table: its heartbeat and what it has been waiting for.
struct WaitRecord {
  int64_t version;    // odd while the owner writes its table (Watchdog::begin_table_update)
  int64_t heartbeat;
  int64_t sequence;  // a collective's number in its group; 0: a transfer
  int32_t waiting;   // 1 while a wait longer than kPublishAfterSeconds lasts
  int32_t peer;      // a transfer's other rank, in the world
  char key[Watchdog::kKeyBytes];
  char what[160];    // the wait's description
};

constexpr int kEntryBytes = Watchdog::kKeyBytes + 8 + Watchdog::kNameBytes;
constexpr int kHeadBytes = static_cast<int>(sizeof(WaitRecord));
constexpr int kTableBytes = kHeadBytes + Watchdog::kSlots * kEntryBytes;
Watchdog* g_instance = nullptr;

void copy_text(char* dst, const std::string& text, int capacity) {
  std::memset(dst, 0, static_cast<size_t>(capacity));
  std::memcpy(dst, text.data(), std::min<size_t>(text.size(), static_cast<size_t>(capacity - 1)));
}

std::string text_of(const char* src, int capacity) { return std::string(src, strnlen(src, static_cast<size_t>(capacity))); }

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? " " : "") << ranks[i];
  return os.str();
}

[[noreturn]] void abort_job(const std::string& report) {
  std::fprintf(stderr, "%s\nloom: aborting the job\n", report.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

// One rank's table as the report reads it.
struct RankView {
  WaitRecord record{};
  std::map<std::string, std::pair<int64_t, std::string>> groups;  // key -> (last started #, operation)
};

std::vector<RankView> parse_tables(const std::vector<char>& all, int size) {
  std::vector<RankView> views(static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) {
    const char* table = all.data() + static_cast<size_t>(q) * kTableBytes;
    std::memcpy(&views[q].record, table, sizeof(WaitRecord));
    for (int s = 0; s < Watchdog::kSlots; ++s) {
      const char* entry = table + kHeadBytes + s * kEntryBytes;
      if (entry[0] == '\0') continue;
      int64_t seq = 0;
      std::memcpy(&seq, entry + Watchdog::kKeyBytes, 8);
      views[q].groups[text_of(entry, Watchdog::kKeyBytes)] = {seq, text_of(entry + Watchdog::kKeyBytes + 8, Watchdog::kNameBytes)};
    }
  }
  return views;
}

// The ranks `q` waits for: a transfer's peer, or the members of its collective's group that
// have not started it; none when q waits for nothing.
std::vector<int> blockers(const std::vector<RankView>& views, int q, const std::string& key, int64_t sequence, int peer) {
  if (peer >= 0) return {peer};
  std::vector<int> late;
  for (int r = 0; r < static_cast<int>(views.size()); ++r) {
    const auto it = views[r].groups.find(key);
    if (r != q && it != views[r].groups.end() && it->second.first < sequence) late.push_back(r);
  }
  return late;
}

}  // namespace

Watchdog::Watchdog(MPI_Comm world) {
  rank_ = comm_rank(world);
  size_ = comm_size(world);
  // Open MPI 4.1 has no one-sided window for a multi-threaded process whose ranks talk over
  // TCP (osc/sm needs one node, osc/rdma an RDMA network, osc/pt2pt refuses
  // MPI_THREAD_MULTIPLE): then the table stays local, the watchdog still turns a stuck
  // wait into an aborted job, and its report says what it cannot name.
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
    int* model = nullptr;
    int found = 0;
    MPI_Win_get_attr(window_, MPI_WIN_MODEL, &model, &found);
    unified_ = found != 0 && *model == MPI_WIN_UNIFIED;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, window_);
    std::memset(table_, 0, kTableBytes);
    MPI_Win_unlock(rank_, window_);
    heartbeat_ = std::thread([this] { beat(); });
  }
  MPI_Barrier(world);  // every table is initialised before anyone may read it
  g_instance = this;
}

Watchdog::~Watchdog() {
  g_instance = nullptr;
  if (heartbeat_.joinable()) {
    {
      std::lock_guard<std::mutex> guard(beat_mutex_);
      stopping_ = true;
    }
    beat_cv_.notify_all();
    heartbeat_.join();
  }
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
}

void Watchdog::beat() {
  std::unique_lock<std::mutex> lock(beat_mutex_);
  while (!beat_cv_.wait_for(lock, std::chrono::duration<double>(kHeartbeatSeconds), [this] { return stopping_; })) {
    std::lock_guard<std::mutex> guard(table_mutex_);
    begin_table_update();
    reinterpret_cast<WaitRecord*>(table_)->heartbeat += 1;
    end_table_update();
  }
}

void Watchdog::begin_table_update() {
  if (window_ != MPI_WIN_NULL && !unified_) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank_, 0, window_);
  std::atomic_ref<int64_t> version(reinterpret_cast<WaitRecord*>(table_)->version);
  version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void Watchdog::end_table_update() {
  std::atomic_ref<int64_t> version(reinterpret_cast<WaitRecord*>(table_)->version);
  version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  if (window_ != MPI_WIN_NULL && !unified_) MPI_Win_unlock(rank_, window_);
}

Watchdog* Watchdog::instance() { return g_instance; }

int Watchdog::register_group(const std::string& key) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  const auto free_slot = std::find(slot_used_.begin(), slot_used_.end(), false);
  check(free_slot != slot_used_.end(), "more than ", kSlots, " live process groups on one rank");
  *free_slot = true;
  const int slot = static_cast<int>(free_slot - slot_used_.begin());
  begin_table_update();
  char* entry = table_ + kHeadBytes + slot * kEntryBytes;
  copy_text(entry, key, kKeyBytes);
  std::memset(entry + kKeyBytes, 0, 8);
  copy_text(entry + kKeyBytes + 8, "(none yet)", kNameBytes);
  end_table_update();
  return slot;
}

void Watchdog::release_group(int slot) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  begin_table_update();
  std::memset(table_ + kHeadBytes + slot * kEntryBytes, 0, kEntryBytes);
  end_table_update();
  slot_used_[slot] = false;
}

void Watchdog::entered(int slot, int64_t sequence, const std::string& operation) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  begin_table_update();
  stop_for_a_test("watchdog-table");
  char* entry = table_ + kHeadBytes + slot * kEntryBytes;
  std::memcpy(entry + kKeyBytes, &sequence, 8);
  copy_text(entry + kKeyBytes + 8, operation, kNameBytes);
  end_table_update();
}

void Watchdog::waiting(const WaitSite& site, const std::string& description) {
  std::lock_guard<std::mutex> guard(table_mutex_);
  begin_table_update();
  auto* record = reinterpret_cast<WaitRecord*>(table_);
  record->sequence = site.sequence;
  record->peer = site.peer;
  copy_text(record->key, site.key, kKeyBytes);
  copy_text(record->what, description, sizeof record->what);
  record->waiting = 1;
  end_table_update();
}

void Watchdog::done_waiting() {
  std::lock_guard<std::mutex> guard(table_mutex_);
  begin_table_update();
  reinterpret_cast<WaitRecord*>(table_)->waiting = 0;
  end_table_update();
}

std::vector<char> Watchdog::read_tables() {
  // A dead rank's window may never answer, so give up after 10 s (the reading thread is
  // left behind: the job is about to end).
  auto tables = std::make_shared<std::packaged_task<std::vector<char>()>>([this]() {
    std::vector<char> all(static_cast<size_t>(size_) * kTableBytes);
    for (int q = 0; q < size_; ++q) {
      char* to = all.data() + static_cast<size_t>(q) * kTableBytes;
      if (q == rank_) {  // its own writers held off, as for a write (one MPI lock at a time)
        std::lock_guard<std::mutex> guard(table_mutex_);
        begin_table_update();
        std::memcpy(to, table_, kTableBytes);
        end_table_update();
        continue;
      }
      read_table(q, to);
    }
    return all;
  });
  std::future<std::vector<char>> result = tables->get_future();
  std::thread([tables] { (*tables)(); }).detach();
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return {};
  return result.get();
}

void Watchdog::read_table(int q, char* to) {
  // A write lasts microseconds: 100 readings 1 ms apart that all overlap one mean the owner
  // stopped in it, and its table is taken as it is (its heartbeat shows it stopped).
  // The version is read in an epoch of its own before the table and after it: the bytes of
  // one get may be read in any order, so the copy's own version word may postdate the rest.
  auto read_version = [&] {
    int64_t version = 0;
    MPI_Win_lock(MPI_LOCK_SHARED, q, 0, window_);
    MPI_Get(&version, 1, MPI_INT64_T, q, 0, 1, MPI_INT64_T, window_);
    MPI_Win_unlock(q, window_);
    return version;
  };
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int64_t before = read_version();
    MPI_Win_lock(MPI_LOCK_SHARED, q, 0, window_);
    MPI_Get(to, kTableBytes, MPI_CHAR, q, 0, kTableBytes, MPI_CHAR, window_);
    MPI_Win_unlock(q, window_);
    if (before % 2 == 0 && before == read_version()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Watchdog::report_stuck(const WaitSite& site, const std::string& description, double timeout_s) {
  std::ostringstream os;
  os << "loom: watchdog on rank " << rank_ << ": " << description << " did not complete within " << timeout_s << " s.";
  const bool transfer = site.peer >= 0;
  if (transfer) os << " The peer is rank " << site.peer << ".";
  if (window_ == MPI_WIN_NULL) {
    os << (transfer ? " What it is doing cannot be read" : " The late ranks cannot be named")
       << ": this MPI transport offers no one-sided window.";
    abort_job(os.str());
  }
  // Two readings kStoppedAfterSeconds apart: a rank whose heartbeat did not advance between
  // them is stopped; the second says what everyone waits for now.
  const std::vector<char> before = read_tables();
  std::vector<char> after;
  if (!before.empty()) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kStoppedAfterSeconds));
    after = read_tables();
  }
  if (after.empty()) {
    os << " The other ranks' progress could not be read: a rank may have died.";
    abort_job(os.str());
  }
  const std::vector<RankView> was = parse_tables(before, size_), now = parse_tables(after, size_);
  auto stopped = [&](int q) { return q != rank_ && now[q].record.heartbeat == was[q].record.heartbeat; };

  std::vector<int> first;  // whom this rank waits for
  if (transfer) {
    first = {site.peer};
  } else {
    std::ostringstream progress;
    for (const int q : site.members) {
      const auto it = now[q].groups.find(site.key);
      const int64_t seq = it != now[q].groups.end() ? it->second.first : 0;
      if (seq < site.sequence) first.push_back(q);
      progress << "\n  rank " << q << ": last started #" << seq << " "
               << (it != now[q].groups.end() ? it->second.second : "(no collective started on this group)");
    }
    os << " Ranks that did not arrive at #" << site.sequence << ": [" << rank_list(first) << "]" << progress.str();
    // Every member started it, yet it does not end: a member that stopped inside it (a frozen
    // process the others wait on) holds it up.
    if (first.empty())
      for (const int q : site.members)
        if (stopped(q)) first.push_back(q);
  }

  // Who waits for whom, from the ranks this one waits for: the ranks that hold the job up are
  // those that stopped or wait for nothing; ranks waiting for others are passed through.
  std::vector<int> held_by, chain;
  std::vector<bool> seen(static_cast<size_t>(size_), false);
  seen[rank_] = true;
  std::deque<int> todo;
  for (const int q : first)
    if (!seen[q]) {  // not this rank (its own communication thread may be behind)
      seen[q] = true;
      todo.push_back(q);
    }
  while (!todo.empty()) {
    const int q = todo.front();
    todo.pop_front();
    const WaitRecord& r = now[q].record;
    if (stopped(q) || r.waiting == 0) {
      held_by.push_back(q);
      continue;
    }
    chain.push_back(q);
    for (const int b : blockers(now, q, text_of(r.key, kKeyBytes), r.sequence, r.peer))
      if (!seen[b]) {
        seen[b] = true;
        todo.push_back(b);
      }
  }
  for (const int q : chain)
    os << "\n  rank " << q << " waits in " << text_of(now[q].record.what, sizeof now[q].record.what);
  std::sort(held_by.begin(), held_by.end());
  if (held_by.empty() && first.empty()) {
    os << "\nEvery member started #" << site.sequence
       << ": no rank holds it up (ranks calling different collectives, or a transfer slower than the timeout).";
  } else if (held_by.empty()) {
    os << "\nHeld up by a cycle of waits: ranks [" << rank_list(chain) << "] and rank " << rank_
       << " each wait for another (ranks that call transfers or collectives in different orders).";
  } else {
    auto reason = [&](int q) -> std::string {
      if (stopped(q))
        return "stopped responding (its heartbeat has not advanced for " + std::to_string(static_cast<int>(kStoppedAfterSeconds)) +
               " s: a stopped or frozen process)";
      return "waits for no communication (it skipped the call, or is busy or stuck outside communication)";
    };
    if (held_by.size() == 1) {
      os << "\nHeld up by rank " << held_by[0] << ": it " << reason(held_by[0]) << ".";
    } else {
      os << "\nHeld up by ranks [" << rank_list(held_by) << "]:";
      for (size_t i = 0; i < held_by.size(); ++i) os << (i ? ";" : "") << " rank " << held_by[i] << " " << reason(held_by[i]);
      os << ".";
    }
  }
  abort_job(os.str());
}

void Watchdog::check_same_call(MPI_Comm check_comm, const std::string& group_name, int64_t sequence,
                               const std::string& operation) {
  const int size = comm_size(check_comm);
  std::vector<char> mine(kNameBytes, 0), all(static_cast<size_t>(size) * kNameBytes);
  copy_text(mine.data(), operation, kNameBytes);
  // The check waits for the slowest rank as the collective would: without spinning.
  all_gather_block(mine.data(), all.data(), kNameBytes, MPI_CHAR, check_comm);
  bool same = true;
  for (int q = 1; q < size; ++q) same = same && std::strcmp(all.data(), all.data() + q * kNameBytes) == 0;
  if (same) return;
  std::ostringstream os;
  os << "collective mismatch on group '" << group_name << "' at #" << sequence << ":";
  for (int q = 0; q < size; ++q) os << "\n  rank " << q << " calls " << (all.data() + q * kNameBytes);
  throw Error(os.str());
}

}  // namespace loom::comm
