// describe_silent_peers: which peers a timeout names as the ranks whose traffic stopped.
#include "engine/silent_peers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// last_heard for ranks heard from `ago_ms[rank]` ago.
std::vector<Clock::time_point> heard(Clock::time_point now, const std::vector<int>& ago_ms) {
  std::vector<Clock::time_point> result;
  for (int ago : ago_ms) result.push_back(now - milliseconds(ago));
  return result;
}

TEST(SilentPeers, NamesTheOtherHostsRanksLongestSilentFirstWithTheirHost) {
  const Clock::time_point now = Clock::now();
  const std::vector<std::string> hosts = {"a", "a", "b", "b"};
  // Rank 1 on host a: its neighbour rank 0 was heard 100 ms ago, host b's ranks 3.2 and 3.4 s.
  EXPECT_EQ(
      describe_silent_peers(heard(now, {100, 0, 3200, 3400}), now, 1, milliseconds(1500), hosts),
      "no traffic from ranks 2, 3 (host b) for 3.2 s (they died, are unreachable or "
      "stopped; every other rank was heard from within 0.1 s)");
}

TEST(SilentPeers, OneSilentRankWithoutHostNames) {
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(describe_silent_peers(heard(now, {0, 200, 5000}), now, 0, milliseconds(1500), {}),
            "no traffic from rank 2 for 5.0 s (it died, is unreachable or stopped; every other "
            "rank was heard from within 0.2 s)");
}

TEST(SilentPeers, EveryPeerSilentSaysNoMoreThanThat) {
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(describe_silent_peers(heard(now, {0, 4000, 4000}), now, 0, milliseconds(1500),
                                  {"a", "b", "c"}),
            "no traffic from rank 1 (host b), rank 2 (host c) for 4.0 s (they died, are "
            "unreachable or stopped)");
}

TEST(SilentPeers, NobodySilentIsEmpty) {
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(describe_silent_peers(heard(now, {0, 1400, 300}), now, 0, milliseconds(1500), {}), "");
  // This rank's own entry never counts.
  EXPECT_EQ(describe_silent_peers(heard(now, {9000, 100}), now, 0, milliseconds(1500), {}), "");
}

TEST(SilentPeers, ManySilentRanksAreCounted) {
  const Clock::time_point now = Clock::now();
  std::vector<int> ago(12, 6000);
  ago[0] = 0;
  const std::string text = describe_silent_peers(heard(now, ago), now, 0, milliseconds(1500), {});
  EXPECT_EQ(text.rfind("no traffic from ranks 1, 2, 3, 4, 5, 6, 7, 8 and 3 more for 6.0 s", 0), 0u)
      << text;
}

TEST(SilentPeers, IntervalAndThresholdFollowTheTimeout) {
  EXPECT_EQ(beacon_interval(60000), milliseconds(1000));
  EXPECT_EQ(beacon_interval(3000), milliseconds(375));
  EXPECT_EQ(beacon_interval(20), milliseconds(10));
  EXPECT_EQ(silence_threshold(3000), milliseconds(1500));
  EXPECT_EQ(silence_threshold(60000), milliseconds(30000));
  EXPECT_EQ(silence_threshold(20), milliseconds(40));  // four intervals at the least
}

}  // namespace
}  // namespace zrt
