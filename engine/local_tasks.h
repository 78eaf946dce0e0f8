// Tasks that run on the progress thread without talking to peers: a host function in stream
// order, and the wait that makes a stream follow an event recorded on another stream. They take
// no sequence number and are not counted in the communicator's counters (kind() is
// ZRT_COLL_KIND_COUNT).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/engine_impl.h"
#include "engine/task.h"

namespace zrt {

class HostFunctionTask final : public Task {
 public:
  HostFunctionTask(std::function<Status()> function, const char* name)
      : function_(std::move(function)), name_(name != nullptr ? name : "host function") {}

  Status start(TaskContext& context) override;
  Status progress(TaskContext& context, bool* done) override;
  bool communicates() const override { return false; }
  zrt_coll_kind_t kind() const override { return ZRT_COLL_KIND_COUNT; }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
  std::string describe() const override { return name_; }

 private:
  std::function<Status()> function_;
  std::string name_;
};

// Completes when the recorded point (stream, ticket) is reached; fails with that stream's error
// if it failed before reaching it.
class WaitPointTask final : public Task {
 public:
  WaitPointTask(EngineImpl& engine, std::shared_ptr<StreamImpl> stream, uint64_t ticket)
      : engine_(engine), stream_(std::move(stream)), ticket_(ticket) {}

  Status start(TaskContext& context) override;
  Status progress(TaskContext& context, bool* done) override;
  bool communicates() const override { return false; }
  zrt_coll_kind_t kind() const override { return ZRT_COLL_KIND_COUNT; }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
  std::string describe() const override;

 private:
  EngineImpl& engine_;
  std::shared_ptr<StreamImpl> stream_;
  uint64_t ticket_;
};

// Waits for an event the engine did not create (a CUDA event of device/): there is no
// fd to sleep on, so the engine polls query() every kForeignPollMs while this task runs.
inline constexpr int kForeignPollMs = 1;
class ForeignEventWaitTask final : public Task {
 public:
  explicit ForeignEventWaitTask(Event& event) : event_(event) {}

  Status start(TaskContext&) override { return Status::ok(); }
  Status progress(TaskContext& context, bool* done) override;
  bool communicates() const override { return false; }
  zrt_coll_kind_t kind() const override { return ZRT_COLL_KIND_COUNT; }
  uint64_t bytes_sent() const override { return 0; }
  uint64_t bytes_received() const override { return 0; }
  std::string describe() const override { return "wait_event(foreign event)"; }

 private:
  Event& event_;
};

}  // namespace zrt
