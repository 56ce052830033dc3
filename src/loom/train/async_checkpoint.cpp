#include "loom/train/async_checkpoint.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <utility>

#include "loom/agreed_error.hpp"
#include "loom/error.hpp"
#include "loom/trace/recorder.hpp"

namespace loom::train {

AsyncCheckpointWriter::AsyncCheckpointWriter(comm::ProcessGroup& world)
    : group_(world.split(0, world.rank(), "checkpoint")) {}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (!write_.valid()) return;
  try {
    write_.get();
  } catch (...) {
  }
}

void AsyncCheckpointWriter::start(PreparedCheckpoint prepared) {
  check(!write_.valid(), "a checkpoint write is already in flight (finish it first)");
  prepared_ = std::make_shared<PreparedCheckpoint>(std::move(prepared));
  step_ = prepared_->step();
  write_ = std::async(std::launch::async, [this, prepared = prepared_, started = std::chrono::steady_clock::now(),
                                           step = step_] {
    trace::set_thread_row(trace::row("checkpoint writer"));
    // The lowest priority: the write takes the CPU compute leaves idle. At nice 0 its copies into
    // the page cache preempted a compute thread, and the whole parallel region waited for it
    // (steps 3x slower during a 1 GB write on 2 cores, where nice 19 kept them within 6%).
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
    trace::Span span("checkpoint", "write checkpoint");
    Written w;
    w.step = step;
    w.path = prepared->write(*group_);
    w.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return w;
  });
}

bool AsyncCheckpointWriter::done_here() const {
  return write_.valid() && write_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

std::optional<AsyncCheckpointWriter::Written> AsyncCheckpointWriter::finish() {
  if (!write_.valid()) return std::nullopt;
  std::future<Written> write = std::move(write_);
  try {
    Written w = write.get();
    prepared_.reset();  // the encoded file's memory goes back
    return w;
  } catch (const AgreedError& e) {
    prepared_.reset();
    throw AgreedError("the checkpoint of step " + std::to_string(step_) + ", written in the background, failed: " +
                          e.what(),
                      e.ranks());
  } catch (const std::exception& e) {
    prepared_.reset();
    fail("the checkpoint of step ", step_, ", written in the background, failed: ", e.what());
  }
}

}  // namespace loom::train
