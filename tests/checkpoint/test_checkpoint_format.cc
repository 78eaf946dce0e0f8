// The checkpoint format without ranks: the manifest parser (round trip, and refusal of every
// kind of damage without crashing), the shard plan (every element written exactly once at any
// N and stage), checksums and the safetensors header.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "zero/checkpoint/checksum.h"
#include "zero/checkpoint/manifest.h"
#include "zero/checkpoint/safetensors.h"
#include "zero/checkpoint/shard_plan.h"
#include "zero/partition/layout.h"

namespace zrt {
namespace {

// A model with straddling parameters and a frozen one, laid out for (stage, ranks).
Layout make_layout(int stage, int ranks, std::vector<ParamSpec>* specs_out = nullptr) {
  PartitionOptions options;
  options.stage = stage;
  options.bucket_bytes = 400;
  options.alignment = 4;
  options.persistence_threshold = 30;
  std::vector<UnitSpec> units = {{"a"}, {"b"}, {"c"}};
  std::vector<ParamSpec> specs = {
      {"w0", 91, 0, 0},  {"b0", 13, 0, 0}, {"emb", 50, 1, ZRT_PARAM_FROZEN},
      {"w1", 207, 1, 0}, {"w2", 64, 2, 0}, {"b2", 5, 2, 0}};
  Layout layout;
  const Status status = Layout::build(options, ranks, units, specs, &layout);
  EXPECT_TRUE(status.is_ok()) << status.message();
  if (specs_out != nullptr) *specs_out = specs;
  return layout;
}

Manifest make_manifest(int stage, int world, zrt_dtype_t pdt) {
  std::vector<ParamSpec> specs;
  const Layout layout = make_layout(stage, world, &specs);
  Manifest m;
  m.step = 17;
  m.world_size = world;
  m.stage = stage;
  m.param_dtype = pdt;
  m.optimizer_slots = 2;
  for (const ParamSpec& s : specs) {
    m.params.push_back({s.name, "u", s.numel, (s.flags & ZRT_PARAM_FROZEN) != 0});
  }
  for (int r = 0; r < world; ++r) {
    ManifestFile f = describe_rank_file(rank_contents(layout, r, world), pdt, 2,
                                        shard_file_name("00000017-0000000000ab", r, world), r);
    f.checksum = 0x0123456789abcdefull + static_cast<uint64_t>(r);
    m.files.push_back(std::move(f));
  }
  return m;
}

Status parse(const std::string& text, Manifest* m) {
  return parse_manifest(text, "m.json", m);
}

TEST(CheckpointFormat, ManifestRoundTripsAtEveryStageAndN) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << " N " << world);
      const Manifest m = make_manifest(stage, world, stage == 3 ? ZRT_BF16 : ZRT_F32);
      Manifest back;
      const Status status = parse(serialize_manifest(m), &back);
      ASSERT_TRUE(status.is_ok()) << status.message();
      EXPECT_EQ(serialize_manifest(back), serialize_manifest(m));
      EXPECT_EQ(back.files.size(), static_cast<size_t>(world));
      EXPECT_EQ(back.files[0].checksum, 0x0123456789abcdefull);
    }
  }
}

TEST(CheckpointFormat, ShardPlanWritesEveryElementOnce) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2, 3, 4, 8}) {
      std::vector<ParamSpec> specs;
      const Layout layout = make_layout(stage, world, &specs);
      std::vector<std::vector<int>> seen(specs.size());
      for (size_t p = 0; p < specs.size(); ++p) seen[p].assign(specs[p].numel, 0);
      uint64_t written = 0;
      for (int r = 0; r < world; ++r) {
        const RankContents c = rank_contents(layout, r, world);
        for (const auto* list : {&c.trainable, &c.frozen}) {
          for (const WritePiece& piece : *list) {
            for (uint64_t i = 0; i < piece.count; ++i) ++seen[piece.param][piece.param_offset + i];
            written += piece.count;
          }
        }
      }
      for (size_t p = 0; p < specs.size(); ++p) {
        for (int count : seen[p]) ASSERT_EQ(count, 1) << "stage " << stage << " N " << world;
      }
      EXPECT_EQ(written, 91u + 13 + 50 + 207 + 64 + 5);
    }
  }
}

TEST(CheckpointFormat, SectionsArePackedInOrder) {
  const Layout layout = make_layout(2, 2);
  const ManifestFile f =
      describe_rank_file(rank_contents(layout, 0, 2), ZRT_BF16, 2, "shard-x.bin", 0);
  ASSERT_EQ(f.sections.size(), 5u);  // master, state 0, state 1, param, frozen
  uint64_t at = 0;
  for (const ManifestSection& s : f.sections) {
    EXPECT_EQ(s.offset, at);
    at += s.bytes;
  }
  EXPECT_EQ(at, f.bytes);
  EXPECT_EQ(f.sections[3].kind, SectionKind::kParam);
  EXPECT_EQ(f.sections[3].bytes * 2, f.sections[0].bytes);
}

// Each edit breaks one rule; the parser must refuse it with a message containing `expect`.
TEST(CheckpointFormat, ManifestRefusesDamagedInput) {
  const std::string good = serialize_manifest(make_manifest(2, 3, ZRT_F32));
  struct Edit {
    const char* what;
    std::function<void(nlohmann::json&)> apply;
    const char* expect;
  };
  const std::vector<Edit> edits = {
      {"version", [](auto& j) { j["version"] = 7; }, "unknown format version 7"},
      {"format", [](auto& j) { j["format"] = "other"; }, "not a zrt checkpoint"},
      {"missing step", [](auto& j) { j.erase("step"); }, "missing key \"step\""},
      {"negative step", [](auto& j) { j["step"] = -1; }, "non-negative integer"},
      {"string numel", [](auto& j) { j["params"][0]["numel"] = "91"; }, "params[0].numel"},
      {"zero numel", [](auto& j) { j["params"][0]["numel"] = 0; }, "at least 1"},
      {"world", [](auto& j) { j["world_size"] = 4; }, "3 shard files listed for world_size 4"},
      {"file name", [](auto& j) { j["files"][0]["name"] = "../etc/passwd"; }, "plain file name"},
      {"checksum", [](auto& j) { j["files"][1]["checksum"] = "xyz"; }, "hex digits"},
      {"piece param", [](auto& j) { j["files"][0]["trainable"][0][0] = 99; }, "exceeds the limit"},
      {"piece range", [](auto& j) { j["files"][0]["trainable"][0][2] = 100000; },
       "outside parameter"},
      {"gap", [](auto& j) { j["files"][0]["trainable"][0][1] = 1; }, "[0, 1) are missing"},
      {"twice",
       [](auto& j) { j["files"][1]["trainable"].push_back(j["files"][0]["trainable"][0]); },
       "its pieces hold"},
      {"section past end", [](auto& j) { j["files"][0]["bytes"] = 8; }, "past the file's end"},
      {"section dtype", [](auto& j) { j["files"][0]["sections"][0]["dtype"] = "bf16"; },
       "must be f32"},
      {"section kind", [](auto& j) { j["files"][0]["sections"][0]["kind"] = "grad"; },
       "unknown section kind"},
      {"state slot", [](auto& j) { j["files"][0]["sections"][2]["slot"] = 0; }, "repeated"},
      {"frozen mismatch", [](auto& j) { j["params"][2]["frozen"] = false; }, "frozen"},
      {"not object", [](auto& j) { j = nlohmann::json::array(); }, "expected an object"},
  };
  for (const Edit& edit : edits) {
    SCOPED_TRACE(edit.what);
    nlohmann::json j = nlohmann::json::parse(good);
    edit.apply(j);
    Manifest m;
    const Status status = parse(j.dump(), &m);
    EXPECT_EQ(status.code(), ZRT_INVALID_ARGUMENT);
    EXPECT_NE(status.message().find(edit.expect), std::string::npos) << status.message();
    EXPECT_EQ(status.message().rfind("m.json", 0), 0u) << status.message();
  }
}

// Truncations, byte flips and deep nesting: always a status, never a crash or a hang.
TEST(CheckpointFormat, ManifestParserSurvivesGarbage) {
  const std::string good = serialize_manifest(make_manifest(3, 2, ZRT_BF16));
  Manifest m;
  for (size_t cut = 0; cut < good.size(); cut += 7) {
    EXPECT_FALSE(parse(good.substr(0, cut), &m).is_ok());
  }
  std::mt19937 rng(5);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    for (int k = 0; k < 3; ++k) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
    accepted += parse(bad, &m).is_ok();  // a flip inside a name may still be a valid manifest
  }
  EXPECT_LT(accepted, 3000);
  EXPECT_FALSE(parse(std::string(100000, '['), &m).is_ok());
  EXPECT_FALSE(parse(std::string("\0\xff\xfe", 3), &m).is_ok());
}

TEST(CheckpointFormat, ChecksumIsStreamingAndHexRoundTrips) {
  const std::string text = "zrt sharded checkpoints";
  Checksum sum;
  sum.update(text.data(), 5);
  sum.update(text.data() + 5, text.size() - 5);
  EXPECT_EQ(sum.digest(), checksum_of(text.data(), text.size()));
  EXPECT_NE(checksum_of("a", 1), checksum_of("b", 1));
  uint64_t back = 0;
  ASSERT_TRUE(checksum_from_hex(checksum_to_hex(sum.digest()), &back));
  EXPECT_EQ(back, sum.digest());
  EXPECT_FALSE(checksum_from_hex("0123456789ABCDEF", &back));
  EXPECT_FALSE(checksum_from_hex("0123", &back));
}

TEST(CheckpointFormat, SafetensorsHeaderRoundTripsWithUniqueNames) {
  const std::vector<std::string> names = export_tensor_names(
      {"layer", "layer", "layer", "", "head"}, {"w", "b", "w", "__metadata__", "head.bias"});
  EXPECT_EQ(names[0], "layer.w");
  EXPECT_EQ(names[4], "head.bias");
  EXPECT_EQ(names[2], "layer.w.2");
  EXPECT_NE(names[3], "__metadata__");
  SafetensorsFile file;
  file.tensors = {
      {names[0], ZRT_F32, 10, 0, 0}, {names[1], ZRT_BF16, 3, 0, 0}, {names[2], ZRT_F16, 1, 0, 0}};
  file.metadata["format"] = "pt";
  std::string header;
  ASSERT_TRUE(safetensors_build(&file, &header).is_ok());
  EXPECT_EQ(header.size() % 8, 0u);
  SafetensorsFile back;
  const Status status = safetensors_parse(header, "x", &back);
  ASSERT_TRUE(status.is_ok()) << status.message();
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.tensors[1].begin, 40u);
  EXPECT_EQ(back.tensors[2].end, 48u);
  EXPECT_EQ(back.data_start, header.size());
  EXPECT_EQ(back.metadata["format"], "pt");
  SafetensorsFile dup = file;
  dup.tensors[1].name = dup.tensors[0].name;
  EXPECT_FALSE(safetensors_build(&dup, &header).is_ok());
}

}  // namespace
}  // namespace zrt
