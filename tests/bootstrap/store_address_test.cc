// Where rank 0 listens, and what an unreachable store is explained with.
#include <gtest/gtest.h>

#include "lib/bootstrap/store_address.h"

namespace zrt {
namespace {

TEST(StoreAddress, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));  // Debian's line for the host's own name
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.1.1"));
  EXPECT_FALSE(is_loopback_address("10.213.0.1"));
  EXPECT_FALSE(is_loopback_address("::ffff:10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fe80::1"));
  EXPECT_FALSE(is_loopback_address("not an address"));
}

TEST(StoreAddress, ANetworkAddressIsListenedOnAsItIs) {
  const ListenChoice choice = choose_listen_host("h0", {"10.213.0.1"}, false);
  EXPECT_EQ(choice.host, "h0");
  EXPECT_NE(choice.reason.find("10.213.0.1"), std::string::npos) << choice.reason;
}

TEST(StoreAddress, LoopbackStaysLoopbackWhenEveryRankIsLocal) {
  EXPECT_EQ(choose_listen_host("127.0.0.1", {"127.0.0.1"}, true).host, "127.0.0.1");
}

TEST(StoreAddress, LoopbackNameOfAWorldThatMaySpanHostsListensEverywhere) {
  const ListenChoice choice = choose_listen_host("h0", {"127.0.1.1"}, false);
  EXPECT_EQ(choice.host, "");
  EXPECT_NE(choice.reason.find("every interface"), std::string::npos) << choice.reason;
  EXPECT_NE(choice.reason.find("127.0.1.1"), std::string::npos) << choice.reason;
  EXPECT_EQ(choose_listen_host("nowhere", {}, false).host, "");
}

TEST(StoreAddress, ResolvesNumericAddresses) {
  const std::vector<std::string> addresses = resolve_addresses("127.0.0.1");
  ASSERT_EQ(addresses.size(), 1u);
  EXPECT_EQ(addresses[0], "127.0.0.1");
  EXPECT_TRUE(resolve_addresses("no-such-host.invalid").empty());
}

TEST(StoreAddress, UnreachableHintNamesTheLoopbackTrap) {
  const std::string hint = unreachable_store_hint("h0", 29501, {"127.0.1.1"}, false);
  EXPECT_NE(hint.find("resolves to loopback (127.0.1.1) on this host"), std::string::npos) << hint;
  EXPECT_NE(hint.find("set MASTER_ADDR"), std::string::npos) << hint;
  const std::string remote = unreachable_store_hint("h0", 29501, {"10.213.0.1"}, false);
  EXPECT_NE(remote.find("resolves to 10.213.0.1 here"), std::string::npos) << remote;
  EXPECT_NE(remote.find("port 29501"), std::string::npos) << remote;
}

}  // namespace
}  // namespace zrt
