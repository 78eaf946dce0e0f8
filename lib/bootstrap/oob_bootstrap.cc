// The out-of-band bootstrap: the host framework's own all-gather (zrt_oob_t, UCC's pattern)
// carries zrt's records, so a framework that already has ranks needs no second rendezvous.
//
// The callbacks are non-blocking and offer no file descriptor to sleep on, so completion is
// polled: a few yields first (an all-gather among live peers often finishes at once), then
// sleeps that double from 50 us to 1 ms, which keeps a waiting rank off the CPU its peers need
// while adding at most a millisecond of latency. The request is always freed, whether the
// all-gather succeeded, failed or timed out.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/local_ranks.h"
#include "lib/bootstrap/socket_util.h"
#include "lib/core/callback_status.h"

namespace zrt {
namespace {

// A failed callback: ZRT_CALLBACK_ERROR (its zrt_callback_error message, or a value outside
// zrt_status_t) stays one; any other status reads as the peer-side failure it usually is.
Status callback_failure(int code, const char* callback, const char* kind, int64_t round,
                        const zrt_oob_t& oob) {
  const Status result = callback_result(code, fmt::format("the out-of-band {} callback", callback));
  if (result.code() == ZRT_CALLBACK_ERROR) {
    return Status::error(ZRT_CALLBACK_ERROR, "{} at bootstrap {} round {} (rank {} of {})",
                         result.message(), kind, round, oob.rank, oob.size);
  }
  return Status::error(ZRT_REMOTE_ERROR,
                       "out-of-band {} callback failed with {} at bootstrap {} round {} (rank {} "
                       "of {})",
                       callback, status_code_name(code), kind, round, oob.rank, oob.size);
}

class OobBootstrap final : public Bootstrap {
 public:
  OobBootstrap(const zrt_oob_t& oob, int64_t timeout_ms) : oob_(oob), timeout_ms_(timeout_ms) {}

  int rank() const override { return oob_.rank; }
  int size() const override { return oob_.size; }
  int local_rank() const override { return oob_.local_rank; }
  int local_size() const override { return oob_.local_size; }

  Status init() {
    if (oob_.local_rank >= 0 && oob_.local_size >= 0) return Status::ok();
    int local_rank = 0;
    int local_size = 0;
    ZRT_RETURN_IF_ERROR(derive_local_ranks(*this, &local_rank, &local_size));
    oob_.local_rank = local_rank;
    oob_.local_size = local_size;
    return Status::ok();
  }

  Status allgather(const void* input, void* output, size_t bytes) override {
    if (bytes > 0 && (input == nullptr || output == nullptr)) {
      return Status::invalid_argument("bootstrap allgather: null buffer for {} bytes", bytes);
    }
    return run("allgather", input, output, bytes);
  }

  Status barrier() override {
    // An all-gather of one byte: it cannot complete before every rank has contributed.
    const uint8_t mine = 1;
    std::vector<uint8_t> all(static_cast<size_t>(oob_.size));
    return run("barrier", &mine, all.data(), 1);
  }

 private:
  Status run(const char* kind, const void* input, void* output, size_t bytes);

  zrt_oob_t oob_;
  int64_t timeout_ms_;
  int64_t round_ = 0;
};

Status OobBootstrap::run(const char* kind, const void* input, void* output, size_t bytes) {
  const int64_t round = ++round_;
  void* request = nullptr;
  clear_callback_message();
  const zrt_status_t posted = oob_.allgather(input, output, bytes, oob_.user_data, &request);
  if (posted != ZRT_SUCCESS) {
    return callback_failure(posted, "allgather", kind, round, oob_);
  }
  const Deadline deadline = deadline_after_ms(timeout_ms_);
  auto pause = std::chrono::microseconds(50);
  int yields = 0;
  zrt_status_t state = ZRT_IN_PROGRESS;
  while (true) {
    state = oob_.test(request);
    if (state != ZRT_IN_PROGRESS || Clock::now() >= deadline) break;
    if (yields < 16) {
      ++yields;
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  oob_.free(request);
  if (state == ZRT_SUCCESS) return Status::ok();
  if (state == ZRT_IN_PROGRESS) {
    return Status::error(ZRT_TIMEOUT,
                         "timed out after {} ms waiting for the out-of-band allgather at bootstrap "
                         "{} round {} (rank {} of {})",
                         timeout_ms_, kind, round, oob_.rank, oob_.size);
  }
  return callback_failure(state, "test", kind, round, oob_);
}

}  // namespace

Status create_oob_bootstrap(const zrt_oob_t& oob, int64_t timeout_ms,
                            std::unique_ptr<Bootstrap>* bootstrap) {
  if (bootstrap == nullptr)
    return Status::invalid_argument("create_oob_bootstrap: bootstrap is null");
  if (oob.allgather == nullptr || oob.test == nullptr || oob.free == nullptr) {
    return Status::invalid_argument("zrt_oob_t: callback {} is NULL",
                                    oob.allgather == nullptr ? "allgather"
                                    : oob.test == nullptr    ? "test"
                                                             : "free");
  }
  const bool derive = oob.local_rank == -1 && oob.local_size == -1;
  if (!derive && (oob.local_rank == -1) != (oob.local_size == -1)) {
    return Status::invalid_argument(
        "zrt_oob_t: local_rank={} and local_size={}: give both or set both to -1", oob.local_rank,
        oob.local_size);
  }
  ZRT_RETURN_IF_ERROR(
      check_rank_layout("zrt_oob_t", oob.rank, oob.size, oob.local_rank, oob.local_size));
  if (timeout_ms <= 0) {
    return Status::invalid_argument("out-of-band bootstrap: timeout {} ms must be > 0", timeout_ms);
  }
  auto created = std::make_unique<OobBootstrap>(oob, timeout_ms);
  ZRT_RETURN_IF_ERROR(created->init());
  *bootstrap = std::move(created);
  return Status::ok();
}

}  // namespace zrt
