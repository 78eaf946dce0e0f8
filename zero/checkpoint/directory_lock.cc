#include "zero/checkpoint/directory_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "zero/checkpoint/checksum.h"
#include "zero/checkpoint/file_io.h"
#include "lib/core/launcher_variables.h"
#include "lib/core/log.h"

namespace zrt {
namespace {

struct Owner {
  std::string host;
  int64_t pid = 0;
  uint64_t start_ticks = 0;  // field 22 of /proc/PID/stat: tells a reused pid apart
  std::string job;
  std::string since;
};

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

// 0 when the process does not exist (or /proc is not there).
uint64_t start_ticks_of(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  // After ")": state is field 3; starttime is field 22.
  for (int index = 3; index <= 22 && (fields >> field); ++index) {
    if (index == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

// The job this process belongs to, as a launcher names it; never the secret job token itself.
std::string job_name() {
  const LauncherVariables launcher = LauncherVariables::load();
  for (const char* name : {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = launcher.value(name);
    if (value != nullptr && *value != '\0') return fmt::format("{}={}", name, value);
  }
  const char* token = launcher.value("ZRT_JOB_TOKEN");
  if (token != nullptr && *token != '\0') {
    return fmt::format("zrt-run job {}",
                       checksum_to_hex(checksum_of(token, std::strlen(token))).substr(0, 8));
  }
  return fmt::format("pid {}", getpid());
}

Owner me() {
  Owner owner;
  owner.host = host_name();
  owner.pid = getpid();
  owner.start_ticks = start_ticks_of(owner.pid);
  owner.job = job_name();
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[64];
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  owner.since = text;
  return owner;
}

std::string serialize(const Owner& owner) {
  const nlohmann::json j = {{"host", owner.host},
                            {"pid", owner.pid},
                            {"start_ticks", owner.start_ticks},
                            {"job", owner.job},
                            {"since", owner.since}};
  return j.dump() + "\n";
}

bool parse(const std::string& text, Owner* owner) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  auto str = [&](const char* key, std::string* out) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return false;
    *out = it->get<std::string>();
    return true;
  };
  const auto pid = j.find("pid");
  const auto ticks = j.find("start_ticks");
  if (pid == j.end() || !pid->is_number_integer() || ticks == j.end() ||
      !ticks->is_number_unsigned()) {
    return false;
  }
  owner->pid = pid->get<int64_t>();
  owner->start_ticks = ticks->get<uint64_t>();
  return str("host", &owner->host) && str("job", &owner->job) && str("since", &owner->since);
}

bool same_process(const Owner& a, const Owner& b) {
  return a.host == b.host && a.pid == b.pid && a.start_ticks == b.start_ticks;
}

// A lock of this host whose process is gone (or whose pid now belongs to another process).
bool stale(const Owner& owner, const std::string& host) {
  if (owner.host != host || owner.pid <= 0) return false;
  if (kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH) return true;
  const uint64_t ticks = start_ticks_of(owner.pid);
  return ticks != 0 && owner.start_ticks != 0 && ticks != owner.start_ticks;
}

// Creates the lock file with its whole content or not at all: written under a temporary name,
// then link()ed into place, which fails with EEXIST if the lock is there.
int create_lock(const std::string& path, const std::string& content) {
  const std::string temp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  const bool written =
      ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  int err = written ? 0 : (errno != 0 ? errno : EIO);
  if (::fsync(fd) != 0 && err == 0) err = errno;
  ::close(fd);
  if (err == 0 && ::link(temp.c_str(), path.c_str()) != 0) err = errno;
  ::unlink(temp.c_str());
  return err;
}

class Held {
 public:
  ~Held() { release(); }
  std::mutex mutex;
  std::map<std::string, const void*> paths;  // lock files this process created: their holder
  void release(const void* holder = nullptr) {
    std::lock_guard<std::mutex> lock(mutex);
    const Owner self = me();
    for (auto it = paths.begin(); it != paths.end();) {
      if (holder != nullptr && it->second != holder) {
        ++it;
        continue;
      }
      std::string text;
      Owner owner;
      // Only our own lock: a stale-lock takeover by another job must not be undone here.
      if (read_small_file(it->first, 4096, &text).is_ok() && parse(text, &owner) &&
          same_process(owner, self)) {
        ::unlink(it->first.c_str());
      }
      it = paths.erase(it);
    }
  }
};

Held& held() {
  static Held instance;  // its destructor removes the locks at exit
  return instance;
}

}  // namespace

Status lock_checkpoint_directory(const std::string& dir, const void* holder) {
  Held& registry = held();
  std::lock_guard<std::mutex> guard(registry.mutex);
  const std::string path = dir + "/" + kCheckpointLockName;
  const Owner self = me();
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int err = create_lock(path, serialize(self));
    if (err == 0) {
      registry.paths[path] = holder;
      return Status::ok();
    }
    if (err != EEXIST) {
      return Status::system_error(fmt::format("creating the checkpoint lock {}", path), err);
    }
    std::string text;
    Owner owner;
    const Status read = read_small_file(path, 4096, &text);
    if (!read.is_ok()) {
      if (read.code() == ZRT_INVALID_ARGUMENT) continue;  // removed meanwhile: try again
      return read.with_context("reading the checkpoint lock");
    }
    if (!parse(text, &owner)) {
      return Status(ZRT_INVALID_USAGE,
                    fmt::format("checkpoint folder {} has a lock file {} that zrt cannot read; if "
                                "no job writes this folder, remove the file",
                                dir, path));
    }
    if (same_process(owner, self)) {
      // Another manager of this process may hold it: one process is one job.
      if (registry.paths.count(path) == 0) registry.paths[path] = holder;
      return Status::ok();
    }
    if (stale(owner, self.host)) {
      ZRT_LOG_WARN("checkpoint: {} was held by pid {} on {} ({}), which is gone; taking it over",
                   path, owner.pid, owner.host, owner.job);
      ::unlink(path.c_str());
      continue;
    }
    return Status(
        ZRT_INVALID_USAGE,
        fmt::format("checkpoint folder {} belongs to another job: {} (pid {} on host {}, "
                    "since {}) holds {}. Save into another folder; if that job is gone{}, "
                    "remove the lock file",
                    dir, owner.job, owner.pid, owner.host, owner.since, path,
                    owner.host == self.host ? "" : " (another host: zrt cannot check it)"));
  }
  return Status(ZRT_INVALID_USAGE,
                fmt::format("checkpoint folder {}: its lock {} keeps changing; another job is "
                            "saving there",
                            dir, path));
}

void release_checkpoint_directory_locks(const void* holder) {
  held().release(holder);
}

}  // namespace zrt
