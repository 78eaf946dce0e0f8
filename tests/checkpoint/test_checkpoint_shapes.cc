// Shapes in checkpoints and in the consolidated export: parameters registered with a shape are
// saved with it, a load checks it (naming the parameter), and zrt_partition_export_full writes
// real shapes that another tool loads directly (a Python check reads the header with json/struct
// and, with torch, load_state_dict(strict=True) into a module of those shapes).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zero/checkpoint/safetensors.h"
#include "tests/checkpoint/checkpoint_test_driver.h"
#include "tests/harness/multirank.h"
#include "zrt/zrt.h"

#ifndef ZRT_CKPT_SHAPES_SCRIPT
#error "ZRT_CKPT_SHAPES_SCRIPT must name check_safetensors_shapes.py"
#endif

namespace zrt::testing {
namespace {

struct Def {
  int unit;
  const char* name;
  std::vector<int64_t> dims;
  bool shaped = true;  // false: zrt_partition_add_param with the product
  size_t numel() const {
    size_t n = 1;
    for (int64_t d : dims) n *= static_cast<size_t>(d);
    return n;
  }
};

std::vector<Def> model(bool transposed = false, bool unshaped = false) {
  std::vector<Def> defs = {{0, "weight", {17, 19}},
                           {0, "bias", {17}},
                           {1, "weight", {4, 5, 6}},
                           {1, "scale", {}},
                           {1, "flat", {10}, false}};
  if (transposed) defs[0].dims = {19, 17};
  if (unshaped) {
    for (Def& d : defs) d.shaped = false;
  }
  return defs;
}

zrt_partition_t create(zrt_comm_t comm, int stage, const std::vector<Def>& defs) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  config.stage = stage;
  config.optimizer_slots = 0;
  config.persistence_threshold = 20;
  zrt_partition_t pm = nullptr;
  EXPECT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
  for (int u = 0; u < 2; ++u) {
    int unit = -1;
    EXPECT_EQ(zrt_partition_add_unit(pm, ("layer" + std::to_string(u)).c_str(), &unit),
              ZRT_SUCCESS);
  }
  for (const Def& d : defs) {
    int param = -1;
    if (d.shaped) {
      EXPECT_EQ(zrt_partition_add_param_shaped(pm, d.unit, d.name, static_cast<int>(d.dims.size()),
                                               d.dims.data(), ZRT_F32, 0, &param),
                ZRT_SUCCESS)
          << zrt_last_error();
    } else {
      EXPECT_EQ(zrt_partition_add_param(pm, d.unit, d.name, d.numel(), 0, &param), ZRT_SUCCESS);
    }
  }
  EXPECT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
  return pm;
}

zrt_status_t sgd(const zrt_optimizer_args_t* a, void*) {
  for (size_t i = 0; i < a->count; ++i) a->master[i] -= 0.5f * a->grad[i];
  return ZRT_SUCCESS;
}

// Loads distinct values and takes one step, so the saved and exported values are the trained
// ones (element i of parameter p moves to (p + 1) * 0.001 * i - 0.5 * 0.25).
void train_one_step(zrt_partition_t pm, const std::vector<Def>& defs) {
  for (size_t p = 0; p < defs.size(); ++p) {
    std::vector<float> values(defs[p].numel());
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(p + 1) * 0.001f * static_cast<float>(i);
    }
    ASSERT_EQ(zrt_partition_load_param(pm, static_cast<int>(p), values.data(), ZRT_F32),
              ZRT_SUCCESS)
        << zrt_last_error();
  }
  for (int u = 1; u >= 0; --u) {
    for (size_t p = 0; p < defs.size(); ++p) {
      if (defs[p].unit != u) continue;
      void* g = nullptr;
      ASSERT_EQ(zrt_partition_grad_data(pm, static_cast<int>(p), &g), ZRT_SUCCESS)
          << zrt_last_error();
      std::fill_n(static_cast<float*>(g), defs[p].numel(), 0.25f);
    }
    ASSERT_EQ(zrt_partition_grad_ready(pm, u), ZRT_SUCCESS) << zrt_last_error();
  }
  ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
}

TEST(CheckpointShapes, SavedExportedAndCheckedOnLoad) {
  const std::string root = ckpt_temp_dir();
  for (int stage : {1, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const std::string dir = root + "/ckpt" + std::to_string(stage);
    const std::string exported = root + "/export" + std::to_string(stage) + ".safetensors";
    expect_ranks_pass(2, [&](int rank, int size) {
      zrt_comm_t comm = ckpt_make_comm(rank, size);
      if (comm == nullptr) return;
      const std::vector<Def> defs = model();
      zrt_partition_t pm = create(comm, stage, defs);
      train_one_step(pm, defs);
      EXPECT_EQ(zrt_partition_save(pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
      EXPECT_EQ(zrt_partition_export_full(pm, exported.c_str(), ZRT_F32), ZRT_SUCCESS)
          << zrt_last_error();
      EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);

      // The same shapes load; so does a model registered without shapes (numel matches).
      for (bool unshaped : {false, true}) {
        pm = create(comm, 2, model(false, unshaped));
        EXPECT_EQ(zrt_partition_load(pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
        EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
      }
      // Another shape of the same numel is refused on every rank, naming the parameter.
      pm = create(comm, 2, model(/*transposed=*/true));
      EXPECT_EQ(zrt_partition_load(pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
      const std::string message = zrt_last_error();
      EXPECT_NE(message.find("parameter #0 \"weight\" was saved with shape [17, 19] but is "
                             "registered with shape [19, 17]"),
                std::string::npos)
          << message;
      EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
      EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
    });
    ASSERT_FALSE(::testing::Test::HasFailure());

    // The manifest records the registered shapes (none for the parameter added without one).
    const nlohmann::json manifest = nlohmann::json::parse(ckpt_read_file(dir + "/manifest.json"));
    const auto& params = manifest.at("params");
    ASSERT_EQ(params.size(), 5u);
    EXPECT_EQ(params[0].at("shape"), nlohmann::json({17, 19}));
    EXPECT_EQ(params[2].at("shape"), nlohmann::json({4, 5, 6}));
    EXPECT_EQ(params[3].at("shape"), nlohmann::json::array());
    EXPECT_FALSE(params[4].contains("shape"));

    // The export: real shapes, values as trained ([numel] for the unshaped parameter).
    const std::string bytes = ckpt_read_file(exported);
    SafetensorsFile file;
    const Status parsed = safetensors_parse(bytes, exported, &file);
    ASSERT_TRUE(parsed.is_ok()) << parsed.message();
    ASSERT_EQ(file.tensors.size(), 5u);
    const std::vector<std::vector<uint64_t>> shapes = {{17, 19}, {17}, {4, 5, 6}, {}, {10}};
    for (size_t p = 0; p < 5; ++p) {
      const SafetensorsTensor& t = file.tensors[p];
      ASSERT_TRUE(t.shape.has_value()) << t.name;
      EXPECT_EQ(*t.shape, shapes[p]) << t.name;
      std::vector<float> values(t.numel);
      std::memcpy(values.data(), bytes.data() + file.data_start + t.begin, t.end - t.begin);
      for (size_t i = 0; i < values.size(); ++i) {
        const float expected =
            static_cast<float>(p + 1) * 0.001f * static_cast<float>(i) - 0.5f * 0.25f;
        ASSERT_FLOAT_EQ(values[i], expected) << t.name << "[" << i << "]";
      }
    }
    EXPECT_EQ(file.tensors[0].name, "layer0.weight");
    EXPECT_EQ(file.tensors[3].name, "layer1.scale");

    // What another tool sees.
    const char* python = std::getenv("ZRT_TEST_PYTHON");
    const std::string interpreter =
        python != nullptr
            ? python
            : (access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3");
    const std::string expected =
        R"({"layer0.weight": [17, 19], "layer0.bias": [17], "layer1.weight": [4, 5, 6], )"
        R"("layer1.scale": [], "layer1.flat": [10]})";
    const std::string command =
        interpreter + " " + ZRT_CKPT_SHAPES_SCRIPT + " " + exported + " '" + expected + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  ckpt_remove_tree(root);
}

}  // namespace
}  // namespace zrt::testing
