#include "tests/harness/file_bootstrap.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

namespace zrt::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string record_path(const std::string& dir, const std::string& name, uint64_t round, int rank) {
  return fmt::format("{}/{}.{}.{}", dir, name, round, rank);
}

Status write_record(const std::string& path, const void* data, size_t bytes) {
  const std::string temporary = fmt::format("{}.tmp{}", path, getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return Status::system_error("file bootstrap: open " + temporary, errno);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) return Status::system_error("file bootstrap: write " + temporary, errno);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return Status::system_error("file bootstrap: rename to " + path, errno);
  }
  return Status::ok();
}

// Reads `path` into out if it exists with exactly `bytes` bytes; *found says whether it did.
Status try_read_record(const std::string& path, void* out, size_t bytes, bool* found) {
  *found = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::ok();
  in.seekg(0, std::ios::end);
  const auto length = static_cast<size_t>(in.tellg());
  if (length != bytes) {
    return Status::invalid_usage("file bootstrap: {} holds {} bytes, expected {}", path, length,
                                 bytes);
  }
  in.seekg(0);
  in.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  *found = true;
  return Status::ok();
}

// One all-gather round in flight: which peers' records have been read so far.
struct Round {
  std::string dir, name;
  uint64_t round = 0;
  int size = 0;
  size_t bytes = 0;
  char* output = nullptr;
  std::vector<bool> have;
  Clock::time_point deadline;

  // ok when complete, ZRT_IN_PROGRESS while waiting, else the failure.
  Status poll() {
    bool all = true;
    for (int peer = 0; peer < size; ++peer) {
      if (have[peer]) continue;
      bool found = false;
      ZRT_RETURN_IF_ERROR(try_read_record(record_path(dir, name, round, peer),
                                          output + peer * bytes, bytes, &found));
      have[peer] = found;
      all = all && found;
    }
    if (all) return Status::ok();
    if (Clock::now() > deadline) {
      std::string missing;
      for (int peer = 0; peer < size; ++peer) {
        if (!have[peer]) missing += (missing.empty() ? "" : ", ") + std::to_string(peer);
      }
      return Status::error(ZRT_TIMEOUT, "file bootstrap '{}' round {}: ranks {} did not arrive",
                           name, round, missing);
    }
    return Status(ZRT_IN_PROGRESS, "waiting");
  }
};

Status start_round(const std::string& dir, const std::string& name, uint64_t round, int rank,
                   int size, const void* input, void* output, size_t bytes, int64_t timeout_ms,
                   std::unique_ptr<Round>* out) {
  ZRT_RETURN_IF_ERROR(write_record(record_path(dir, name, round, rank), input, bytes));
  auto state = std::make_unique<Round>();
  state->dir = dir;
  state->name = name;
  state->round = round;
  state->size = size;
  state->bytes = bytes;
  state->output = static_cast<char*>(output);
  state->have.assign(size, false);
  state->deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  *out = std::move(state);
  return Status::ok();
}

class FileBootstrap final : public Bootstrap {
 public:
  FileBootstrap(std::string dir, std::string name, int rank, int size, int64_t timeout_ms)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        rank_(rank),
        size_(size),
        timeout_ms_(timeout_ms) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return rank_; }
  int local_size() const override { return size_; }

  Status allgather(const void* input, void* output, size_t bytes) override {
    std::unique_ptr<Round> round;
    ZRT_RETURN_IF_ERROR(start_round(dir_, name_, round_++, rank_, size_, input, output, bytes,
                                    timeout_ms_, &round));
    for (;;) {
      Status status = round->poll();
      if (status.code() != ZRT_IN_PROGRESS) return status;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  Status barrier() override {
    const char token = 1;
    std::vector<char> all(size_);
    return allgather(&token, all.data(), 1);
  }

 private:
  std::string dir_;
  std::string name_;
  int rank_;
  int size_;
  int64_t timeout_ms_;
  uint64_t round_ = 0;
};

zrt_status_t oob_allgather(const void* sendbuf, void* recvbuf, size_t bytes, void* user_data,
                           void** request) {
  return static_cast<FileOob*>(user_data)->start(sendbuf, recvbuf, bytes, request);
}

zrt_status_t oob_test(void* request) {
  Status status = static_cast<Round*>(request)->poll();
  if (status.code() == ZRT_IN_PROGRESS) {
    // zrt polls test() in a loop; sleeping here keeps the waiting rank off the shared cores.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } else if (!status.is_ok()) {
    fmt::print(stderr, "file oob: {}\n", status.message());
  }
  return status.code();
}

void oob_free(void* request) {
  delete static_cast<Round*>(request);
}

}  // namespace

Status create_file_bootstrap(const std::string& dir, const std::string& name, int rank, int size,
                             int64_t timeout_ms, std::unique_ptr<Bootstrap>* bootstrap) {
  if (dir.empty()) return Status::invalid_argument("file bootstrap: dir is empty");
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::invalid_argument("file bootstrap: rank {} of size {}", rank, size);
  }
  *bootstrap = std::make_unique<FileBootstrap>(dir, name, rank, size, timeout_ms);
  return Status::ok();
}

FileOob::FileOob(std::string dir, std::string name, int rank, int size, int64_t timeout_ms)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms) {
  oob_.allgather = oob_allgather;
  oob_.test = oob_test;
  oob_.free = oob_free;
  oob_.user_data = this;
  oob_.rank = rank;
  oob_.size = size;
  oob_.local_rank = -1;
  oob_.local_size = -1;
}

zrt_status_t FileOob::start(const void* sendbuf, void* recvbuf, size_t bytes, void** request) {
  std::unique_ptr<Round> round;
  Status status = start_round(dir_, name_, round_++, rank_, size_, sendbuf, recvbuf, bytes,
                              timeout_ms_, &round);
  if (!status.is_ok()) {
    fmt::print(stderr, "file oob: {}\n", status.message());
    return status.code();
  }
  *request = round.release();
  return ZRT_SUCCESS;
}

Status file_barrier(const std::string& dir, const std::string& name, int rank, int size,
                    int64_t timeout_ms) {
  std::unique_ptr<Bootstrap> bootstrap;
  ZRT_RETURN_IF_ERROR(create_file_bootstrap(dir, name, rank, size, timeout_ms, &bootstrap));
  return bootstrap->barrier();
}

}  // namespace zrt::testing
