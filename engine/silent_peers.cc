#include "engine/silent_peers.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include <fmt/format.h>

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

// Enough to name every rank of a host or two; past it the message says how many more.
constexpr size_t kMaxNamed = 8;

double seconds(Clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

}  // namespace

std::chrono::milliseconds beacon_interval(int64_t timeout_ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms / 8, 10, 1000));
}

std::chrono::milliseconds silence_threshold(int64_t timeout_ms) {
  return std::max(std::chrono::milliseconds(timeout_ms / 2), 4 * beacon_interval(timeout_ms));
}

std::string describe_silent_peers(const std::vector<Clock::time_point>& last_heard,
                                  Clock::time_point now, int self,
                                  std::chrono::milliseconds threshold,
                                  const std::vector<std::string>& host_names) {
  struct Peer {
    int rank;
    Clock::duration silence;
  };
  std::vector<Peer> silent;
  Clock::duration loudest_quiet{0};  // the longest silence among the peers still heard from
  for (int rank = 0; rank < static_cast<int>(last_heard.size()); ++rank) {
    if (rank == self) continue;
    const Clock::duration silence = now - last_heard[static_cast<size_t>(rank)];
    if (silence >= threshold) {
      silent.push_back({rank, silence});
    } else {
      loudest_quiet = std::max(loudest_quiet, silence);
    }
  }
  if (silent.empty()) return "";
  std::stable_sort(silent.begin(), silent.end(),
                   [](const Peer& a, const Peer& b) { return a.silence > b.silence; });
  const bool named_hosts = host_names.size() == last_heard.size();
  // The longest silent first, grouped by host in that order, ranks ascending within a host:
  // "ranks 2, 3 (host b)". Without names, one group.
  const size_t named = std::min(silent.size(), kMaxNamed);
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t i = 0; i < named; ++i) {
    const int rank = silent[i].rank;
    const std::string host = named_hosts ? host_names[static_cast<size_t>(rank)] : "";
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& entry) { return entry.first == host; });
    if (group == groups.end()) {
      groups.emplace_back(host, std::vector<int>{});
      group = groups.end() - 1;
    }
    group->second.push_back(rank);
  }
  std::string who;
  for (auto& [host, ranks] : groups) {
    std::sort(ranks.begin(), ranks.end());
    if (!who.empty()) who += ", ";
    who += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) {
      who += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
    }
    if (named_hosts) who += fmt::format(" (host {})", host);
  }
  if (silent.size() > named) who += fmt::format(" and {} more", silent.size() - named);
  const bool one = silent.size() == 1;
  const std::string others = silent.size() + 1 == last_heard.size()
                                 ? ""
                                 : fmt::format("; every other rank was heard from within {:.1f} s",
                                               seconds(loudest_quiet));
  return fmt::format("no traffic from {} for {:.1f} s ({} died, {} unreachable or stopped{})", who,
                     seconds(silent.back().silence), one ? "it" : "they", one ? "is" : "are",
                     others);
}

}  // namespace zrt
