#include "lib/checkpoint/agreement.h"

#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "lib/comm/communicator.h"

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
  // Gathered at rank 0 by point-to-point, then broadcast: kinds the training traffic figures
  // (reduce-scatter, all-gather, all-reduce) do not count, so a save between steps leaves them
  // exact.
  Stream& stream = comm.default_stream();
  const int rank = comm.rank(), size = comm.size();
  (*all)[static_cast<size_t>(rank)] = mine;
  auto enqueue = [&](zrt_coll_kind_t kind, void* buffer, size_t bytes, int peer) {
    CollectiveArgs args;
    args.kind = kind;
    args.sendbuf = buffer;
    args.recvbuf = buffer;
    args.count = bytes;
    args.dtype = ZRT_U8;
    args.peer = peer;
    args.root = 0;
    args.purpose = Purpose::kInternal;
    return enqueue_collective(stream, rank, size, args);
  };
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      ZRT_RETURN_IF_ERROR(
          enqueue(ZRT_COLL_RECV, &(*all)[static_cast<size_t>(r)], sizeof(RankReport), r));
    }
  } else {
    ZRT_RETURN_IF_ERROR(enqueue(ZRT_COLL_SEND, &mine, sizeof(RankReport), 0));
  }
  ZRT_RETURN_IF_ERROR(
      enqueue(ZRT_COLL_BROADCAST, all->data(), sizeof(RankReport) * static_cast<size_t>(size), -1));
  return stream.synchronize().with_context("exchanging the checkpoint outcome of every rank");
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
