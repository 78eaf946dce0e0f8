// The launcher-variable table: every variable zrt reads that a launcher (zrt-run, torchrun,
// Open MPI, Slurm) or the user sets, declared once beside the settings registry (the table is in
// launcher_variables.cc), with who sets it and what zrt uses it for. They are not settings: they
// say who this process is, where the job's store listens and which job it belongs to, so they
// have no default and no accepted values; their readers check them (lib/bootstrap/env_ranks.cc).
//
// The library reads them through a LauncherVariables snapshot, never through getenv: the
// snapshot takes every declared variable (and every variable of a declared prefix family,
// UCX_*) from the environment at once, when the settings are loaded (Settings::launcher()), or
// at the entry point of a reader that runs without a communicator (read_env_ranks, the
// checkpoint lock, a transport). `ZRT_LOG=info` prints the variables found with the settings.
// docs/ENVIRONMENT.md's launcher table lists the same rows (tests/core checks it).
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lib/core/environment.h"

namespace zrt {

struct LauncherVariableSpec {
  const char* name;    // the variable; with prefix, the start of every name in its family
  const char* set_by;  // the launchers (or "you") that set it
  const char* use;     // what zrt uses it for, one line
  bool prefix = false;  // a family: every variable whose name starts with `name`
  bool secret = false;  // printed as its length, never its value
};

std::span<const LauncherVariableSpec> launcher_variable_specs();

// The row that declares `name`, its own or its prefix family's; nullptr when zrt does not read
// such a variable.
const LauncherVariableSpec* find_launcher_variable(std::string_view name);

// How docs/ENVIRONMENT.md names a row: the variable, or the family as "UCX_*".
std::string launcher_variable_label(const LauncherVariableSpec& spec);

// The declared launcher variables set in the environment at one moment. Immutable once made, so
// safe to read from several threads.
class LauncherVariables {
 public:
  LauncherVariables() = default;  // none set

  // The process environment, now.
  static LauncherVariables load();
  // From "NAME=value" entries (environment_entries(), or a test's list). Variables zrt does not
  // declare are left out; of two entries with one name the first counts, as for getenv.
  static LauncherVariables from_entries(std::span<const std::string> entries);

  // The variable's value ("" when set but empty), or nullptr when it is unset or not declared.
  // Valid while this snapshot lives.
  const char* value(std::string_view name) const;
  bool is_set(std::string_view name) const { return value(name) != nullptr; }

  // value() as an EnvironmentLookup, for readers that take one (job_identity_from). It refers
  // to this snapshot, which must outlive it.
  EnvironmentLookup lookup() const;

  // "RANK=3 (set by torchrun, zrt-run), ..., UCX_TLS=tcp (set by you)" in table order, a secret
  // as its length; "none" when no variable is set.
  std::string describe() const;

 private:
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace zrt
