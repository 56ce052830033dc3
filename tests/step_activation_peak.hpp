// What the memory check's transient terms are held to: the most bytes of a category (its
// activations, ZeRO's gathered units) a training step holds at once on this rank beyond what it
// held before the step, as the tracker counts them, after a warm step in which caches and
// buffers settle.
#pragma once

#include <cstdint>

#include "loom/tensor/memory_tracker.hpp"
#include "loom/train/trainer.hpp"

namespace loom::testing {

inline int64_t step_peak(train::Trainer& t, MemoryCategory c) {
  MemoryTracker& m = MemoryTracker::instance();
  t.train_step();
  m.reset_peaks();
  const int64_t before = m.current(c);
  t.train_step();
  return m.peak(c) - before;
}

inline int64_t step_activation_peak(train::Trainer& t) { return step_peak(t, MemoryCategory::Activations); }

}  // namespace loom::testing
