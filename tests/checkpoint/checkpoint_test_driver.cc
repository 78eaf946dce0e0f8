#include "tests/checkpoint/checkpoint_test_driver.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "tests/harness/file_bootstrap.h"

namespace zrt::testing {

#define CKPT_OK(call)                                                                             \
  do {                                                                                            \
    const zrt_status_t status_ = (call);                                                          \
    if (status_ != ZRT_SUCCESS) {                                                                 \
      ADD_FAILURE() << #call << " -> " << zrt_status_string(status_) << ": " << zrt_last_error(); \
      return false;                                                                               \
    }                                                                                             \
  } while (0)

zrt_comm_t ckpt_make_comm(int rank, int size) {
  const char* dir = std::getenv("ZRT_TEST_RUN_DIR");
  if (dir == nullptr) {
    ADD_FAILURE() << "ZRT_TEST_RUN_DIR is not set";
    return nullptr;
  }
  // The OOB is only used inside zrt_comm_init_oob; it may go when this returns.
  FileOob oob(dir, "ckpt", rank, size);
  zrt_comm_t comm = nullptr;
  const zrt_status_t status = zrt_comm_init_oob(&oob.oob(), nullptr, &comm);
  EXPECT_EQ(status, ZRT_SUCCESS) << zrt_last_error();
  return comm;
}

std::vector<float> ckpt_frozen_init(size_t numel) {
  std::vector<float> values(numel);
  for (size_t i = 0; i < numel; ++i) values[i] = 0.25f * static_cast<float>(i) - 3.0f;
  return values;
}

bool ckpt_create(zrt_comm_t comm, const CkptModel& model, const CkptConfig& c, CkptRun* run) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = c.stage;
  config.param_dtype = c.param_dtype;
  config.bucket_bytes = c.bucket_bytes;
  config.persistence_threshold = c.persistence_threshold;
  config.hpz_group_size = c.hpz_group_size;
  config.alignment = 4;
  CKPT_OK(zrt_partition_create(comm, &config, &run->pm));
  const MlpParams init = mlp_init(model.shape, 7);
  const size_t layers = model.shape.dims.size() - 1;
  run->ids.clear();
  for (size_t l = 0; l < layers; ++l) {
    int unit = -1, w = -1, b = -1;
    const std::string name = "layer" + std::to_string(l);
    CKPT_OK(zrt_partition_add_unit(run->pm, name.c_str(), &unit));
    CKPT_OK(zrt_partition_add_param(run->pm, unit, "weight", init.tensors[2 * l].size(), 0, &w));
    CKPT_OK(zrt_partition_add_param(run->pm, unit, "bias", init.tensors[2 * l + 1].size(), 0, &b));
    run->ids.push_back(w);
    run->ids.push_back(b);
  }
  if (model.frozen_numel > 0) {
    int unit = -1;
    CKPT_OK(zrt_partition_add_unit(run->pm, "table", &unit));
    CKPT_OK(zrt_partition_add_param(run->pm, unit, "frozen", model.frozen_numel, ZRT_PARAM_FROZEN,
                                    &run->frozen_id));
  }
  CKPT_OK(zrt_partition_finalize(run->pm));
  for (size_t t = 0; t < run->ids.size(); ++t) {
    CKPT_OK(zrt_partition_load_param(run->pm, run->ids[t], init.tensors[t].data(), ZRT_F32));
  }
  if (run->frozen_id >= 0) {
    const std::vector<float> frozen = ckpt_frozen_init(model.frozen_numel);
    CKPT_OK(zrt_partition_load_param(run->pm, run->frozen_id, frozen.data(), ZRT_F32));
  }
  return true;
}

namespace {

bool to_f32(zrt_dtype_t dtype, const void* data, size_t n, float* out) {
  if (dtype == ZRT_F32) {
    std::memcpy(out, data, n * sizeof(float));
    return true;
  }
  if (dtype != ZRT_BF16) {
    ADD_FAILURE() << "test driver reads f32 or bf16 parameters only";
    return false;
  }
  const uint16_t* in = static_cast<const uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(float));
  }
  return true;
}

bool read_unit(const CkptRun& run, zrt_dtype_t dtype, size_t l, MlpParams* params) {
  for (size_t k = 2 * l; k < 2 * l + 2; ++k) {
    void* data = nullptr;
    CKPT_OK(zrt_partition_param_data(run.pm, run.ids[k], &data));
    if (!to_f32(dtype, data, params->tensors[k].size(), params->tensors[k].data())) return false;
  }
  return true;
}

// bf16 by round-to-nearest-even, as zrt converts.
void write_grad(zrt_dtype_t dtype, const std::vector<float>& grad, void* out) {
  if (dtype == ZRT_F32) {
    std::memcpy(out, grad.data(), grad.size() * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < grad.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &grad[i], sizeof(bits));
    bits += 0x7fffu + ((bits >> 16) & 1u);
    dst[i] = static_cast<uint16_t>(bits >> 16);
  }
}

}  // namespace

bool ckpt_train(zrt_comm_t comm, const CkptModel& model, const CkptConfig& config,
                const CkptRun& run, int first, int count) {
  int rank = 0, size = 1;
  CKPT_OK(zrt_comm_rank(comm, &rank));
  CKPT_OK(zrt_comm_size(comm, &size));
  const MlpShape& shape = model.shape;
  const size_t layers = shape.dims.size() - 1;
  const int rows = shape.batch / size;
  MlpParams params = mlp_init(shape, 7);  // shapes; values come from zrt
  AdamConfig adam;
  for (int s = first; s < first + count; ++s) {
    std::vector<float> x, y;
    mlp_data(shape, s, &x, &y);
    for (size_t l = 0; l < layers; ++l) {
      CKPT_OK(zrt_partition_fetch(run.pm, static_cast<int>(l)));
      if (!read_unit(run, config.param_dtype, l, &params)) return false;
      CKPT_OK(zrt_partition_release(run.pm, static_cast<int>(l)));
    }
    MlpParams grads;
    mlp_forward_backward(shape, params, x.data() + rank * rows * shape.dims.front(),
                         y.data() + rank * rows * shape.dims.back(), rows, 1.0f, &grads);
    for (size_t l = layers; l-- > 0;) {
      CKPT_OK(zrt_partition_fetch(run.pm, static_cast<int>(l)));
      for (size_t k = 2 * l; k < 2 * l + 2; ++k) {
        void* grad = nullptr;
        CKPT_OK(zrt_partition_grad_data(run.pm, run.ids[k], &grad));
        write_grad(config.param_dtype, grads.tensors[k], grad);
      }
      CKPT_OK(zrt_partition_grad_ready(run.pm, static_cast<int>(l)));
      CKPT_OK(zrt_partition_release(run.pm, static_cast<int>(l)));
    }
    CKPT_OK(zrt_partition_step(run.pm, adam_callback, &adam));
  }
  return true;
}

bool ckpt_read(const CkptModel& model, const CkptConfig& config, const CkptRun& run,
               MlpParams* params, std::vector<float>* frozen) {
  *params = mlp_init(model.shape, 7);
  const size_t layers = model.shape.dims.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    CKPT_OK(zrt_partition_fetch(run.pm, static_cast<int>(l)));
    if (!read_unit(run, config.param_dtype, l, params)) return false;
    CKPT_OK(zrt_partition_release(run.pm, static_cast<int>(l)));
  }
  frozen->clear();
  if (run.frozen_id >= 0) {
    void* data = nullptr;
    CKPT_OK(zrt_partition_param_data(run.pm, run.frozen_id, &data));
    frozen->resize(model.frozen_numel);
    if (!to_f32(config.param_dtype, data, frozen->size(), frozen->data())) return false;
  }
  return true;
}

std::string ckpt_temp_dir() {
  char pattern[] = "/tmp/zrt-ckpt-test-XXXXXX";
  const char* made = ::mkdtemp(pattern);
  EXPECT_NE(made, nullptr) << std::strerror(errno);
  return made != nullptr ? made : "/tmp";
}

void ckpt_remove_tree(const std::string& dir) {
  for (const std::string& name : ckpt_list(dir)) {
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      ckpt_remove_tree(path);
    } else {
      ::unlink(path.c_str());
    }
  }
  ::rmdir(dir.c_str());
}

std::vector<std::string> ckpt_list(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

std::string ckpt_read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void ckpt_write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  EXPECT_TRUE(out.good()) << "writing " << path;
}

void ckpt_copy_dir(const std::string& from, const std::string& to) {
  ::mkdir(to.c_str(), 0755);
  for (const std::string& name : ckpt_list(from)) {
    ckpt_write_file(to + "/" + name, ckpt_read_file(from + "/" + name));
  }
}

}  // namespace zrt::testing
