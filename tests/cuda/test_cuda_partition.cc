// The partition manager on ZRT_MEM_CUDA: without a usable device zrt_partition_create says why
// (runs everywhere, also in builds without CUDA/NCCL, where the reason is the build); with one,
// a step of every stage on device memory ends with the same parameters as the host manager
// (skips, with the runtime's reason, without a GPU).
#include <gtest/gtest.h>
#if defined(ZRT_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include <algorithm>
#include <string>
#include <vector>

#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace {

using zrt::testing::expect_ranks_pass;

// Empty when a CUDA device is usable; else why not (the C API's message).
std::string cuda_unusable_reason() {
  int count = 0;
  return zrt_cuda_device_count(&count) == ZRT_SUCCESS ? std::string() : zrt_last_error();
}

#if defined(ZRT_HAVE_CUDA)
constexpr size_t kNumel = 1000;

float initial(size_t i) {
  return static_cast<float>(int(i % 37) - 18) * 0.125f;
}
float gradient(size_t i) {
  return static_cast<float>(int(i % 11) - 5) * 0.5f;
}

// master -= 0.25 * grad, on host copies: the same arithmetic whatever the memory kind.
struct SgdContext {
  bool device = false;
};

zrt_status_t sgd(const zrt_optimizer_args_t* args, void* user_data) {
  const bool device = static_cast<SgdContext*>(user_data)->device;
  std::vector<float> master(args->count), grad(args->count);
  if (device) {
    if (cudaMemcpy(master.data(), args->master, args->count * 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        cudaMemcpy(grad.data(), args->grad, args->count * 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess) {
      return ZRT_INTERNAL_ERROR;
    }
  } else {
    master.assign(args->master, args->master + args->count);
    grad.assign(args->grad, args->grad + args->count);
  }
  for (size_t i = 0; i < args->count; ++i) master[i] -= 0.25f * grad[i];
  if (device) {
    if (cudaMemcpy(args->master, master.data(), args->count * 4, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      return ZRT_INTERNAL_ERROR;
    }
  } else {
    std::copy(master.begin(), master.end(), args->master);
  }
  return ZRT_SUCCESS;
}

void copy_in(bool device, void* dst, const float* src, size_t count) {
  if (device) {
    ASSERT_EQ(cudaMemcpy(dst, src, count * 4, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    std::copy(src, src + count, static_cast<float*>(dst));
  }
}

// One micro-batch and one step; returns the parameters afterwards, on the host.
// offload: master and state in pinned host memory, so the callback gets host pointers.
std::vector<float> train_once(zrt_comm_t comm, int stage, zrt_mem_kind_t kind,
                              bool offload = false) {
  const bool device = kind == ZRT_MEM_CUDA;
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.offload_optimizer = offload ? 1 : 0;
  config.mem_kind = kind;
  config.persistence_threshold = 0;
  config.optimizer_slots = 0;
  zrt_partition_t pm = nullptr;
  EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  if (pm == nullptr) return {};
  int unit = -1, param = -1;
  EXPECT_EQ(zrt_partition_add_unit(pm, "u", &unit), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_add_param(pm, unit, "w", kNumel, 0, &param), ZRT_SUCCESS);
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  std::vector<float> values(kNumel), grads(kNumel), out(kNumel);
  for (size_t i = 0; i < kNumel; ++i) values[i] = initial(i), grads[i] = gradient(i);
  void* staged = nullptr;
  if (device) {
    EXPECT_EQ(cudaMalloc(&staged, kNumel * 4), cudaSuccess);
    copy_in(true, staged, values.data(), kNumel);
  }
  EXPECT_EQ(zrt_partition_load_param(pm, param, device ? staged : values.data(), ZRT_F32),
            ZRT_SUCCESS)
      << zrt_last_error();
  EXPECT_EQ(zrt_partition_fetch(pm, unit), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_release(pm, unit), ZRT_SUCCESS) << zrt_last_error();
  if (device && offload) {
    // The optimizer during backward is host memory's: refused here, naming the step that
    // overlaps on a device.
    SgdContext unused{false};
    EXPECT_EQ(zrt_partition_step_in_backward(pm, sgd, &unused), ZRT_UNSUPPORTED);
    EXPECT_NE(std::string(zrt_last_error()).find("call zrt_partition_step alone"),
              std::string::npos)
        << zrt_last_error();
  }
  void* grad = nullptr;
  EXPECT_EQ(zrt_partition_grad_data(pm, param, &grad), ZRT_SUCCESS) << zrt_last_error();
  copy_in(device, grad, grads.data(), kNumel);
  EXPECT_EQ(zrt_partition_grad_ready(pm, unit), ZRT_SUCCESS) << zrt_last_error();
  SgdContext context{device && !offload};
  EXPECT_EQ(zrt_partition_step(pm, sgd, &context), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_fetch(pm, unit), ZRT_SUCCESS) << zrt_last_error();
  void* data = nullptr;
  EXPECT_EQ(zrt_partition_param_data(pm, param, &data), ZRT_SUCCESS) << zrt_last_error();
  if (device) {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), data, kNumel * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(staged);
  } else {
    std::copy(static_cast<float*>(data), static_cast<float*>(data) + kNumel, out.begin());
  }
  EXPECT_EQ(zrt_partition_release(pm, unit), ZRT_SUCCESS) << zrt_last_error();
  EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
  return out;
}

#endif  // ZRT_HAVE_CUDA

TEST(CudaPartition, CreateWithoutDeviceSaysWhy) {
  const std::string reason = cuda_unusable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is usable here";
  expect_ranks_pass(1, [](int, int) {
    zrt_comm_t comm = nullptr;
    ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
    zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
    config.mem_kind = ZRT_MEM_CUDA;
    zrt_partition_t pm = nullptr;
    EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_UNSUPPORTED);
    const std::string why = zrt_last_error();
    EXPECT_NE(why.find("ZRT_MEM_CUDA"), std::string::npos) << why;
    EXPECT_TRUE(why.find("no usable CUDA device") != std::string::npos ||
                why.find("built without NCCL") != std::string::npos)
        << why;
    EXPECT_EQ(pm, nullptr);
    // The communicator is still usable on the host.
    config.mem_kind = ZRT_MEM_HOST;
    ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(zrt_comm_get_error(comm), ZRT_SUCCESS) << zrt_last_error();
    EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  });
}

#if defined(ZRT_HAVE_CUDA)
void every_stage_matches_the_host(int, int) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  for (int stage = 0; stage <= 3; ++stage) {
    const std::vector<float> host = train_once(comm, stage, ZRT_MEM_HOST);
    const std::vector<float> cuda = train_once(comm, stage, ZRT_MEM_CUDA);
    ASSERT_EQ(host.size(), kNumel);
    ASSERT_EQ(cuda.size(), kNumel);
    for (size_t i = 0; i < kNumel; ++i) {
      ASSERT_EQ(host[i], cuda[i]) << "stage " << stage << " element " << i;
      ASSERT_EQ(host[i], initial(i) - 0.25f * gradient(i)) << "stage " << stage;
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(CudaPartition, EveryStageMatchesTheHostAtOneRank) {
  const std::string reason = cuda_unusable_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  expect_ranks_pass(1, every_stage_matches_the_host);
}

// Ranks hold equal gradients, so the averaged ones are those of one rank: same parameters.
TEST(CudaPartition, EveryStageMatchesTheHostAtTwoRanks) {
  const std::string reason = cuda_unusable_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  int count = 0;
  ASSERT_EQ(zrt_cuda_device_count(&count), ZRT_SUCCESS) << zrt_last_error();
  if (count < 2) GTEST_SKIP() << "needs two CUDA devices, " << count << " usable";
  expect_ranks_pass(2, every_stage_matches_the_host);
}

// offload_optimizer on device parameters: pinned host master and state, copies on zrt's own
// stream, the same parameters as the host manager.
void offload_matches_the_host(int, int) {
  zrt_comm_t comm = nullptr;
  ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
  for (int stage = 1; stage <= 3; ++stage) {
    const std::vector<float> host = train_once(comm, stage, ZRT_MEM_HOST);
    const std::vector<float> cuda = train_once(comm, stage, ZRT_MEM_CUDA, /*offload=*/true);
    ASSERT_EQ(cuda.size(), kNumel);
    for (size_t i = 0; i < kNumel; ++i) {
      ASSERT_EQ(host[i], cuda[i]) << "stage " << stage << " element " << i;
    }
  }
  EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
}

TEST(CudaPartition, OffloadedOptimizerMatchesTheHostAtOneRank) {
  const std::string reason = cuda_unusable_reason();
  if (!reason.empty()) GTEST_SKIP() << reason;
  expect_ranks_pass(1, offload_matches_the_host);
}

#endif  // ZRT_HAVE_CUDA

}  // namespace
