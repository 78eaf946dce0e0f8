// Sharded checkpoints on real ranks over UCX: resharding (save at N=4 stage 3, resume at N=3
// stage 2, N=1 stage 0 and N=2 stage 1, matching an uninterrupted run), failures that must leave
// the state untouched, crash leftovers that must not matter, and the consolidated export.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zero/checkpoint/checkpoint_reader.h"
#include "zero/checkpoint/safetensors.h"
#include "tests/checkpoint/checkpoint_test_driver.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

namespace zrt::testing {
namespace {

void finish(zrt_comm_t comm, CkptRun* run) {
  if (run->pm != nullptr) {
    EXPECT_EQ(zrt_partition_destroy(run->pm), ZRT_SUCCESS) << zrt_last_error();
  }
  run->pm = nullptr;
  if (comm != nullptr) {
    EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS) << zrt_last_error();
  }
}

// Trains `steps` steps at (N, config) and saves into dir.
void train_and_save(int n, const CkptModel& model, const CkptConfig& config, int steps,
                    const std::string& dir) {
  expect_ranks_pass(n, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptRun run;
    if (ckpt_create(comm, model, config, &run) && ckpt_train(comm, model, config, run, 0, steps)) {
      EXPECT_EQ(zrt_partition_save(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
    }
    finish(comm, &run);
  });
}

TEST(CheckpointMultirank, SavedAtN4Stage3ResumesAtOtherNAndStagesLikeAnUninterruptedRun) {
  const std::string root = ckpt_temp_dir();
  const std::string dir = root + "/ckpt";
  const CkptModel model;
  const int saved_at = 3, more = 3;
  const MlpParams reference = train_reference(model.shape, saved_at + more);
  CkptConfig saving;
  saving.stage = 3;
  saving.persistence_threshold = 20;  // biases stay gathered, weights are sharded per unit
  train_and_save(4, model, saving, saved_at, dir);
  ASSERT_FALSE(::testing::Test::HasFailure());

  struct Resume {
    int n, stage;
    size_t bucket_bytes;
  };
  for (const Resume r : {Resume{3, 2, 512}, Resume{1, 0, 256}, Resume{2, 1, 100000}}) {
    SCOPED_TRACE(::testing::Message() << "resume at N " << r.n << " stage " << r.stage);
    expect_ranks_pass(r.n, [&](int rank, int size) {
      zrt_comm_t comm = ckpt_make_comm(rank, size);
      if (comm == nullptr) return;
      CkptConfig config;
      config.stage = r.stage;
      config.bucket_bytes = r.bucket_bytes;
      CkptRun run;
      if (ckpt_create(comm, model, config, &run)) {
        ASSERT_EQ(zrt_partition_load(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
        int64_t step = -1;
        EXPECT_EQ(zrt_partition_get_step(run.pm, &step), ZRT_SUCCESS);
        EXPECT_EQ(step, saved_at);
        if (ckpt_train(comm, model, config, run, saved_at, more)) {
          MlpParams got;
          std::vector<float> frozen;
          if (ckpt_read(model, config, run, &got, &frozen)) {
            EXPECT_LE(max_relative_difference(got, reference), 1e-5);
            EXPECT_EQ(frozen, ckpt_frozen_init(model.frozen_numel));
          }
        }
      }
      finish(comm, &run);
    });
  }
  ckpt_remove_tree(root);
}

// hpZ keeps the flat stage 3 shard, so its checkpoints are flat stage 3's: saved with a secondary
// copy in groups of two and resumed with one, the run ends bit-equal to an uninterrupted one (the
// load marks the secondary copy stale, so the resumed forward gathers over all ranks first).
TEST(CheckpointMultirank, HpzSavesAndResumesLikeAnUninterruptedRunN4) {
  const std::string root = ckpt_temp_dir();
  const std::string dir = root + "/ckpt";
  const CkptModel model;
  const int saved_at = 2, more = 2;
  CkptConfig config;
  config.stage = 3;
  config.persistence_threshold = 20;
  config.hpz_group_size = 2;
  train_and_save(4, model, config, saved_at, dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  expect_ranks_pass(4, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptRun uninterrupted, resumed;
    MlpParams want, got;
    std::vector<float> frozen;
    if (ckpt_create(comm, model, config, &uninterrupted) &&
        ckpt_train(comm, model, config, uninterrupted, 0, saved_at + more)) {
      EXPECT_TRUE(ckpt_read(model, config, uninterrupted, &want, &frozen));
    }
    if (uninterrupted.pm != nullptr) {
      EXPECT_EQ(zrt_partition_destroy(uninterrupted.pm), ZRT_SUCCESS) << zrt_last_error();
    }
    if (ckpt_create(comm, model, config, &resumed)) {
      ASSERT_EQ(zrt_partition_load(resumed.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
      if (ckpt_train(comm, model, config, resumed, saved_at, more) &&
          ckpt_read(model, config, resumed, &got, &frozen)) {
        EXPECT_EQ(max_relative_difference(got, want), 0.0);
        EXPECT_EQ(frozen, ckpt_frozen_init(model.frozen_numel));
      }
    }
    finish(comm, &resumed);
  });
  ckpt_remove_tree(root);
}

// Damaged copies of a good checkpoint, each loaded into a manager that has trained one step:
// every load must fail with a message naming the file (and parameter), and the manager must go
// on exactly as if nothing had been attempted.
TEST(CheckpointMultirank, DamagedCheckpointsFailClearlyAndLeaveTheStateUntouched) {
  const std::string root = ckpt_temp_dir();
  const std::string good = root + "/good";
  const CkptModel model;
  CkptConfig config;
  config.stage = 2;
  train_and_save(2, model, config, 2, good);
  ASSERT_FALSE(::testing::Test::HasFailure());

  std::string shard0, shard1;
  for (const std::string& name : ckpt_list(good)) {
    if (name.find("-r00000-") != std::string::npos) shard0 = name;
    if (name.find("-r00001-") != std::string::npos) shard1 = name;
  }
  ASSERT_FALSE(shard0.empty() || shard1.empty());
  struct Damage {
    std::string name;
    std::vector<std::string> expect;  // substrings of the message
  };
  std::vector<Damage> damages;
  auto copy = [&](const std::string& name) {
    ckpt_copy_dir(good, root + "/" + name);
    return root + "/" + name;
  };
  {
    const std::string d = copy("corrupted");
    std::string bytes = ckpt_read_file(d + "/" + shard1);
    bytes[bytes.size() / 3] ^= 0x40;
    ckpt_write_file(d + "/" + shard1, bytes);
    damages.push_back({"corrupted", {"corrupted", shard1, "parameter \""}});
  }
  {
    const std::string d = copy("truncated");
    const std::string bytes = ckpt_read_file(d + "/" + shard0);
    ckpt_write_file(d + "/" + shard0, bytes.substr(0, bytes.size() - 100));
    damages.push_back({"truncated", {"truncated", shard0, "parameter \"", "past its end"}});
  }
  {
    const std::string d = copy("missing");
    ::unlink((d + "/" + shard1).c_str());
    damages.push_back({"missing", {"missing", shard1, "parameter \""}});
  }
  {
    const std::string d = copy("version");
    nlohmann::json j = nlohmann::json::parse(ckpt_read_file(d + "/manifest.json"));
    j["version"] = 2;
    ckpt_write_file(d + "/manifest.json", j.dump());
    damages.push_back({"version", {"unknown format version 2", "manifest.json"}});
  }
  {
    const std::string d = copy("model");
    nlohmann::json j = nlohmann::json::parse(ckpt_read_file(d + "/manifest.json"));
    j["params"][3]["name"] = "renamed";
    ckpt_write_file(d + "/manifest.json", j.dump());
    damages.push_back({"model", {"different model", "parameter #3", "\"renamed\""}});
  }
  {
    const std::string d = copy("manifest-torn");
    const std::string text = ckpt_read_file(d + "/manifest.json");
    ckpt_write_file(d + "/manifest.json", text.substr(0, text.size() / 2));
    damages.push_back({"manifest-torn", {"manifest.json", "not valid JSON"}});
  }
  damages.push_back({"absent", {"no checkpoint in", "absent"}});

  const MlpParams after2 = train_reference(model.shape, 2);
  const MlpParams after3 = train_reference(model.shape, 3);
  expect_ranks_pass(2, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptConfig here;
    here.stage = 3;
    CkptRun run;
    if (ckpt_create(comm, model, here, &run) && ckpt_train(comm, model, here, run, 0, 1)) {
      MlpParams before, now;
      std::vector<float> frozen_before, frozen_now;
      ASSERT_TRUE(ckpt_read(model, here, run, &before, &frozen_before));
      for (const Damage& damage : damages) {
        SCOPED_TRACE(damage.name);
        const std::string dir = root + "/" + damage.name;
        const zrt_status_t status = zrt_partition_load(run.pm, dir.c_str());
        EXPECT_EQ(status, ZRT_INVALID_ARGUMENT);
        const std::string message = zrt_last_error();
        for (const std::string& part : damage.expect) {
          EXPECT_NE(message.find(part), std::string::npos)
              << "\"" << part << "\" not in: " << message;
        }
        int64_t step = -1;
        EXPECT_EQ(zrt_partition_get_step(run.pm, &step), ZRT_SUCCESS);
        EXPECT_EQ(step, 1);
        ASSERT_TRUE(ckpt_read(model, here, run, &now, &frozen_now));
        EXPECT_EQ(max_relative_difference(now, before), 0.0);
        EXPECT_EQ(frozen_now, frozen_before);
      }
      // Master and optimizer state untouched: the next step is the uninterrupted run's.
      if (ckpt_train(comm, model, here, run, 1, 1)) {
        ASSERT_TRUE(ckpt_read(model, here, run, &now, &frozen_now));
        EXPECT_LE(max_relative_difference(now, after2), 1e-5);
      }
      // And the good checkpoint still loads over it.
      ASSERT_EQ(zrt_partition_load(run.pm, good.c_str()), ZRT_SUCCESS) << zrt_last_error();
      if (ckpt_train(comm, model, here, run, 2, 1)) {
        ASSERT_TRUE(ckpt_read(model, here, run, &now, &frozen_now));
        EXPECT_LE(max_relative_difference(now, after3), 1e-5);
      }
    }
    finish(comm, &run);
  });
  ckpt_remove_tree(root);
}

// What a save interrupted at any point leaves behind (its temporaries, shard files of the new
// tag, a torn manifest temporary) must not stop the previous checkpoint from loading; the next
// successful save replaces it and removes every leftover.
TEST(CheckpointMultirank, LeftoversOfAnInterruptedSaveDoNotMatter) {
  const std::string root = ckpt_temp_dir();
  const std::string dir = root + "/ckpt";
  const CkptModel model;
  CkptConfig config;
  config.stage = 1;
  train_and_save(2, model, config, 2, dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<std::string> stray = {
      "shard-00000003-0000deadbeef-r00000-of-00002.bin",
      "shard-00000003-0000deadbeef-r00001-of-00002.bin.tmp.4242",
      "manifest.json.tmp.4242",
  };
  for (const std::string& name : stray) ckpt_write_file(dir + "/" + name, "{\"torn\": ");
  const std::vector<std::string> first_files = ckpt_list(dir);

  const MlpParams after3 = train_reference(model.shape, 3);
  expect_ranks_pass(2, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptRun run;
    if (ckpt_create(comm, model, config, &run)) {
      ASSERT_EQ(zrt_partition_load(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
      if (ckpt_train(comm, model, config, run, 2, 1)) {
        EXPECT_EQ(zrt_partition_save(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
      }
    }
    finish(comm, &run);
  });
  const std::vector<std::string> files = ckpt_list(dir);
  EXPECT_EQ(files.size(), 3u);  // manifest + two shards of the new save
  for (const std::string& name : files) {
    for (const std::string& old : first_files) {
      if (old != "manifest.json") {
        EXPECT_NE(name, old) << "left over: " << name;
      }
    }
  }
  expect_ranks_pass(3, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptConfig three;
    three.stage = 3;
    CkptRun run;
    if (ckpt_create(comm, model, three, &run)) {
      ASSERT_EQ(zrt_partition_load(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
      int64_t step = -1;
      EXPECT_EQ(zrt_partition_get_step(run.pm, &step), ZRT_SUCCESS);
      EXPECT_EQ(step, 3);
      MlpParams got;
      std::vector<float> frozen;
      if (ckpt_read(model, three, run, &got, &frozen)) {
        EXPECT_LE(max_relative_difference(got, after3), 1e-5);
      }
    }
    finish(comm, &run);
  });
  ckpt_remove_tree(root);
}

// Reads tensor `index` of a safetensors file as raw bytes.
std::string tensor_bytes(const std::string& bytes, const SafetensorsFile& file, size_t index) {
  const SafetensorsTensor& t = file.tensors[index];
  return bytes.substr(file.data_start + t.begin, t.end - t.begin);
}

// The consolidated file holds exactly the parameters (bitwise, in the param dtype), whatever
// stage and N wrote it, and the offline conversion of the checkpoint gives the same file.
TEST(CheckpointMultirank, ExportFullMatchesTheParametersAndTheOfflineConversion) {
  const std::string root = ckpt_temp_dir();
  const CkptModel model;
  for (const zrt_dtype_t dtype : {ZRT_F32, ZRT_BF16}) {
    SCOPED_TRACE(dtype == ZRT_F32 ? "f32" : "bf16");
    const std::string dir = root + "/ckpt";
    const std::string exported = root + "/export.safetensors";
    const std::string params_dump = root + "/params.bin";
    CkptConfig config;
    config.stage = 3;
    config.param_dtype = dtype;
    expect_ranks_pass(3, [&](int rank, int size) {
      zrt_comm_t comm = ckpt_make_comm(rank, size);
      if (comm == nullptr) return;
      CkptRun run;
      if (ckpt_create(comm, model, config, &run) && ckpt_train(comm, model, config, run, 0, 2)) {
        EXPECT_EQ(zrt_partition_save(run.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(zrt_partition_export_full(run.pm, exported.c_str(), dtype), ZRT_SUCCESS)
            << zrt_last_error();
        EXPECT_EQ(zrt_partition_export_full(run.pm, exported.c_str(), ZRT_I32),
                  ZRT_INVALID_ARGUMENT);
        MlpParams got;
        std::vector<float> frozen;
        if (ckpt_read(model, config, run, &got, &frozen) && rank == 0) {
          std::string dump;
          for (const auto& t : got.tensors) {
            dump.append(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(float));
          }
          dump.append(reinterpret_cast<const char*>(frozen.data()), frozen.size() * sizeof(float));
          ckpt_write_file(params_dump, dump);
        }
      }
      finish(comm, &run);
    });
    ASSERT_FALSE(::testing::Test::HasFailure());
    const std::string bytes = ckpt_read_file(exported);
    SafetensorsFile file;
    ASSERT_TRUE(safetensors_parse(bytes, exported, &file).is_ok());
    ASSERT_EQ(file.tensors.size(), 9u);  // 4 layers x (weight, bias) + frozen
    EXPECT_EQ(file.tensors[0].name, "layer0.weight");
    EXPECT_EQ(file.metadata["zrt_step"], "2");
    // Every tensor, widened to f32, equals what param_data showed (bf16 widening is exact).
    const std::string dump = ckpt_read_file(params_dump);
    size_t at = 0;
    for (size_t i = 0; i < file.tensors.size(); ++i) {
      const std::string raw = tensor_bytes(bytes, file, i);
      std::vector<float> wide(file.tensors[i].numel);
      for (size_t e = 0; e < wide.size(); ++e) {
        if (dtype == ZRT_F32) {
          std::memcpy(&wide[e], raw.data() + 4 * e, 4);
        } else {
          uint32_t bits = 0;
          std::memcpy(reinterpret_cast<char*>(&bits) + 2, raw.data() + 2 * e, 2);
          std::memcpy(&wide[e], &bits, 4);
        }
      }
      EXPECT_EQ(std::memcmp(wide.data(), dump.data() + at, wide.size() * 4), 0)
          << file.tensors[i].name;
      at += wide.size() * 4;
    }
    // zrt-ckpt's conversion of the checkpoint gives the same bytes.
    const std::string converted = root + "/converted.safetensors";
    const Status status = consolidate_checkpoint(dir, converted, dtype);
    ASSERT_TRUE(status.is_ok()) << status.message();
    EXPECT_TRUE(ckpt_read_file(converted) == bytes);
    ckpt_remove_tree(dir);
  }
  ckpt_remove_tree(root);
}

TEST(CheckpointMultirank, CallsOutsideAStepBoundaryAreRefusedOnEveryRank) {
  const std::string root = ckpt_temp_dir();
  const CkptModel model;
  expect_ranks_pass(2, [&](int rank, int size) {
    zrt_comm_t comm = ckpt_make_comm(rank, size);
    if (comm == nullptr) return;
    CkptConfig config;
    config.stage = 3;
    CkptRun run;
    if (ckpt_create(comm, model, config, &run)) {
      const std::string dir = root + "/never";
      EXPECT_EQ(zrt_partition_save(run.pm, nullptr), ZRT_INVALID_ARGUMENT);
      EXPECT_EQ(zrt_partition_save(nullptr, dir.c_str()), ZRT_INVALID_ARGUMENT);
      // Only rank 1 still holds a unit: both ranks must refuse, with the same message.
      ASSERT_EQ(zrt_partition_fetch(run.pm, 3), ZRT_SUCCESS) << zrt_last_error();
      if (rank == 0) {
        ASSERT_EQ(zrt_partition_release(run.pm, 3), ZRT_SUCCESS);
      }
      EXPECT_EQ(zrt_partition_save(run.pm, dir.c_str()), ZRT_INVALID_USAGE);
      const std::string message = zrt_last_error();
      EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
      EXPECT_NE(message.find("fetched"), std::string::npos) << message;
      if (rank == 1) {
        ASSERT_EQ(zrt_partition_release(run.pm, 3), ZRT_SUCCESS);
      }
    }
    finish(comm, &run);
  });
  // A refused save writes nothing.
  EXPECT_TRUE(ckpt_list(root + "/never").empty());
  ckpt_remove_tree(root);
}

}  // namespace
}  // namespace zrt::testing
