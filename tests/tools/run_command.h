// Runs a tool as a child process and captures what it prints, with a deadline: the tool tests
// check exit codes and output the way a user (or a script) sees them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace zrt::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed (signal or deadline)
  bool timed_out = false;
  std::string out;
  std::string err;
};

// argv[0] is the program path. `env` adds to (or overrides) the inherited environment.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          int timeout_ms = 60000);

// A fresh empty folder under $TMPDIR (or /tmp), for output files.
std::string make_temp_dir();
std::string read_file(const std::string& path);

}  // namespace zrt::testing
