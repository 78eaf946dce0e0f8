// Replays every committed seed (tests/fuzz/corpus/<target>/) and every kept crashing input
// (tests/fuzz/regressions/<target>/) through its fuzz target, with whatever compiler built the
// tree, so that the inputs the fuzzers found stay fixed in every `meson test` run, sanitizers or
// not. The folders' names select the target; an unknown folder is an error, not a silent skip.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fuzz/fuzz_targets.h"

namespace zrt::fuzz {
namespace {

namespace fs = std::filesystem;

std::string fuzz_dir() {
  return ZRT_FUZZ_SOURCE_DIR;
}

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Runs every file under <fuzz_dir>/<kind>/<target>/ through its target; returns the count.
size_t replay(const std::string& kind) {
  size_t count = 0;
  const fs::path root = fs::path(fuzz_dir()) / kind;
  if (!fs::exists(root)) return 0;
  std::vector<fs::path> targets;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) targets.push_back(entry.path());
  }
  std::sort(targets.begin(), targets.end());
  for (const fs::path& target_dir : targets) {
    const FuzzTarget target = find_fuzz_target(target_dir.filename().string());
    EXPECT_NE(target, nullptr) << target_dir << " names no fuzz target";
    if (target == nullptr) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(target_dir)) {
      if (entry.is_regular_file() && entry.path().filename() != "README.md") {
        files.push_back(entry.path());
      }
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      const std::vector<uint8_t> bytes = read_all(file);
      EXPECT_EQ(target(bytes.data(), bytes.size()), "") << file;
      ++count;
    }
  }
  return count;
}

TEST(FuzzReplay, SeedCorpora) {
  // Every target has seeds; an empty corpus would make the CI fuzz run start from nothing.
  for (const char* target : {"store_protocol", "partition_config", "model_profile", "manifest"}) {
    const fs::path dir = fs::path(fuzz_dir()) / "corpus" / target;
    ASSERT_TRUE(fs::is_directory(dir)) << dir;
    EXPECT_FALSE(fs::is_empty(dir)) << dir;
  }
  EXPECT_GT(replay("corpus"), 0u);
}

TEST(FuzzReplay, KeptCrashingInputs) {
  replay("regressions");
}

// The targets themselves must be able to fail: a body that its own encoder cannot reproduce
// (a trailing byte after a valid request) and a header longer than any frame are refused.
TEST(FuzzReplay, TargetsRefuseBadInput) {
  const uint8_t huge_header[4] = {0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(fuzz_store_protocol(huge_header, 4), "");
  const uint8_t not_json[] = {'{', '"', 's', 't', 'a', 'g', 'e', '"', ':', ' ', '9', '}'};
  EXPECT_EQ(fuzz_partition_config(not_json, sizeof(not_json)), "");
  EXPECT_EQ(find_fuzz_target("no_such_target"), nullptr);
}

}  // namespace
}  // namespace zrt::fuzz
