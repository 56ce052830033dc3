// What the memory check's activations are held to: the most activation bytes a training step
// holds at once on this rank, as the tracker counts them, after a warm step in which caches and
// buffers settle.
#pragma once

#include <cstdint>

#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/trainer.hpp"

namespace loom::testing {

inline int64_t step_activation_peak(train::Trainer& t) {
  MemoryTracker& m = MemoryTracker::instance();
  t.train_step();
  m.reset_peaks();
  const int64_t before = m.current(MemoryCategory::Activations);
  t.train_step();
  return m.peak(MemoryCategory::Activations) - before;
}

}  // namespace loom::testing
