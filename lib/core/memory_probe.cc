#include "lib/core/memory_probe.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace zrt {
namespace {

bool read_first_line(const std::string& path, std::string* line) {
  std::ifstream file(path);
  if (!file) return false;
  std::getline(file, *line);
  return true;
}

bool read_u64(const std::string& path, uint64_t* value) {
  std::string line;
  if (!read_first_line(path, &line)) return false;
  return std::sscanf(line.c_str(), "%lu", value) == 1;
}

bool dir_exists(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Keeps the tightest (smallest headroom) of the limits seen.
void consider_limit(uint64_t limit, uint64_t usage, const std::string& where,
                    MemoryLimits* limits) {
  const uint64_t headroom = usage >= limit ? 0 : limit - usage;
  if (limits->has_cgroup) {
    const uint64_t known = limits->cgroup_usage >= limits->cgroup_limit
                               ? 0
                               : limits->cgroup_limit - limits->cgroup_usage;
    if (known <= headroom) return;
  }
  limits->has_cgroup = true;
  limits->cgroup_limit = limit;
  limits->cgroup_usage = usage;
  limits->cgroup_where = where;
}

// cgroup v2: memory.max (a number or "max") and memory.current of `dir` and its ancestors up
// to the mount root (a parent's limit binds its children too).
void probe_v2(const std::string& root, const std::string& path, MemoryLimits* limits) {
  // Another cgroup namespace shows the host's path: our own cgroup is then the mount root.
  std::string relative = dir_exists(fmt::format("{}{}", root, path)) ? path : std::string();
  for (;;) {
    const std::string dir = fmt::format("{}{}", root, relative == "/" ? "" : relative);
    std::string max_text;
    uint64_t limit = 0, usage = 0;
    if (read_first_line(fmt::format("{}/memory.max", dir), &max_text) && max_text != "max" &&
        std::sscanf(max_text.c_str(), "%lu", &limit) == 1 &&
        read_u64(fmt::format("{}/memory.current", dir), &usage)) {
      consider_limit(limit, usage, fmt::format("{}/memory.max", dir), limits);
    }
    const size_t slash = relative.find_last_of('/');
    if (slash == std::string::npos) break;
    relative.resize(slash);
  }
}

// cgroup v1: the memory controller's limit_in_bytes (unlimited reads as ~2^63) and usage.
void probe_v1(const std::string& root, const std::string& path, MemoryLimits* limits) {
  std::string dir = fmt::format("{}/memory{}", root, path == "/" ? "" : path);
  if (!dir_exists(dir)) dir = fmt::format("{}/memory", root);
  uint64_t limit = 0, usage = 0;
  if (!read_u64(fmt::format("{}/memory.limit_in_bytes", dir), &limit)) return;
  if (limit >= (uint64_t{1} << 60)) return;
  if (!read_u64(fmt::format("{}/memory.usage_in_bytes", dir), &usage)) return;
  consider_limit(limit, usage, fmt::format("{}/memory.limit_in_bytes", dir), limits);
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
}

}  // namespace

MemoryLimits probe_memory(const MemoryProbePaths& paths) {
  MemoryLimits limits;
  {
    std::ifstream meminfo(paths.meminfo);
    std::string line;
    while (std::getline(meminfo, line)) {
      unsigned long long kib = 0;
      if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) {
        limits.has_available = true;
        limits.available = static_cast<uint64_t>(kib) * 1024;
        break;
      }
    }
  }
  {
    std::ifstream cgroups(paths.self_cgroup);
    std::string line;
    while (std::getline(cgroups, line)) {
      // hierarchy-id:controllers:path; v2 is "0::path", v1 lists "memory" among controllers.
      const size_t first = line.find(':');
      const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
      if (second == std::string::npos) continue;
      const std::string controllers = line.substr(first + 1, second - first - 1);
      const std::string path = line.substr(second + 1);
      if (line.compare(0, first, "0") == 0 && controllers.empty()) {
        probe_v2(paths.cgroup_root, path, &limits);
        continue;
      }
      std::stringstream list(controllers);
      std::string controller;
      while (std::getline(list, controller, ',')) {
        if (controller == "memory") probe_v1(paths.cgroup_root, path, &limits);
      }
    }
  }
  struct statvfs shm {};
  if (statvfs(paths.shm_dir.c_str(), &shm) == 0) {
    limits.has_shm = true;
    limits.shm_free = static_cast<uint64_t>(shm.f_bavail) * shm.f_frsize;
  }
  return limits;
}

Status admit_memory(const std::string& what, uint64_t bytes, MemoryPlace place,
                    const MemoryLimits& limits) {
  const uint64_t needed =
      bytes > UINT64_MAX - kAdmissionHeadroomBytes ? UINT64_MAX : bytes + kAdmissionHeadroomBytes;
  std::string figures;
  auto add = [&figures](const std::string& text) {
    if (!figures.empty()) figures += "; ";
    figures += text;
  };
  const char* refused_by = nullptr;
  uint64_t refused_available = 0;
  auto check = [&](const char* name, uint64_t available) {
    if (needed > available && refused_by == nullptr) {
      refused_by = name;
      refused_available = available;
    }
  };
  if (limits.has_available) {
    add(fmt::format("MemAvailable {} bytes ({})", limits.available, gib(limits.available)));
    check("the machine (MemAvailable in /proc/meminfo)", limits.available);
  }
  if (limits.has_cgroup) {
    const uint64_t headroom =
        limits.cgroup_usage >= limits.cgroup_limit ? 0 : limits.cgroup_limit - limits.cgroup_usage;
    add(fmt::format("cgroup limit {} bytes ({}) with {} in use, {} free ({})", limits.cgroup_limit,
                    gib(limits.cgroup_limit), gib(limits.cgroup_usage), gib(headroom),
                    limits.cgroup_where));
    check("the memory cgroup", headroom);
  }
  if (place == MemoryPlace::kShmFilesystem && limits.has_shm) {
    add(fmt::format("/dev/shm free {} bytes ({})", limits.shm_free, gib(limits.shm_free)));
    check("the shared-memory filesystem (/dev/shm)", limits.shm_free);
  }
  if (refused_by == nullptr) return Status::ok();
  const uint64_t usable =
      refused_available > kAdmissionHeadroomBytes ? refused_available - kAdmissionHeadroomBytes : 0;
  return Status::error(ZRT_OUT_OF_MEMORY,
                       "{} needs {} bytes ({}) but {} can give only {} bytes ({}) after keeping "
                       "{} for the rest of the machine ({}); free memory or lower the request",
                       what, bytes, gib(bytes), refused_by, usable, gib(usable),
                       gib(kAdmissionHeadroomBytes), figures);
}

Status admit_memory(const std::string& what, uint64_t bytes, MemoryPlace place) {
  return admit_memory(what, bytes, place, probe_memory());
}

}  // namespace zrt
