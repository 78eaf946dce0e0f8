// Training driver for the checkpoint tests: the partition tests' MLP (plus one frozen
// parameter, to carry frozen state through checkpoints), trained step by step through the C API
// so a run can stop, save, and resume in another rank group at another N and stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/partition/partition_test_model.h"
#include "zrt/zrt.h"

namespace zrt::testing {

struct CkptModel {
  MlpShape shape;
  size_t frozen_numel = 37;  // 0: no frozen parameter
};

struct CkptConfig {
  int stage = 2;
  zrt_dtype_t param_dtype = ZRT_F32;
  size_t bucket_bytes = 256;
  size_t persistence_threshold = 0;
  int hpz_group_size = 0;  // stage 3 hpZ's secondary group (0: off)
};

// A communicator from the harness's file OOB (ZRT_TEST_RUN_DIR); null after a test failure.
zrt_comm_t ckpt_make_comm(int rank, int size);

struct CkptRun {
  zrt_partition_t pm = nullptr;
  std::vector<int> ids;  // MLP tensors in order (weight, bias per layer)
  int frozen_id = -1;
};

// Creates, registers, finalizes and loads the initial values (mlp_init(7), frozen ramp).
bool ckpt_create(zrt_comm_t comm, const CkptModel& model, const CkptConfig& config, CkptRun* run);
// Trains steps [first, first + count) on this rank's share of each batch.
bool ckpt_train(zrt_comm_t comm, const CkptModel& model, const CkptConfig& config,
                const CkptRun& run, int first, int count);
// The full MLP parameters as f32 (fetching every unit), and the frozen values as f32.
bool ckpt_read(const CkptModel& model, const CkptConfig& config, const CkptRun& run,
               MlpParams* params, std::vector<float>* frozen);
std::vector<float> ckpt_frozen_init(size_t numel);

// Files.
std::string ckpt_temp_dir();  // a fresh folder under /tmp, for a whole test
void ckpt_remove_tree(const std::string& dir);
std::vector<std::string> ckpt_list(const std::string& dir);
std::string ckpt_read_file(const std::string& path);
void ckpt_write_file(const std::string& path, const std::string& bytes);
void ckpt_copy_dir(const std::string& from, const std::string& to);

}  // namespace zrt::testing
