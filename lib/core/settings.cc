#include "lib/core/settings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "lib/core/environment.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

#ifdef NDEBUG
constexpr const char* kCheckDefault = "0";
#else
constexpr const char* kCheckDefault = "1";
#endif

// The registry. docs/ENVIRONMENT.md's settings table lists the same rows (tests/core checks it).
constexpr SettingSpec kSpecs[] = {
    {.id = SettingId::kLog,
     .name = "ZRT_LOG",
     .type = SettingType::kEnum,
     .default_value = "warn",
     .doc = "log level; lines go to stderr, prefixed with host, pid and rank",
     .accepts = "error|warn|warning|info|debug|trace"},
    {.id = SettingId::kTimeout,
     .name = "ZRT_TIMEOUT",
     .type = SettingType::kSeconds,
     .default_value = "60",
     .doc = "seconds without progress before a wait fails with ZRT_TIMEOUT (a config's "
            "timeout_ms wins)"},
    {.id = SettingId::kAlgo,
     .name = "ZRT_ALGO",
     .type = SettingType::kEnum,
     .default_value = "auto",
     .doc = "collective algorithm: auto chooses by size and rank count; the others force one "
            "(ring and oneshot also for reduce-scatter and all-gather; oneshot and twoshot only "
            "on one host, on a communicator's first 4 streams and up to its 1 MiB slot; twoshot "
            "for all-reduce only; cma for all-gather only, on one host where ranks may read each "
            "other's memory)",
     .accepts = "auto|ring|rd|direct|oneshot|twoshot|cma"},
    // Read by the communicator (collectives/algorithm.h: the format, and what a bad file says).
    {.id = SettingId::kAlgoTable,
     .name = "ZRT_ALGO_TABLE",
     .type = SettingType::kFile,
     .default_value = "",
     .doc = "algorithm table for reduce-scatter, all-gather and all-reduce by rank count, host "
            "count and size (zrt-tune --algorithms writes one); sizes no row covers use the "
            "built-in table, and ZRT_ALGO overrides both",
     .default_doc = "unset"},
    {.id = SettingId::kWindows,
     .name = "ZRT_WINDOWS",
     .type = SettingType::kBool,
     .default_value = "1",
     .doc = "ranks on one host, and the two-level collectives' ring inside each host: rings write "
            "into the neighbour's mapped staging (1) or send UCX messages (0)"},
    // Range and default: kWindowMaxSlots and kWindowSlots (engine/stream_resources.h).
    {.id = SettingId::kWindowSlots,
     .name = "ZRT_WINDOW_SLOTS",
     .type = SettingType::kInt,
     .default_value = "8",
     .doc = "slots in each stream's window inbox",
     .min = 2,
     .max = 16},
    // kWindowMinSlotBytes to kWindowMaxSlotBytes, default kWindowSlotBytes, in KiB.
    {.id = SettingId::kWindowSlotKib,
     .name = "ZRT_WINDOW_SLOT_KIB",
     .type = SettingType::kInt,
     .default_value = "256",
     .doc = "size of one window slot, in KiB",
     .min = 4,
     .max = 16384,
     .multiple_of = 4},
    {.id = SettingId::kSimd,
     .name = "ZRT_SIMD",
     .type = SettingType::kEnum,
     .default_value = "auto",
     .doc = "reduction-kernel variant: auto picks the best this CPU runs; a forced one must run "
            "here",
     .accepts = "auto|generic|avx2|avx512"},
    {.id = SettingId::kCheck,
     .name = "ZRT_CHECK",
     .type = SettingType::kBool,
     .default_value = kCheckDefault,
     .doc = "collective-order checker: mismatched collectives fail with a message naming both "
            "calls",
     .default_doc = "1 (0 in release builds)"},
    {.id = SettingId::kUcxErrMode,
     .name = "ZRT_UCX_ERR_MODE",
     .type = SettingType::kEnum,
     .default_value = "hybrid",
     .doc = "how dead peers are detected: data on shm/cma plus a tcp watcher per peer (hybrid), "
            "data on the watched tcp endpoints (peer), or only the no-progress timeout (none)",
     .accepts = "hybrid|peer|none"},
    {.id = SettingId::kTraceDepth,
     .name = "ZRT_TRACE_DEPTH",
     .type = SettingType::kInt,
     .default_value = "256",
     .doc = "flight recorder: the last collectives and partition calls each communicator keeps "
            "(0 = none)",
     .min = 0,
     .max = 1048576},
    {.id = SettingId::kTraceDir,
     .name = "ZRT_TRACE_DIR",
     .type = SettingType::kPath,
     .default_value = "",
     .doc = "where each rank writes its flight recorder on a failure, SIGTERM or SIGUSR1 "
            "(unset: only on request, zrt_comm_dump_trace)",
     .default_doc = "unset"},
    {.id = SettingId::kHierarchy,
     .name = "ZRT_HIERARCHY",
     .type = SettingType::kEnum,
     .default_value = "auto",
     .doc = "ranks on several hosts: reduce-scatter, all-gather and all-reduce run within each "
            "host, then across hosts (two-level; auto when every host has as many consecutive "
            "ranks) or as one ring over all ranks (flat)",
     .accepts = "auto|flat|two-level"},
    // Default and maximum: kBusyPollMicros and kMaxBusyPollMicros (engine/engine.h).
    {.id = SettingId::kPollUs,
     .name = "ZRT_POLL_US",
     .type = SettingType::kInt,
     .default_value = "50",
     .doc = "how long the progress thread and a waiting caller keep polling, yielding the core, "
            "while a small collective is in flight before they sleep (0: sleep at once); a caller "
            "running a one-shot collective spins 4× this before it hands the call to the progress "
            "thread, and where every rank has a CPU of its own it only pauses for the first 1× "
            "and spins 80× in all",
     .min = 0,
     .max = 1000000},
};
static_assert(std::size(kSpecs) == kSettingCount);

constexpr bool ids_in_table_order() {
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    if (static_cast<size_t>(kSpecs[i].id) != i) return false;
  }
  return true;
}
static_assert(ids_in_table_order(), "kSpecs[i].id must be SettingId(i)");

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// kEnum's names, split at '|'.
std::vector<std::string_view> enum_names(const SettingSpec& spec) {
  std::vector<std::string_view> names;
  std::string_view rest = spec.accepts;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    names.push_back(rest.substr(0, bar));
    if (bar == std::string_view::npos) break;
    rest.remove_prefix(bar + 1);
  }
  return names;
}

Status refuse(const SettingSpec& spec, const char* text) {
  return Status::invalid_argument("{}='{}' is not {}", spec.name, text, setting_accepts(spec));
}

Status parse_text(const SettingSpec& spec, const char* text, SettingValue* value) {
  switch (spec.type) {
    case SettingType::kBool:
      if (std::string_view(text) != "0" && std::string_view(text) != "1") {
        return refuse(spec, text);
      }
      value->integer = text[0] == '1' ? 1 : 0;
      value->text = text;
      return Status::ok();
    case SettingType::kInt: {
      errno = 0;
      char* end = nullptr;
      const long long parsed = std::strtoll(text, &end, 10);
      if (errno != 0 || end == text || *end != '\0' || parsed < spec.min || parsed > spec.max ||
          parsed % spec.multiple_of != 0) {
        return refuse(spec, text);
      }
      value->integer = parsed;
      value->text = text;
      return Status::ok();
    }
    case SettingType::kSeconds: {
      errno = 0;
      char* end = nullptr;
      const double seconds = std::strtod(text, &end);
      if (errno != 0 || end == text || *end != '\0' || !std::isfinite(seconds) || seconds <= 0 ||
          seconds > 1e9) {
        return refuse(spec, text);
      }
      value->integer = std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000.0)));
      value->text = text;
      return Status::ok();
    }
    case SettingType::kEnum: {
      const std::vector<std::string_view> names = enum_names(spec);
      for (size_t i = 0; i < names.size(); ++i) {
        if (equal_ignoring_case(names[i], text)) {
          value->integer = static_cast<int64_t>(i);
          value->text = std::string(names[i]);
          return Status::ok();
        }
      }
      return refuse(spec, text);
    }
    case SettingType::kPath:
    case SettingType::kFile:
      value->text = text;
      return Status::ok();
  }
  return refuse(spec, text);
}

}  // namespace

std::span<const SettingSpec> setting_specs() {
  return kSpecs;
}

const SettingSpec& setting_spec(SettingId id) {
  return kSpecs[static_cast<size_t>(id)];
}

std::string setting_accepts(const SettingSpec& spec) {
  switch (spec.type) {
    case SettingType::kBool:
      return "0 or 1";
    case SettingType::kInt:
      if (spec.multiple_of > 1) {
        return fmt::format("a multiple of {} in [{}, {}]", spec.multiple_of, spec.min, spec.max);
      }
      return fmt::format("an integer in [{}, {}]", spec.min, spec.max);
    case SettingType::kSeconds:
      return "a positive number of seconds (e.g. 60 or 0.5)";
    case SettingType::kEnum: {
      std::string names;
      for (std::string_view name : enum_names(spec)) {
        if (!names.empty()) names += ", ";
        names += name;
      }
      return "one of " + names;
    }
    case SettingType::kPath:
      return "a directory path";
    case SettingType::kFile:
      return "a file path";
  }
  return "?";
}

const char* setting_source_name(SettingSource source) {
  return source == SettingSource::kEnvironment ? "environment" : "default";
}

Status parse_setting(const SettingSpec& spec, const char* text, SettingValue* value) {
  const bool unset = text == nullptr || *text == '\0';
  SettingValue parsed;
  ZRT_RETURN_IF_ERROR(parse_text(spec, unset ? spec.default_value : text, &parsed));
  parsed.source = unset ? SettingSource::kDefault : SettingSource::kEnvironment;
  *value = std::move(parsed);
  return Status::ok();
}

Status load_setting(SettingId id, SettingValue* value) {
  const SettingSpec& spec = setting_spec(id);
  return parse_setting(spec, read_environment(spec.name), value);
}

Settings::Settings() {
  for (const SettingSpec& spec : kSpecs) {
    // The defaults are in the table above; tests/core checks that each one parses.
    (void)parse_setting(spec, nullptr, &values_[static_cast<size_t>(spec.id)]);
  }
}

Status Settings::load(Settings* settings) {
  ZRT_RETURN_IF_ERROR(load(read_environment, settings));
  settings->launcher_ = LauncherVariables::load();
  return Status::ok();
}

Status Settings::load(const EnvironmentLookup& lookup, Settings* settings) {
  if (settings == nullptr) return Status::invalid_argument("Settings::load: settings is NULL");
  Settings loaded;
  for (const SettingSpec& spec : kSpecs) {
    ZRT_RETURN_IF_ERROR(
        parse_setting(spec, lookup(spec.name), &loaded.values_[static_cast<size_t>(spec.id)]));
  }
  *settings = std::move(loaded);
  return Status::ok();
}

std::string Settings::describe() const {
  std::string text;
  for (const SettingSpec& spec : kSpecs) {
    const SettingValue& v = value(spec.id);
    if (!text.empty()) text += ", ";
    text += fmt::format("{}={} ({})", spec.name, v.text, setting_source_name(v.source));
  }
  return text;
}

void log_settings_once(const Settings& settings) {
  static std::once_flag once;
  std::call_once(once, [&settings] {
    ZRT_LOG_INFO("settings: {}", settings.describe());
    ZRT_LOG_INFO("launcher variables: {}", settings.launcher().describe());
  });
}

AllReduceAlgorithm all_reduce_algorithm(const std::string& name) {
  if (name == "ring") return AllReduceAlgorithm::kRing;
  if (name == "direct") return AllReduceAlgorithm::kDirect;
  if (name == "rd") return AllReduceAlgorithm::kRecursiveDoubling;
  if (name == "oneshot") return AllReduceAlgorithm::kOneShot;
  if (name == "cma") return AllReduceAlgorithm::kCma;
  if (name == "twoshot") return AllReduceAlgorithm::kTwoShot;
  return AllReduceAlgorithm::kAuto;
}

}  // namespace zrt
