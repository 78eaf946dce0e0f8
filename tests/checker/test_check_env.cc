// How the checker is switched on: ZRT_CHECK=1/0, the build-type default, bad values; and the
// fingerprint's description and comparison (single process).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "collectives/order_check.h"
#include "engine/engine.h"

namespace zrt {
namespace {

TEST(CheckOrderSetting, EnvironmentAndBuildDefault) {
  int resolved = -1;
  ASSERT_EQ(setenv("ZRT_CHECK", "1", 1), 0);
  ASSERT_TRUE(resolve_check_order(-1, &resolved).is_ok());
  EXPECT_EQ(resolved, 1);
  ASSERT_EQ(setenv("ZRT_CHECK", "0", 1), 0);
  ASSERT_TRUE(resolve_check_order(-1, &resolved).is_ok());
  EXPECT_EQ(resolved, 0);
  // An explicit option wins over the environment.
  ASSERT_TRUE(resolve_check_order(1, &resolved).is_ok());
  EXPECT_EQ(resolved, 1);
  ASSERT_EQ(setenv("ZRT_CHECK", "yes", 1), 0);
  Status status = resolve_check_order(-1, &resolved);
  EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(status.message().find("ZRT_CHECK='yes'"), std::string::npos) << status.message();
  ASSERT_EQ(unsetenv("ZRT_CHECK"), 0);
  ASSERT_TRUE(resolve_check_order(-1, &resolved).is_ok());
#ifdef NDEBUG
  EXPECT_EQ(resolved, 0);
#else
  EXPECT_EQ(resolved, 1);
#endif
  EXPECT_EQ(resolve_check_order(2, &resolved).code(), ZRT_INVALID_ARGUMENT);
}

TEST(Fingerprint, DescribesAndComparesTheCall) {
  CollectiveArgs args;
  args.kind = ZRT_COLL_REDUCE;
  args.count = 3 << 18;
  args.dtype = ZRT_BF16;
  args.op = ZRT_MAX;
  args.root = 2;
  args.purpose = Purpose::kBucket;
  args.purpose_id = 4;
  const OrderFingerprint a = make_fingerprint(args);
  EXPECT_EQ(describe_fingerprint(a), "reduce(bucket 4, 786432 x bf16 = 1.5 MiB, max, root 2)");
  args.premul = true;
  EXPECT_FALSE(fingerprints_match(a, make_fingerprint(args)));
  args.premul = false;
  args.premul_scale = 0.5;  // ignored without premul, and the scalar may differ per rank anyway
  EXPECT_TRUE(fingerprints_match(a, make_fingerprint(args)));
  args.purpose_id = 5;
  EXPECT_FALSE(fingerprints_match(a, make_fingerprint(args)));

  CollectiveArgs gather;
  gather.kind = ZRT_COLL_ALL_GATHER;
  gather.count = 10;
  gather.op = ZRT_MIN;  // not a reducing kind: the op and root do not count
  gather.root = 3;
  CollectiveArgs other = gather;
  other.op = ZRT_SUM;
  other.root = 0;
  EXPECT_TRUE(fingerprints_match(make_fingerprint(gather), make_fingerprint(other)));
  EXPECT_EQ(describe_fingerprint(make_fingerprint(gather)), "all_gather(10 x f32 = 40 B)");

  CollectiveArgs barrier;
  barrier.kind = ZRT_COLL_BARRIER;
  barrier.purpose = Purpose::kInternal;
  EXPECT_EQ(describe_fingerprint(make_fingerprint(barrier)), "barrier(internal)");
}

}  // namespace
}  // namespace zrt
