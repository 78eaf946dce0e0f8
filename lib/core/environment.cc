#include "lib/core/environment.h"

#include <cstdlib>

extern char** environ;

namespace zrt {

const char* read_environment(const char* name) {
  return std::getenv(name);
}

std::vector<std::string> environment_entries() {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) entries.emplace_back(*entry);
  return entries;
}

}  // namespace zrt
