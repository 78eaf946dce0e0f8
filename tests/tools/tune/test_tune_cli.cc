// zrt-tune as users run it, for mistakes caught before any rank starts: help, exit codes, bad
// sizes, a profile that does not parse (with its line and field), --print-profile round trip.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/tools/run_command.h"
#include "tools/zrt-tune/profile.h"

namespace zrt::testing {
namespace {

std::string tune_exe() {
  const char* path = std::getenv("ZRT_TUNE_EXE");
  return path != nullptr ? path : "";
}

CommandResult tune(std::vector<std::string> args) {
  args.insert(args.begin(), tune_exe());
  return run_command(args, {}, 60000);
}

TEST(TuneCli, HelpHasExamplesAndExitCodes) {
  ASSERT_FALSE(tune_exe().empty()) << "ZRT_TUNE_EXE not set by meson";
  CommandResult r = tune({"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"Examples:", "zrt-run -n 2 zrt-tune", "Exit codes", "--mem-cap",
                           "--profile", "gpt2-tiny"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text;
  }
}

TEST(TuneCli, BadSizeStringsExitTwoNamingTheFlag) {
  CommandResult r = tune({"--preset", "gpt2-tiny", "--mem-cap", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--mem-cap"), std::string::npos) << r.err;
  r = tune({"--preset", "gpt2-tiny", "--include-bucket", "-3M"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--include-bucket"), std::string::npos) << r.err;
  r = tune({"--preset", "gpt2-huge"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("gpt2-tiny"), std::string::npos) << r.err;
  r = tune({"--preset", "gpt2-tiny", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(TuneCli, ProfileErrorsNameTheLineAndField) {
  const std::string dir = make_temp_dir();
  const std::string path = dir + "/model.json";
  {
    std::ofstream out(path);
    out << "{\n  \"units\": [\n    {\"name\": \"a\", \"params\": 100,\n     \"forward_ms\": 1,\n"
           "     \"backward_ms\": true}\n  ]\n}\n";
  }
  CommandResult r = tune({"--profile", path});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(path + ":5: units[0].backward_ms"), std::string::npos) << r.err;
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(TuneCli, PrintedPresetIsAProfileItReadsBack) {
  CommandResult r = tune({"--preset", "gpt2-mini", "--print-profile"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  tune::Profile p;
  Status s = tune::parse_profile(r.out, "stdout", &p);
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(p.units.size(), 8u);  // embedding, 6 blocks, final norm
}

}  // namespace
}  // namespace zrt::testing
