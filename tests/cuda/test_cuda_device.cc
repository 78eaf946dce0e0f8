// Device tests (skipped, with the runtime's reason, where no GPU is usable): the CUDA kernels
// against the host kernels of kernels/reduce, the device arena, and a one-rank NCCL
// communicator running every collective kind on device memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/reduce/reduce_kernels.h"
#include "lib/core/dtype.h"
#include "tests/cuda/cuda_test_util.h"
#include "device/cuda_status.h"
#include "device/device_arena.h"
#include "device/device_kernels.h"
#include "device/nccl_comm.h"

namespace zrt {
namespace {

// A device buffer for the length of a test.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes_ == 0 ? 1 : bytes_), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  template <typename T>
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  template <typename T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

std::vector<float> random_floats(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ZRT_SKIP_WITHOUT_CUDA();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaDevice, ConvertMatchesHostBitForBit) {
  const size_t count = 100003;
  std::vector<float> values = random_floats(count, 1, 70000.0f);  // beyond f16's range too
  for (size_t i = 0; i < 1000; ++i) values[i] *= 1e-6f;           // f16 subnormals
  DeviceBuffer in(count * 4);
  DeviceBuffer out(count * 4);
  DeviceBuffer back(count * 4);
  in.upload(values);
  for (zrt_dtype_t narrow : {ZRT_F16, ZRT_BF16}) {
    ASSERT_TRUE(device_convert(ZRT_F32, in.get(), narrow, out.get(), count, stream_).is_ok());
    ASSERT_TRUE(device_convert(narrow, out.get(), ZRT_F32, back.get(), count, stream_).is_ok());
    sync();
    std::vector<uint16_t> device_narrow = out.download<uint16_t>(count);
    std::vector<float> device_back = back.download<float>(count);
    std::vector<uint16_t> host_narrow(count);
    std::vector<float> host_back(count);
    convert_elements(ZRT_F32, values.data(), narrow, host_narrow.data(), count);
    convert_elements(narrow, host_narrow.data(), ZRT_F32, host_back.data(), count);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(device_narrow[i], host_narrow[i]) << dtype_name(narrow) << " at " << i;
      ASSERT_EQ(std::memcmp(&device_back[i], &host_back[i], 4), 0) << i;
    }
  }
}

TEST_F(CudaDevice, AccumulateMatchesHost) {
  const size_t count = 65537;
  const double scale = 0.125;
  std::vector<float> acc = random_floats(count, 2, 4.0f);
  std::vector<float> grad = random_floats(count, 3, 4.0f);
  for (zrt_dtype_t grad_dtype : {ZRT_F32, ZRT_F16, ZRT_BF16}) {
    std::vector<char> grad_typed(count * dtype_size(grad_dtype));
    convert_elements(ZRT_F32, grad.data(), grad_dtype, grad_typed.data(), count);
    std::vector<float> grad_wide(count);
    convert_elements(grad_dtype, grad_typed.data(), ZRT_F32, grad_wide.data(), count);
    std::vector<float> expected(count);
    reduce_elements(ZRT_F32, ReduceOp::kSum, acc.data(), grad_wide.data(), expected.data(), count,
                    1.0, scale);

    DeviceBuffer d_acc(count * 4);
    DeviceBuffer d_grad(grad_typed.size());
    d_acc.upload(acc);
    d_grad.upload(grad_typed);
    ASSERT_TRUE(
        device_accumulate(ZRT_F32, d_acc.get(), grad_dtype, d_grad.get(), count, scale, stream_)
            .is_ok());
    sync();
    std::vector<float> got = d_acc.download<float>(count);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(got[i], expected[i], 1e-6f * (1.0f + std::fabs(expected[i])))
          << dtype_name(grad_dtype) << " at " << i;
    }
  }
}

TEST_F(CudaDevice, SumSquaresMatchesHostAndSeesNonFinite) {
  const size_t count = (size_t{1} << 20) + 17;
  std::vector<float> values = random_floats(count, 4, 3.0f);
  DeviceBuffer in(count * 4);
  DeviceBuffer workspace(device_sum_squares_workspace_bytes());
  DeviceBuffer result(16);
  in.upload(values);
  double* d_sum = static_cast<double*>(result.get());
  int* d_flag = reinterpret_cast<int*>(static_cast<char*>(result.get()) + 8);
  ASSERT_TRUE(device_sum_squares_nonfinite(ZRT_F32, in.get(), count, workspace.get(), d_sum, d_flag,
                                           stream_)
                  .is_ok());
  sync();
  double host_sum = 0;
  bool host_nonfinite = true;
  sum_squares_and_nonfinite(ZRT_F32, values.data(), count, &host_sum, &host_nonfinite);
  std::vector<char> raw = result.download<char>(16);
  double device_sum;
  int device_flag;
  std::memcpy(&device_sum, raw.data(), 8);
  std::memcpy(&device_flag, raw.data() + 8, 4);
  EXPECT_NEAR(device_sum, host_sum, 1e-12 * host_sum);
  EXPECT_FALSE(host_nonfinite);
  EXPECT_EQ(device_flag, 0);

  // Run to run identical (fixed reduction order).
  ASSERT_TRUE(device_sum_squares_nonfinite(ZRT_F32, in.get(), count, workspace.get(), d_sum, d_flag,
                                           stream_)
                  .is_ok());
  sync();
  std::vector<char> again = result.download<char>(16);
  EXPECT_EQ(std::memcmp(raw.data(), again.data(), 8), 0);

  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    values[count / 2] = bad;
    in.upload(values);
    ASSERT_TRUE(device_sum_squares_nonfinite(ZRT_F32, in.get(), count, workspace.get(), d_sum,
                                             d_flag, stream_)
                    .is_ok());
    sync();
    std::vector<char> flagged = result.download<char>(16);
    std::memcpy(&device_flag, flagged.data() + 8, 4);
    EXPECT_EQ(device_flag, 1) << bad;
  }
}

TEST_F(CudaDevice, CopySpansPacksAndUnpacks) {
  // 40 spans (two launches) of odd sizes and offsets, some 16-byte aligned, some not.
  const size_t spans = 40;
  std::vector<size_t> sizes(spans);
  size_t total = 0;
  for (size_t i = 0; i < spans; ++i) {
    sizes[i] = (i % 3 == 0) ? 4096 * (i + 1) : 13 * i + 1;
    total += sizes[i];
  }
  std::vector<uint8_t> source(total + 64 * spans);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 131 + 7);
  DeviceBuffer scattered(source.size());
  DeviceBuffer packed(total);
  DeviceBuffer restored(source.size());
  scattered.upload(source);
  ASSERT_EQ(cudaMemset(restored.get(), 0, source.size()), cudaSuccess);
  std::vector<DeviceCopySpan> pack(spans);
  std::vector<DeviceCopySpan> unpack(spans);
  size_t src_offset = 0;
  size_t dst_offset = 0;
  for (size_t i = 0; i < spans; ++i) {
    const char* base = static_cast<const char*>(scattered.get());
    pack[i] = {base + src_offset, static_cast<char*>(packed.get()) + dst_offset, sizes[i]};
    unpack[i] = {static_cast<const char*>(packed.get()) + dst_offset,
                 static_cast<char*>(restored.get()) + src_offset, sizes[i]};
    src_offset += sizes[i] + (i % 2 == 0 ? 64 : 3);
    dst_offset += sizes[i];
  }
  ASSERT_TRUE(device_copy_spans(pack.data(), spans, stream_).is_ok());
  ASSERT_TRUE(device_copy_spans(unpack.data(), spans, stream_).is_ok());
  sync();
  std::vector<uint8_t> got = restored.download<uint8_t>(source.size());
  src_offset = 0;
  for (size_t i = 0; i < spans; ++i) {
    ASSERT_EQ(std::memcmp(got.data() + src_offset, source.data() + src_offset, sizes[i]), 0)
        << "span " << i;
    src_offset += sizes[i] + (i % 2 == 0 ? 64 : 3);
  }
}

TEST_F(CudaDevice, ArenaHandsOutAlignedMemoryOnce) {
  for (auto source : {DeviceArena::Source::kCudaMalloc, DeviceArena::Source::kNcclMemAlloc}) {
    std::unique_ptr<DeviceArena> arena;
    ASSERT_TRUE(DeviceArena::create(0, 1 << 20, source, &arena).is_ok());
    void* a = nullptr;
    void* b = nullptr;
    ASSERT_TRUE(arena->allocate(100, 256, &a).is_ok());
    ASSERT_TRUE(arena->allocate(1000, 4096, &b).is_ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
    EXPECT_GE(static_cast<char*>(b), static_cast<char*>(a) + 100);
    void* too_big = nullptr;
    Status full = arena->allocate(1 << 20, 256, &too_big);
    EXPECT_EQ(full.code(), ZRT_OUT_OF_MEMORY);
    EXPECT_EQ(too_big, nullptr);
    EXPECT_EQ(arena->allocate(8, 3, &too_big).code(), ZRT_INVALID_ARGUMENT);
    arena->reset();
    void* again = nullptr;
    ASSERT_TRUE(arena->allocate(1 << 20, 256, &again).is_ok());
    EXPECT_EQ(again, arena->base());
    // Zero-filled once at creation.
    std::vector<char> bytes(4096);
    ASSERT_EQ(cudaMemcpy(bytes.data(), arena->base(), 4096, cudaMemcpyDeviceToHost), cudaSuccess);
    for (char c : bytes) ASSERT_EQ(c, 0);
  }
}

TEST_F(CudaDevice, SingleRankNcclCollectives) {
  NcclUniqueIdBytes id{};
  ASSERT_TRUE(nccl_unique_id(&id).is_ok());
  NcclCommOptions options;
  options.timeout_ms = 30000;
  options.name = "test";
  std::unique_ptr<NcclComm> comm;
  Status init = NcclComm::init(id, options, &comm);
  ASSERT_TRUE(init.is_ok()) << init.message();
  const size_t count = 4099;
  std::vector<float> values = random_floats(count, 5, 10.0f);
  DeviceBuffer send(count * 4);
  DeviceBuffer recv(count * 4);
  DeviceBuffer scratch(256);
  send.upload(values);

  auto run = [&](CollectiveArgs args) {
    Status status = comm->enqueue(&args, 1, stream_, scratch.get());
    ASSERT_TRUE(status.is_ok()) << coll_kind_name(args.kind) << ": " << status.message();
    sync();
  };
  CollectiveArgs args;
  args.sendbuf = send.get();
  args.recvbuf = recv.get();
  args.count = count;
  for (zrt_op_t op : {ZRT_SUM, ZRT_AVG, ZRT_MAX}) {
    args.kind = ZRT_COLL_ALL_REDUCE;
    args.op = op;
    run(args);
    EXPECT_EQ(recv.download<float>(count), values) << op_name(op);  // one rank: identity
  }
  args.op = ZRT_SUM;
  args.premul = true;
  args.premul_scale = 0.5;
  run(args);
  std::vector<float> halved = recv.download<float>(count);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(halved[i], values[i] * 0.5f) << i;
  args.premul = false;
  for (zrt_coll_kind_t kind : {ZRT_COLL_REDUCE_SCATTER, ZRT_COLL_ALL_GATHER, ZRT_COLL_BROADCAST,
                               ZRT_COLL_REDUCE, ZRT_COLL_BARRIER}) {
    ASSERT_EQ(cudaMemset(recv.get(), 0, count * 4), cudaSuccess);
    args.kind = kind;
    run(args);
    if (kind != ZRT_COLL_BARRIER) {
      EXPECT_EQ(recv.download<float>(count), values) << kind;
    }
  }
  // A batch of two is one NCCL group.
  CollectiveArgs batch[2] = {args, args};
  batch[0].kind = ZRT_COLL_ALL_REDUCE;
  batch[1].kind = ZRT_COLL_BARRIER;
  ASSERT_TRUE(comm->enqueue(batch, 2, stream_, scratch.get()).is_ok());
  sync();
  // avg of an integer dtype is refused without hurting the communicator.
  args.kind = ZRT_COLL_ALL_REDUCE;
  args.dtype = ZRT_I32;
  args.op = ZRT_AVG;
  EXPECT_EQ(comm->enqueue(&args, 1, stream_, scratch.get()).code(), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(comm->health().is_ok());
  Status destroyed = comm->destroy();
  EXPECT_TRUE(destroyed.is_ok()) << destroyed.message();
}

}  // namespace
}  // namespace zrt
