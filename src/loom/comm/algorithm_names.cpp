#include "loom/comm/algorithms.hpp"
#include "loom/error.hpp"

namespace loom::comm {

std::string algorithm_name(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::Mpi: return "mpi";
    case AllReduceAlgorithm::Ring: return "ring";
    case AllReduceAlgorithm::Tree: return "tree";
    case AllReduceAlgorithm::Rhd: return "rhd";
    case AllReduceAlgorithm::ParamServer: return "param-server";
  }
  return "?";
}

AllReduceAlgorithm parse_algorithm(const std::string& name) {
  for (AllReduceAlgorithm a : {AllReduceAlgorithm::Mpi, AllReduceAlgorithm::Ring, AllReduceAlgorithm::Tree,
                               AllReduceAlgorithm::Rhd, AllReduceAlgorithm::ParamServer})
    if (algorithm_name(a) == name) return a;
  fail("unknown all-reduce algorithm '", name, "' (choose mpi, ring, tree, rhd or param-server)");
}

}  // namespace loom::comm
