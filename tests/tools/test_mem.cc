// zrt-mem's plan: the ZeRO paper's example, model descriptions, profile errors with lines.
#include <cmath>

#include <gtest/gtest.h>

#include "tools/common/json_file.h"
#include "tools/zrt-mem/mem_options.h"
#include "tools/zrt-mem/mem_plan.h"

namespace zrt::mem {
namespace {

Status parse(std::vector<std::string> args, MemCommand* command) {
  args.insert(args.begin(), "zrt-mem");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_mem_command(static_cast<int>(argv.size()), argv.data(), command);
}

// ZeRO (Rajbhandari et al. 2020), Figure 1: 7.5B parameters, N = 64, Adam, fp16 mixed precision:
// 120 GB plain data parallel, 31.4 GB stage 1, 16.6 GB stage 2, 1.9 GB stage 3.
TEST(ZrtMem, ReproducesTheZeroPaperExample) {
  MemCommand command;
  ASSERT_TRUE(parse({"--params", "7.5e9", "--ranks", "64"}, &command).is_ok());
  MemPlan plan;
  ASSERT_TRUE(plan_memory(command.request, &plan).is_ok());
  ASSERT_EQ(plan.stages.size(), 4u);
  const double expected_gb[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage < 4; ++stage) {
    const MemoryFigures& f = plan.stages[static_cast<size_t>(stage)].figures;
    EXPECT_NEAR(f.theoretical_model_state / 1e9, expected_gb[stage], 0.05) << "stage " << stage;
    // The measured plan adds only segment padding (at most alignment x N per segment).
    EXPECT_NEAR(static_cast<double>(f.model_state) / 1e9, expected_gb[stage], 0.05)
        << "stage " << stage;
    EXPECT_EQ(f.parameters, 7500000000u);
  }
  std::string text = render_mem_plan(command.request, plan);
  for (const char* figure : {"120.00 GB", "31.41 GB", "16.64 GB", "1.88 GB"}) {
    EXPECT_NE(text.find(figure), std::string::npos) << figure << "\n" << text;
  }
}

// ZeRO-Offload at the paper's example: stage 2, f16, Adam, N = 64 moves master and state (12P/N)
// to the host and keeps 2P + 2P/N on the device; --offload plans stages 1-3 and shows both.
TEST(ZrtMem, OffloadShowsDeviceAndHostColumns) {
  MemCommand command;
  ASSERT_TRUE(parse({"--params", "7.5e9", "--ranks", "64", "--offload"}, &command).is_ok());
  EXPECT_TRUE(command.request.options.offload_optimizer);
  MemPlan plan;
  ASSERT_TRUE(plan_memory(command.request, &plan).is_ok());
  ASSERT_EQ(plan.stages.size(), 3u);
  const double p = 7.5e9, n = 64;
  const MemoryFigures& s2 = plan.stages[1].figures;
  ASSERT_EQ(plan.stages[1].stage, 2);
  EXPECT_DOUBLE_EQ(s2.theoretical_device_model_state, 2 * p + 2 * p / n);
  EXPECT_DOUBLE_EQ(s2.theoretical_host_model_state, 12 * p / n);
  EXPECT_EQ(s2.host_model_state, s2.master + s2.optimizer_state);
  EXPECT_EQ(s2.device_total + s2.host_total, s2.total);
  for (const StagePlan& sp : plan.stages) {
    EXPECT_DOUBLE_EQ(sp.figures.theoretical_host_model_state, 12 * p / n) << sp.stage;
  }
  const std::string text = render_mem_plan(command.request, plan);
  // 2P + 2P/N = 15.23 GB on the device, 12P/N = 1.41 GB on the host.
  for (const char* figure :
       {"device: model state", "host: master + optimizer state", "15.23 GB", "1.41 GB"}) {
    EXPECT_NE(text.find(figure), std::string::npos) << figure << "\n" << text;
  }
  const nlohmann::json j = mem_plan_to_json(command.request, plan);
  EXPECT_EQ(j["settings"]["offload_optimizer"], true);
  EXPECT_EQ(j["stages"][1]["host_model_state"], s2.host_model_state);
  // Stage 0 has nothing sharded to offload: asked for explicitly, it is refused by name.
  MemCommand stage0;
  ASSERT_TRUE(
      parse({"--params", "1e9", "--ranks", "8", "--offload", "--stage", "0"}, &stage0).is_ok());
  const Status refused = plan_memory(stage0.request, &plan);
  EXPECT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find("offload_optimizer"), std::string::npos) << refused.message();
}

TEST(ZrtMem, Gpt2SmallShapeHasItsKnownParameterCount) {
  MemCommand command;
  ASSERT_TRUE(parse({"--layers", "12", "--hidden", "768", "--heads", "12", "--ranks", "8", "--seq",
                     "1024", "--micro-batch", "8", "--gpu-memory", "24GB"},
                    &command)
                  .is_ok());
  EXPECT_EQ(command.request.model.total_params(), 124439808u);  // GPT-2 small, tied head
  EXPECT_EQ(command.request.model.units.size(), 14u);
  MemPlan plan;
  ASSERT_TRUE(plan_memory(command.request, &plan).is_ok());
  ASSERT_TRUE(plan.has_activations);
  // Korthikanti et al.: sbh(34 + 5as/h) per layer, 16-bit.
  double per_layer = 1024.0 * 8 * 768 * (34 + 5.0 * 12 * 1024 / 768);
  EXPECT_NEAR(plan.activations.without_checkpointing, 12 * per_layer + 4.0 * 1024 * 8 * 50257, 1);
  EXPECT_LT(plan.activations.with_checkpointing, plan.activations.without_checkpointing / 4);
  std::string text = render_mem_plan(command.request, plan);
  EXPECT_NE(text.find("fits in 24.00 GB"), std::string::npos) << text;
  EXPECT_NE(text.find("with checkpointing"), std::string::npos);
  nlohmann::json j = mem_plan_to_json(command.request, plan);
  EXPECT_EQ(j["stages"].size(), 4u);
  EXPECT_TRUE(j["stages"][3].contains("fits_with_checkpointing"));
}

TEST(ZrtMem, FlagsReachThePartitionOptions) {
  MemCommand command;
  ASSERT_TRUE(parse({"--params", "1B", "--ranks", "8", "--dtype", "bf16", "--reduce-dtype", "f32",
                     "--optimizer", "sgd", "--bucket", "50MiB", "--prefetch-depth", "3", "--stage",
                     "3", "--no-sync"},
                    &command)
                  .is_ok());
  const PartitionOptions& o = command.request.options;
  EXPECT_EQ(o.param_dtype, ZRT_BF16);
  EXPECT_EQ(o.reduce_dtype, ZRT_F32);
  EXPECT_EQ(o.optimizer_slots, 0);
  EXPECT_EQ(o.bucket_bytes, 50u << 20);
  EXPECT_EQ(o.prefetch_depth, 3);
  EXPECT_TRUE(o.no_sync_accumulation);
  EXPECT_EQ(command.request.stages, std::vector<int>{3});
  EXPECT_EQ(o.hpz_group_size, 0);
}

// --hpz: stage 3 gains the secondary copy, 1/H of the padded unit parameters in param dtype;
// the other stages are as without it.
TEST(ZrtMem, HpzAddsTheSecondaryCopyToStage3) {
  MemCommand flat, hpz;
  const std::vector<std::string> args = {"--params", "1B", "--ranks", "8", "--dtype", "bf16"};
  std::vector<std::string> with = args;
  with.insert(with.end(), {"--hpz", "4"});
  ASSERT_TRUE(parse(args, &flat).is_ok());
  ASSERT_TRUE(parse(with, &hpz).is_ok());
  EXPECT_EQ(hpz.request.options.hpz_group_size, 4);
  MemPlan flat_plan, hpz_plan;
  ASSERT_TRUE(plan_memory(flat.request, &flat_plan).is_ok());
  ASSERT_TRUE(plan_memory(hpz.request, &hpz_plan).is_ok());
  ASSERT_EQ(hpz_plan.stages.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    const MemoryFigures& a = flat_plan.stages[s].figures;
    const MemoryFigures& b = hpz_plan.stages[s].figures;
    SCOPED_TRACE(::testing::Message() << "stage " << s);
    if (s < 3) {
      EXPECT_EQ(b.param_secondary, 0u);
      EXPECT_EQ(b.total, a.total);
      continue;
    }
    // The persistent segment (padded) is all of full_params: the model freezes nothing.
    const uint64_t persistent = a.full_params / 2;
    EXPECT_EQ(b.param_secondary, (a.padded_parameters - persistent) / 4 * 2);
    EXPECT_EQ(b.model_state, a.model_state + b.param_secondary);
    EXPECT_EQ(b.total, a.total + b.param_secondary);
  }
  const nlohmann::json j = mem_plan_to_json(hpz.request, hpz_plan);
  EXPECT_EQ(j["settings"]["hpz_group"], 4);
  EXPECT_EQ(j["stages"][3]["param_secondary"], hpz_plan.stages[3].figures.param_secondary);
  EXPECT_NE(render_mem_plan(hpz.request, hpz_plan).find("hpZ secondary"), std::string::npos);
}

TEST(ZrtMem, CommandLineErrorsSayWhatToFix) {
  struct Case {
    std::vector<std::string> args;
    const char* mention;
  } cases[] = {
      {{"--ranks", "8"}, "no model"},
      {{"--params", "7.5Q", "--ranks", "8"}, "unknown unit"},
      {{"--params", "1B", "--layers", "2", "--hidden", "8", "--heads", "2", "--ranks", "8"},
       "only one of"},
      {{"--params", "1B", "--ranks", "8", "--dtype", "fp8"}, "unknown data type 'fp8'"},
      {{"--params", "1B", "--ranks", "8", "--optimizer", "adagrad9"}, "unknown optimizer"},
      {{"--layers", "2", "--hidden", "10", "--heads", "3", "--ranks", "8"}, "multiple of --heads"},
      {{"--profile", "/nonexistent/model.json", "--ranks", "8"}, "/nonexistent/model.json"},
      {{"--params", "1B", "--ranks", "8", "--gpu-memory", "lots"}, "--gpu-memory"},
      {{"--params", "1B", "--ranks", "8", "--hpz", "3"}, "--hpz 3"},
      {{"--params", "1B", "--ranks", "8", "--hpz", "2", "--shard-group", "4"}, "--shard-group"},
      {{"--params", "1B", "--ranks", "8", "--hpz", "2", "--stage", "2"}, "--stage 2"},
  };
  for (const Case& c : cases) {
    MemCommand command;
    Status s = parse(c.args, &command);
    EXPECT_FALSE(s.is_ok()) << c.mention;
    EXPECT_NE(s.message().find(c.mention), std::string::npos)
        << "message: " << s.message() << "\nexpected: " << c.mention;
  }
}

Status profile_from_text(const std::string& text, ModelSpec* model) {
  tools::JsonFile file;
  ZRT_RETURN_IF_ERROR(file.parse(text, "model.json"));
  return model_from_profile(file, model);
}

TEST(ZrtMem, ProfileParses) {
  ModelSpec model;
  Status s = profile_from_text(R"({
    "name": "tiny",
    "units": [
      {"name": "embed", "params": 1000, "forward_ms": 0.5, "backward_ms": 1.0},
      {"name": "block", "params": [{"name": "w", "numel": 4096},
                                   {"name": "ln", "numel": 64, "frozen": true}]}
    ]})",
                               &model);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(model.units.size(), 2u);
  ASSERT_EQ(model.params.size(), 3u);
  EXPECT_EQ(model.params[2].flags, static_cast<uint32_t>(ZRT_PARAM_FROZEN));
  EXPECT_EQ(model.total_params(), 1000u + 4096 + 64);
  EXPECT_EQ(model.frozen_params(), 64u);
}

TEST(ZrtMem, ProfileErrorsNameTheLineAndField) {
  ModelSpec model;
  // Line 4 holds the bad field.
  Status s = profile_from_text(
      "{\n  \"units\": [\n    {\"name\": \"a\", \"params\": 10},\n"
      "    {\"name\": \"b\", \"params\": \"many\"}\n  ]\n}\n",
      &model);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("model.json:4: units[1].params"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("got a string"), std::string::npos) << s.message();

  s = profile_from_text("{\"units\": [\n {\"name\": \"a\",\n  \"parms\": 10}]}", &model);
  EXPECT_NE(s.message().find("model.json:3: units[0].parms: unknown field"), std::string::npos)
      << s.message();

  s = profile_from_text("{\"units\": [{\"params\": [{\"numel\": -5}]}]}", &model);
  EXPECT_NE(s.message().find("units[0].params[0].numel"), std::string::npos) << s.message();

  s = profile_from_text("{\"units\": []}", &model);
  EXPECT_NE(s.message().find("empty list"), std::string::npos) << s.message();

  // Syntax errors: line and column.
  s = profile_from_text("{\n  \"units\": [\n    {\"params\": 10,}\n  ]\n}", &model);
  EXPECT_NE(s.message().find("model.json:3:"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not valid JSON"), std::string::npos) << s.message();
}

TEST(JsonLines, MapsPathsToLines) {
  auto lines = tools::json_value_lines("{\n\"a\": 1,\n\"b\": [\n 2,\n {\"c\": \"x,]}\"}\n]\n}");
  EXPECT_EQ(lines["a"], 2);
  EXPECT_EQ(lines["b"], 3);
  EXPECT_EQ(lines["b[0]"], 4);
  EXPECT_EQ(lines["b[1].c"], 5);
}

}  // namespace
}  // namespace zrt::mem
