// The one place in zrt that reads the process environment. Every ZRT_* setting goes through the
// registry (lib/core/settings.h), which reads through this; launcher variables (RANK, SLURM_*,
// ...), UCX_* checks and the tools' own variables call it directly.
#pragma once

#include <string>
#include <vector>

namespace zrt {

// The variable's value, or nullptr when it is not set. The pointer is valid until the
// environment changes (setenv, unsetenv); copy it when it must outlive that.
const char* read_environment(const char* name);

// Every variable as "NAME=value", for a launcher that passes the environment on to its children.
std::vector<std::string> environment_entries();

}  // namespace zrt
