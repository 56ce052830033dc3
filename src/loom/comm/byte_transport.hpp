// Non-float data over a process group: strings of any length (JSON reports, traces, names),
// records and integers, carried as MPI bytes by ProcessGroup's byte collectives, so they run
// on the group's communication thread under its watchdog like every other collective.
// Variable lengths cost one more collective: every rank first learns every length.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/comm/process_group.hpp"

namespace loom::comm {

// All of these are blocking and collective over group: every member calls them, in the
// same order.

// root's bytes reach every rank (the others' `bytes` are replaced, whatever their length).
void broadcast_bytes(ProcessGroup& group, std::string& bytes, int root);
// Every rank's bytes, on every rank, in rank order; lengths may differ (0 included).
std::vector<std::string> all_gather_bytes(ProcessGroup& group, const std::string& mine);
// root gets every rank's bytes in rank order; the others get {} (only root holds them all:
// for what rank 0 writes about the whole job, the merged trace or per-rank memory).
std::vector<std::string> gather_bytes(ProcessGroup& group, const std::string& mine, int root = 0);

// Every rank's value (copied bit for bit), on every rank, in rank order.
template <class T>
std::vector<T> all_gather_value(ProcessGroup& group, const T& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_value copies bits");
  std::vector<T> all(static_cast<size_t>(group.size()));
  group.all_gather_bytes_async(&mine, all.data(), sizeof(T)).wait();
  return all;
}

// Every rank's records, on every rank, in rank order; each rank may hold any number.
template <class T>
std::vector<std::vector<T>> all_gather_records(ProcessGroup& group, const std::vector<T>& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather_records copies bits");
  const std::vector<std::string> all =
      all_gather_bytes(group, std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T)));
  std::vector<std::vector<T>> out(all.size());
  for (size_t q = 0; q < all.size(); ++q) {
    out[q].resize(all[q].size() / sizeof(T));
    if (!all[q].empty()) std::memcpy(out[q].data(), all[q].data(), all[q].size());
  }
  return out;
}

// The smallest and the largest of every rank's value, on every rank (equal: all agree).
struct MinMax {
  int64_t min = 0, max = 0;
};
MinMax min_max(ProcessGroup& group, int64_t value);

}  // namespace loom::comm
