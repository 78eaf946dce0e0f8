// zrt-mem's command line: which model, how many ranks, which dtypes and optimizer, which
// partition settings, and how much device memory there is.
#pragma once

#include <string>

#include "lib/core/status.h"
#include "tools/zrt-mem/mem_plan.h"

namespace zrt::mem {

struct MemCommand {
  MemRequest request;
  bool json = false;
  bool show_help = false;
  std::string help;
};

// Parses argv into a request. Errors (ZRT_INVALID_ARGUMENT) name the flag, the file, the line.
Status parse_mem_command(int argc, const char* const* argv, MemCommand* command);

}  // namespace zrt::mem
