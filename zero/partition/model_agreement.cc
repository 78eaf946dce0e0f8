#include "zero/partition/model_agreement.h"

#include <algorithm>
#include <cstring>

#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"

namespace zrt {
namespace {

void mix(uint64_t* h, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    *h ^= (value >> (8 * i)) & 0xff;
    *h *= 0x100000001b3ull;
  }
}

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t d = 0; d < dims.size(); ++d) text += fmt::format("{}{}", d ? ", " : "", dims[d]);
  return text + "]";
}

std::string entry_name(int64_t index) {
  return index == 0 ? std::string("the number of units and parameters")
                    : fmt::format("param {}", index - 1);
}

std::string describe_entry(const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params,
                           int64_t index) {
  if (index == 0) return fmt::format("{} units and {} parameters", units.size(), params.size());
  const size_t p = static_cast<size_t>(index - 1);
  if (p >= params.size()) return fmt::format("no param {} ({} parameters)", p, params.size());
  return describe_param(units, params, p);
}

}  // namespace

std::vector<uint64_t> model_entry_digests(const std::vector<UnitSpec>& units,
                                          const std::vector<ParamSpec>& params) {
  std::vector<uint64_t> digests;
  digests.reserve(1 + params.size());
  uint64_t counts = 0xcbf29ce484222325ull;
  mix(&counts, units.size());
  mix(&counts, params.size());
  digests.push_back(counts);
  for (const ParamSpec& spec : params) {
    uint64_t h = 0xcbf29ce484222325ull;
    mix(&h, spec.numel);
    mix(&h, static_cast<uint64_t>(spec.unit));
    mix(&h, spec.flags);
    mix(&h, static_cast<uint64_t>(spec.dtype));
    mix(&h, spec.dims.size());
    for (int64_t d : spec.dims) mix(&h, static_cast<uint64_t>(d));
    digests.push_back(h);
  }
  return digests;
}

uint64_t model_digest(const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t d : model_entry_digests(units, params)) mix(&h, d);
  return h;
}

std::string describe_param(const std::vector<UnitSpec>& units, const std::vector<ParamSpec>& params,
                           size_t p) {
  const ParamSpec& spec = params[p];
  const std::string unit_name = spec.unit >= 0 && static_cast<size_t>(spec.unit) < units.size()
                                    ? units[static_cast<size_t>(spec.unit)].name
                                    : std::string("?");
  return fmt::format("param {} \"{}\" of unit {} \"{}\": numel {}, shape {}, {}, flags {:#x}", p,
                     spec.name, spec.unit, unit_name, spec.numel, shape_text(spec.dims),
                     dtype_name(spec.dtype), spec.flags);
}

Status explain_model_mismatch(Communicator& comm, const std::vector<UnitSpec>& units,
                              const std::vector<ParamSpec>& params,
                              const std::string& model_differs) {
  const size_t size = static_cast<size_t>(comm.size());
  const char* what = "finding where the ranks' registered models differ";
  const std::vector<uint64_t> mine = model_entry_digests(units, params);
  // Rank 0's digests, to every rank: the length first, then the list.
  std::vector<uint64_t> lengths(size, 0);
  const uint64_t my_length = mine.size();
  ZRT_RETURN_IF_ERROR(comm.gather_internal(&my_length, lengths.data(), sizeof(uint64_t), what));
  std::vector<uint64_t> reference = comm.rank() == 0 ? mine : std::vector<uint64_t>(lengths[0]);
  CollectiveArgs args;
  args.kind = ZRT_COLL_BROADCAST;
  args.sendbuf = reference.data();
  args.recvbuf = reference.data();
  args.count = reference.size() * sizeof(uint64_t);
  args.dtype = ZRT_U8;
  args.root = 0;
  ZRT_RETURN_IF_ERROR(comm.run_internal(args, what));
  // Each rank's first departure from rank 0, then everyone's description of the earliest one.
  int64_t first = -1;
  for (size_t i = 0; i < std::max(mine.size(), reference.size()); ++i) {
    if (i >= mine.size() || i >= reference.size() || mine[i] != reference[i]) {
      first = static_cast<int64_t>(i);
      break;
    }
  }
  std::vector<int64_t> firsts(size, -1);
  ZRT_RETURN_IF_ERROR(comm.gather_internal(&first, firsts.data(), sizeof(int64_t), what));
  int64_t at = -1;
  for (int64_t f : firsts) {
    if (f >= 0 && (at < 0 || f < at)) at = f;
  }
  if (at < 0) {
    // Same parameters, but a different layout (which only the configuration changes).
    return Status::invalid_usage(
        "ranks registered models that lay out differently: ranks{} differ from rank 0",
        model_differs);
  }
  constexpr size_t kSlot = 512;
  std::vector<char> own(kSlot, 0), slots(kSlot * size, 0);
  const std::string description = describe_entry(units, params, at);
  std::memcpy(own.data(), description.data(), std::min(description.size(), kSlot - 1));
  ZRT_RETURN_IF_ERROR(comm.gather_internal(own.data(), slots.data(), kSlot, what));
  auto slot_text = [&](size_t r) {
    const char* slot = slots.data() + r * kSlot;
    return std::string(slot, strnlen(slot, kSlot));
  };
  std::string message = fmt::format(
      "ranks registered different models (ranks{} differ from rank 0): {} differs; "
      "rank 0 has {}",
      model_differs, entry_name(at), slot_text(0));
  for (size_t r = 1; r < size; ++r) {
    if (firsts[r] == at) {
      message += fmt::format("; rank {} has {}", r, slot_text(r));
    } else if (firsts[r] > at) {
      message += fmt::format("; rank {} differs from {} on", r, entry_name(firsts[r]));
    }
  }
  return Status::invalid_usage(
      "{} (register the same units and parameters, in the same order, "
      "on every rank)",
      message);
}

}  // namespace zrt
