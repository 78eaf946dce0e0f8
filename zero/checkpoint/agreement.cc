#include "zero/checkpoint/agreement.h"

#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "zero/comm/communicator.h"

namespace zrt {

Status exchange_reports(Communicator& comm, const Status& local, const uint64_t (&values)[3],
                        std::vector<RankReport>* all) {
  RankReport mine;
  mine.code = static_cast<int32_t>(local.code());
  std::copy(std::begin(values), std::end(values), std::begin(mine.values));
  const std::string& text = local.message();
  std::memcpy(mine.message, text.data(), std::min(text.size(), sizeof(mine.message) - 1));
  all->assign(static_cast<size_t>(comm.size()), RankReport{});
  if (comm.size() == 1) {
    (*all)[0] = mine;
    return Status::ok();
  }
  // One all-gather: internal traffic is counted apart from the training figures, so the
  // exchange needs no detour through kinds those figures ignore.
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = &mine;
  args.recvbuf = all->data();
  args.count = sizeof(RankReport);
  args.dtype = ZRT_U8;
  return comm.run_internal(args, "exchanging the checkpoint outcome of every rank");
}

Status verdict(const std::vector<RankReport>& all) {
  int failed = 0, first = -1;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].code == ZRT_SUCCESS) continue;
    if (first < 0) first = static_cast<int>(r);
    ++failed;
  }
  if (first < 0) return Status::ok();
  const RankReport& report = all[static_cast<size_t>(first)];
  std::string message(report.message, strnlen(report.message, sizeof(report.message)));
  if (all.size() > 1) {
    message = failed > 1 ? fmt::format("rank {} (and {} more): {}", first, failed - 1, message)
                         : fmt::format("rank {}: {}", first, message);
  }
  zrt_status_t code = static_cast<zrt_status_t>(report.code);
  if (code < ZRT_SUCCESS || code > ZRT_INTERNAL_ERROR) code = ZRT_INTERNAL_ERROR;
  return Status(code, message);
}

}  // namespace zrt
