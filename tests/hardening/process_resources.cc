#include "tests/hardening/process_resources.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace zrt::testing {
namespace {

std::vector<std::string> list_dir(const char* path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path);
  if (dir == nullptr) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

bool is_shm_mapping(const std::string& line) {
  return line.find("/dev/shm/") != std::string::npos || line.find("SYSV") != std::string::npos ||
         line.find("memfd:") != std::string::npos;
}

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string ProcessResources::describe() const {
  return fmt::format("threads {}, fds {}, shm mappings {}, SysV segments {}, /dev/shm entries {}",
                     threads, fds, shm_mappings, sysv_segments, dev_shm.size());
}

ProcessResources count_process_resources() {
  ProcessResources out;
  out.threads = static_cast<int>(list_dir("/proc/self/task").size());
  out.fds = static_cast<int>(list_dir("/proc/self/fd").size()) - 1;  // opendir's own fd
  std::istringstream maps(read_file("/proc/self/maps"));
  for (std::string line; std::getline(maps, line);) {
    if (is_shm_mapping(line)) ++out.shm_mappings;
  }
  // Columns: key shmid perms size cpid lpid nattch uid gid ...; the first line is a header.
  std::istringstream sysv(read_file("/proc/sysvipc/shm"));
  std::string line;
  std::getline(sysv, line);
  const long pid = getpid();
  while (std::getline(sysv, line)) {
    std::istringstream fields(line);
    long key = 0, shmid = 0, size = 0, cpid = 0;
    std::string perms;
    if (!(fields >> key >> shmid >> perms >> size >> cpid) || cpid != pid) continue;
    // A segment marked for removal (SHM_DEST, 01000 in the mode) goes away with the last
    // process that has it attached, which may be a peer still closing; our own attachments
    // show in shm_mappings. Only a segment never marked outlives everyone.
    constexpr long kShmDest = 01000;
    if ((std::strtol(perms.c_str(), nullptr, 8) & kShmDest) == 0) ++out.sysv_segments;
  }
  for (const std::string& name : list_dir("/dev/shm")) out.dev_shm.insert(name);
  return out;
}

std::string resource_leaks(const ProcessResources& before, const ProcessResources& after) {
  std::string leaks;
  auto compare = [&leaks](const char* what, int was, int now) {
    if (now != was) leaks += fmt::format("{}: {} before, {} after; ", what, was, now);
  };
  compare("threads", before.threads, after.threads);
  compare("fds", before.fds, after.fds);
  compare("shm mappings", before.shm_mappings, after.shm_mappings);
  compare("SysV segments created by this process", before.sysv_segments, after.sysv_segments);
  const std::string pid = std::to_string(getpid());
  const std::string maps = read_file("/proc/self/maps");
  for (const std::string& name : after.dev_shm) {
    if (before.dev_shm.count(name) != 0) continue;
    if (name.find(pid) != std::string::npos || maps.find("/dev/shm/" + name) != std::string::npos) {
      leaks += fmt::format("/dev/shm/{} is new and ours; ", name);
    }
  }
  return leaks;
}

}  // namespace zrt::testing
