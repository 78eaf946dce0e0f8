// Which peers went silent: what a no-progress timeout names as its likely cause.
//
// A rank that times out usually waits on a neighbour that waits on another, and the rank it
// names as waited for (Task::waiting_on) is the first link of that chain, often on its own host.
// The chain's end is the rank whose traffic stopped (dead, unreachable behind a link that went
// down, or stuck), and that one is silent towards every rank: each engine sends every peer a
// beacon at least every beacon_interval() (peer_beacons.h) and the transport records when each
// peer was last heard from (Transport::last_heard), so live peers are heard from within an
// interval and silent ones not for about the timeout. Pure functions; any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace zrt {

// How often a rank sends every peer a beacon: an eighth of the timeout, 10 ms to 1 s.
std::chrono::milliseconds beacon_interval(int64_t timeout_ms);

// A peer not heard from this long is silent: half the timeout, and at least four intervals.
std::chrono::milliseconds silence_threshold(int64_t timeout_ms);

// "no traffic from ranks 2, 3 (host b) for 3.1 s (they died, are unreachable or stopped; every
// other rank was heard from within 0.2 s)", longest silent first, grouped by host when
// `host_names` has one name per rank; "" when no peer was silent for `threshold`. last_heard
// has one entry per rank (this rank's is ignored).
std::string describe_silent_peers(
    const std::vector<std::chrono::steady_clock::time_point>& last_heard,
    std::chrono::steady_clock::time_point now, int self, std::chrono::milliseconds threshold,
    const std::vector<std::string>& host_names);

}  // namespace zrt
