#include "engine/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "lib/core/dtype.h"
#include "lib/core/tick_clock.h"
#include "zrt/zrt.h"

namespace zrt {

struct FlightRecorder::Slot {
  std::atomic<uint64_t> id{0};  // the ticket of the record it holds, 0 = empty
  std::atomic<const char*> call{nullptr};
  std::atomic<uint64_t> count{0};
  std::atomic<int32_t> kind{-1};
  std::atomic<int32_t> dtype{-1};
  std::atomic<int32_t> op{-1};
  std::atomic<int32_t> root{-1};
  std::atomic<int32_t> peer{-1};
  std::atomic<int32_t> purpose{0};
  std::atomic<int32_t> purpose_id{-1};
  std::atomic<int32_t> stream{-1};
  std::atomic<bool> partition{false};
  std::atomic<bool> has_sequence{false};
  std::atomic<uint32_t> sequence{0};
  std::atomic<uint8_t> state{0};
  std::atomic<int64_t> posted_ns{0};
  std::atomic<int64_t> started_ns{0};
  std::atomic<int64_t> done_ns{0};
};

const char* trace_state_name(TraceState state) {
  switch (state) {
    case TraceState::kPosted:
      return "posted";
    case TraceState::kStarted:
      return "started";
    case TraceState::kDone:
      return "done";
    case TraceState::kFailed:
      return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(size_t depth)
    : depth_(std::min<size_t>(depth, UINT32_MAX)),
      depth_magic_(depth_ > 0 ? UINT64_MAX / depth_ + 1 : 0),
      slots_(depth_ > 0 ? std::make_unique<Slot[]>(depth_) : nullptr) {}

FlightRecorder::~FlightRecorder() = default;

int64_t FlightRecorder::now_ns() {
  return TickClock::steady_ns();
}

size_t FlightRecorder::slot_index(uint64_t ticket) const {
  __extension__ using Wide = unsigned __int128;  // GCC's and Clang's; the multiply's high half
  const auto low = static_cast<uint32_t>(ticket - 1);
  return static_cast<size_t>((static_cast<Wide>(depth_magic_ * low) * depth_) >> 64);
}

FlightRecorder::Slot* FlightRecorder::slot_for(uint64_t ticket) const {
  if (ticket == 0 || depth_ == 0) return nullptr;
  Slot& slot = slots_[slot_index(ticket)];
  return slot.id.load(std::memory_order_acquire) == ticket ? &slot : nullptr;
}

uint64_t FlightRecorder::post(const TraceCall& call, int64_t at_ns) {
  if (depth_ == 0) return 0;
  const uint64_t ticket = next_.fetch_add(1, std::memory_order_relaxed) + 1;
  Slot& slot = slots_[slot_index(ticket)];
  constexpr auto r = std::memory_order_relaxed;
  slot.id.store(0, r);  // a reader skips it while it changes
  slot.call.store(call.call, r);
  slot.count.store(call.count, r);
  slot.kind.store(call.kind, r);
  slot.dtype.store(call.dtype, r);
  slot.op.store(call.op, r);
  slot.root.store(call.root, r);
  slot.peer.store(call.peer, r);
  slot.purpose.store(call.purpose, r);
  slot.purpose_id.store(call.purpose_id, r);
  slot.stream.store(call.stream, r);
  slot.partition.store(call.partition, r);
  slot.has_sequence.store(false, r);
  slot.sequence.store(0, r);
  slot.state.store(static_cast<uint8_t>(TraceState::kPosted), r);
  slot.posted_ns.store(at_ns, r);
  slot.started_ns.store(0, r);
  slot.done_ns.store(0, r);
  slot.id.store(ticket, std::memory_order_release);
  return ticket;
}

void FlightRecorder::started(uint64_t ticket, uint32_t sequence, int64_t at_ns) {
  Slot* slot = slot_for(ticket);
  if (slot == nullptr) return;
  slot->sequence.store(sequence, std::memory_order_relaxed);
  slot->has_sequence.store(true, std::memory_order_relaxed);
  slot->started_ns.store(at_ns, std::memory_order_relaxed);
  slot->state.store(static_cast<uint8_t>(TraceState::kStarted), std::memory_order_relaxed);
}

void FlightRecorder::finished(uint64_t ticket, bool ok, int64_t at_ns) {
  Slot* slot = slot_for(ticket);
  if (slot == nullptr) return;
  slot->done_ns.store(at_ns, std::memory_order_relaxed);
  slot->state.store(static_cast<uint8_t>(ok ? TraceState::kDone : TraceState::kFailed),
                    std::memory_order_relaxed);
}

size_t FlightRecorder::snapshot(TraceRecord* out, size_t capacity) const {
  if (depth_ == 0) return 0;
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t first = last > depth_ ? last - depth_ + 1 : 1;
  size_t filled = 0;
  constexpr auto r = std::memory_order_relaxed;
  for (uint64_t ticket = first; ticket <= last && filled < capacity; ++ticket) {
    const Slot& slot = slots_[slot_index(ticket)];
    if (slot.id.load(std::memory_order_acquire) != ticket) continue;
    TraceRecord& record = out[filled];
    record.id = ticket;
    record.call.call = slot.call.load(r);
    record.call.count = slot.count.load(r);
    record.call.kind = slot.kind.load(r);
    record.call.dtype = slot.dtype.load(r);
    record.call.op = slot.op.load(r);
    record.call.root = slot.root.load(r);
    record.call.peer = slot.peer.load(r);
    record.call.purpose = slot.purpose.load(r);
    record.call.purpose_id = slot.purpose_id.load(r);
    record.call.stream = slot.stream.load(r);
    record.call.partition = slot.partition.load(r);
    record.has_sequence = slot.has_sequence.load(r);
    record.sequence = slot.sequence.load(r);
    record.state = static_cast<TraceState>(slot.state.load(r));
    record.posted_ns = slot.posted_ns.load(r);
    record.started_ns = slot.started_ns.load(r);
    record.done_ns = slot.done_ns.load(r);
    if (slot.id.load(std::memory_order_acquire) != ticket) continue;  // overwritten meanwhile
    ++filled;
  }
  return filled;
}

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* purpose_name(int purpose) {
  switch (purpose) {
    case 1:
      return "unit";
    case 2:
      return "bucket";
    case 3:
      return "internal";
    default:
      return "";
  }
}

std::string record_line(const TraceRecord& record) {
  const TraceCall& call = record.call;
  std::string line = fmt::format("{{\"id\":{}", record.id);
  if (call.partition) {
    line += fmt::format(",\"what\":\"partition\",\"call\":{},\"unit\":{}",
                        json_string(call.call != nullptr ? call.call : "?"), call.purpose_id);
  } else {
    const bool known = call.kind >= 0 && call.kind < ZRT_COLL_KIND_COUNT;
    line += fmt::format(",\"what\":\"collective\",\"kind\":\"{}\",\"stream\":{}",
                        known ? coll_kind_name(static_cast<zrt_coll_kind_t>(call.kind)) : "?",
                        call.stream);
    if (record.has_sequence) line += fmt::format(",\"seq\":{}", record.sequence);
    line += fmt::format(",\"count\":{}", call.count);
    const auto dtype = static_cast<zrt_dtype_t>(call.dtype);
    if (call.dtype >= 0 && check_dtype(dtype, "dtype").is_ok()) {
      line += fmt::format(",\"dtype\":\"{}\",\"bytes\":{}", dtype_name(dtype),
                          call.count * dtype_size(dtype));
    }
    if (call.op == 0xff) {
      line += ",\"op\":\"premul_sum\"";
    } else if (call.op >= 0) {
      line += fmt::format(",\"op\":\"{}\"", op_name(static_cast<zrt_op_t>(call.op)));
    }
    if (call.root >= 0) line += fmt::format(",\"root\":{}", call.root);
    if (call.peer >= 0) line += fmt::format(",\"peer\":{}", call.peer);
    if (purpose_name(call.purpose)[0] != '\0') {
      line += fmt::format(",\"purpose\":\"{}\",\"purpose_id\":{}", purpose_name(call.purpose),
                          call.purpose_id);
    }
  }
  line += fmt::format(",\"state\":\"{}\",\"posted_ns\":{},\"started_ns\":{},\"done_ns\":{}}}\n",
                      trace_state_name(record.state), record.posted_ns, record.started_ns,
                      record.done_ns);
  return line;
}

}  // namespace

std::string trace_file_path(const std::string& dir, int rank, int instance) {
  return fmt::format("{}/zrt-trace-r{}-c{}.jsonl", dir.empty() ? "." : dir, rank, instance);
}

Status write_trace_file(const FlightRecorder& recorder, const TraceHeader& header,
                        const std::string& path) {
  std::vector<TraceRecord> records(recorder.depth());
  const size_t count = recorder.snapshot(records.data(), records.size());
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const int64_t wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  std::string text = fmt::format(
      "{{\"zrt_trace\":1,\"rank\":{},\"size\":{},\"instance\":{},\"host\":{},\"pid\":{},"
      "\"reason\":{},\"depth\":{},\"recorded\":{},\"steady_ns\":{},\"wall_ns\":{}}}\n",
      header.rank, header.size, header.instance, json_string(host), static_cast<long>(getpid()),
      json_string(header.reason), recorder.depth(), recorder.recorded(), FlightRecorder::now_ns(),
      wall_ns);
  for (size_t i = 0; i < count; ++i) text += record_line(records[i]);

  const std::string temporary = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::system_error(
        fmt::format("flight recorder: creating {} (is the directory there and writable?)",
                    temporary),
        errno);
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      return Status::system_error(fmt::format("flight recorder: writing {}", temporary), error);
    }
    written += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return Status::system_error(fmt::format("flight recorder: writing {}", path), error);
  }
  return Status::ok();
}

}  // namespace zrt
