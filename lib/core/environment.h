// The one place in zrt that reads the process environment. Every ZRT_* setting goes through the
// registry (lib/core/settings.h) and every launcher variable (RANK, SLURM_*, UCX_*, ...) through
// the launcher-variable table (lib/core/launcher_variables.h), both of which read through this;
// the tools' own variables and the launchers that pass the environment on call it directly.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace zrt {

// The variable's value, or nullptr when it is not set. The pointer is valid until the
// environment changes (setenv, unsetenv); copy it when it must outlive that.
const char* read_environment(const char* name);

// Every variable as "NAME=value", for a launcher that passes the environment on to its children.
std::vector<std::string> environment_entries();

// Returns a variable's value or nullptr when it is unset (read_environment, a snapshot's
// lookup(), or a test's map).
using EnvironmentLookup = std::function<const char*(const char* name)>;

}  // namespace zrt
