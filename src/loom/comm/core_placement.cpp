#include "loom/comm/core_placement.hpp"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <string>

#include "loom/comm/mpi_util.hpp"
#include "loom/comm/startup_watch.hpp"
#include "loom/error.hpp"

namespace loom::comm {

std::vector<int> spread_stages_over_cores(const MeshLayout& layout, const std::vector<int>& node_ranks, int cores) {
  check(cores >= 1, "spreading ranks needs at least one core, got ", cores);
  int stage_dim = -1;
  for (size_t d = 0; d < layout.dims().size(); ++d)
    if (layout.dims()[d].name == "pp") stage_dim = static_cast<int>(d);
  // The stage first, then the coordinates in mesh order: a stage's ranks come one after
  // another, so dealing them round-robin puts them on different cores.
  auto key = [&](int rank) {
    std::vector<int> c = layout.coordinates(rank);
    if (stage_dim >= 0) std::rotate(c.begin(), c.begin() + stage_dim, c.begin() + stage_dim + 1);
    return c;
  };
  std::vector<size_t> order(node_ranks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(node_ranks[a]) < key(node_ranks[b]); });
  std::vector<int> core(node_ranks.size());
  for (size_t position = 0; position < order.size(); ++position)
    core[order[position]] = static_cast<int>(position % static_cast<size_t>(cores));
  return core;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

namespace {

// Every thread of this process: the communication threads already run; threads started later
// inherit the mask of the thread that starts them. False when the calling thread could not be
// pinned (a cpuset that forbids it).
bool pin_process(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) return false;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec))
    sched_setaffinity(std::stoi(task.path().filename().string()), sizeof set, &set);
  return true;
}

}  // namespace

std::string pin_ranks_when_oversubscribed(const MeshLayout& layout, const ProcessGroup& world) {
  if (world.is_single_process()) return "";  // one process cannot outnumber the cores
  const int world_rank = world.rank();
  MPI_Comm node = MPI_COMM_NULL;
  int on_node = 0;
  std::vector<int> node_ranks;
  {
    // Blocking calls every rank of the node must reach: watched by a deadline.
    const StartupWatch watch(world.timeout(), "placing the ranks on cores (MPI_Comm_split_type, MPI_Allgather)");
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    MPI_Comm_size(node, &on_node);
    node_ranks.resize(static_cast<size_t>(on_node));
    check_mpi(MPI_Allgather(&world_rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node), "MPI_Allgather");
  }
  int local = 0;
  MPI_Comm_rank(node, &local);
  // Only ranks that share one set of CPUs are placed: where the launcher bound each rank to
  // cores or sockets of its own, it has already placed them, and a slot counted over the whole
  // node would not fit a rank's own set.
  cpu_set_t mine, any;
  CPU_ZERO(&mine);
  CPU_ZERO(&any);
  sched_getaffinity(0, sizeof mine, &mine);
  check_mpi(MPI_Allreduce(&mine, &any, sizeof mine, MPI_BYTE, MPI_BOR, node), "MPI_Allreduce");
  int same = CPU_EQUAL(&mine, &any) ? 1 : 0, all_same = 0;
  check_mpi(MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_LAND, node), "MPI_Allreduce");
  MPI_Comm_free(&node);
  const std::vector<int> cpus = allowed_cpus();
  if (!all_same || cpus.empty() || on_node <= static_cast<int>(cpus.size())) return "";
  const int slot = spread_stages_over_cores(layout, node_ranks, static_cast<int>(cpus.size()))[static_cast<size_t>(local)];
  if (!pin_process(cpus[static_cast<size_t>(slot)])) return "";
  return std::to_string(on_node) + " ranks on " + std::to_string(cpus.size()) + " cores: pinned rank " +
         std::to_string(world_rank) + " to CPU " + std::to_string(cpus[static_cast<size_t>(slot)]);
}

}  // namespace loom::comm
