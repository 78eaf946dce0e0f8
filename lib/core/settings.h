// The settings registry: every ZRT_* environment setting, declared once in one table (name,
// type, default, what it accepts, one line of doc; the table is in settings.cc), read through
// read_environment() and checked as a whole. Loading them also takes the snapshot of the launcher
// variables (lib/core/launcher_variables.h), the registry's companion table, at the same moment.
//
// The policy is the same for every setting: unset or empty means the default; any other value
// the setting does not accept is ZRT_INVALID_ARGUMENT when a communicator is created (or a tool
// starts), with a message naming the variable, the value and what it accepts. Nothing reads a
// setting per call: a communicator loads one Settings when it is created and hands the values
// down (CommOptions::settings); the logger and the reduction-kernel dispatcher, which are
// per process, parse theirs once at first use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "lib/core/environment.h"
#include "lib/core/launcher_variables.h"
#include "lib/core/status.h"

namespace zrt {

enum class SettingType {
  kBool,     // 0 or 1
  kInt,      // a decimal integer in [min, max], a multiple of multiple_of
  kSeconds,  // a positive number of seconds (60, 0.5), kept as milliseconds
  kEnum,     // one of the '|'-separated names in accepts; case does not matter
  kPath,     // a directory path, taken as given (unset or empty: none)
  kFile,     // a file path, taken as given (unset or empty: none); its reader checks the file
};

// One per table row, in the table's order.
enum class SettingId {
  kLog,
  kTimeout,
  kAlgo,
  kAlgoTable,
  kWindows,
  kWindowSlots,
  kWindowSlotKib,
  kSimd,
  kCheck,
  kUcxErrMode,
  kTraceDepth,
  kTraceDir,
  kHierarchy,
  kPollUs,
};
inline constexpr size_t kSettingCount = 14;

struct SettingSpec {
  SettingId id;
  const char* name;
  SettingType type;
  const char* default_value;  // parsed like a value from the environment
  const char* doc;
  const char* accepts = nullptr;  // kEnum only
  int64_t min = 0;                // kInt only
  int64_t max = 0;                // kInt only
  int64_t multiple_of = 1;        // kInt only
  // How docs/ENVIRONMENT.md states the default where it depends on the build;
  // nullptr = default_value.
  const char* default_doc = nullptr;
};

std::span<const SettingSpec> setting_specs();
const SettingSpec& setting_spec(SettingId id);
// What a setting accepts, for messages and docs/ENVIRONMENT.md: "0 or 1", "an integer in
// [2, 16]", ...
std::string setting_accepts(const SettingSpec& spec);

enum class SettingSource { kDefault, kEnvironment };
const char* setting_source_name(SettingSource source);

struct SettingValue {
  std::string text;     // as given, or the default; kEnum: the accepted name in lower case
  int64_t integer = 0;  // kBool: 0/1; kInt: the value; kSeconds: milliseconds; kEnum: index
  SettingSource source = SettingSource::kDefault;
};

// Parses one setting's text (nullptr or "" = unset: the default). An unaccepted value is
// ZRT_INVALID_ARGUMENT "NAME='text' is not <what it accepts>"; *value is then untouched.
Status parse_setting(const SettingSpec& spec, const char* text, SettingValue* value);

// parse_setting of the setting's variable in the process environment, for a component that
// resolves one option by itself when no communicator gave it (a bare engine or transport).
Status load_setting(SettingId id, SettingValue* value);

// Every setting's value. Default-constructed: every default.
class Settings {
 public:
  Settings();

  // Reads and checks every setting; the first unaccepted value is the error, and leaves
  // *settings as it was. From the process environment, with a snapshot of its launcher
  // variables; from `lookup`, with none (a lookup cannot list a prefix family).
  static Status load(Settings* settings);
  static Status load(const EnvironmentLookup& lookup, Settings* settings);

  const SettingValue& value(SettingId id) const { return values_[static_cast<size_t>(id)]; }
  bool flag(SettingId id) const { return value(id).integer != 0; }
  int64_t integer(SettingId id) const { return value(id).integer; }
  const std::string& text(SettingId id) const { return value(id).text; }

  // "ZRT_LOG=info (environment), ZRT_TIMEOUT=60 (default), ...", in table order.
  std::string describe() const;

  // The launcher variables set when the settings were loaded from the process environment.
  const LauncherVariables& launcher() const { return launcher_; }

 private:
  std::array<SettingValue, kSettingCount> values_;
  LauncherVariables launcher_;
};

// Logs settings.describe() and settings.launcher().describe() at info level, once per process
// (the first communicator's).
void log_settings_once(const Settings& settings);

// A ZRT_ALGO name (SettingValue::text) as the all-reduce algorithm to run (kAuto: chosen by size
// and rank count).
enum class AllReduceAlgorithm {
  kAuto,
  kRing,
  kDirect,
  kRecursiveDoubling,
  kOneShot,
  kCma,
  kTwoShot,
};
AllReduceAlgorithm all_reduce_algorithm(const std::string& name);

}  // namespace zrt
