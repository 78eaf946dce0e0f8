#include "rss.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace train_lm {

int64_t proc_status_bytes(const char* field) {
  FILE* file = std::fopen("/proc/self/status", "r");
  if (file == nullptr) return -1;
  const size_t length = std::strlen(field);
  char line[256];
  int64_t bytes = -1;
  while (std::fgets(line, sizeof(line), file) != nullptr) {
    long long kib = 0;
    if (std::strncmp(line, field, length) == 0 && line[length] == ':' &&
        std::sscanf(line + length + 1, "%lld", &kib) == 1) {
      bytes = static_cast<int64_t>(kib) * 1024;
      break;
    }
  }
  std::fclose(file);
  return bytes;
}

int64_t peer_memfd_resident_bytes() {
  // The inodes of the memfds this process holds open.
  std::vector<unsigned long long> own;
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return -1;
  while (const dirent* entry = readdir(fds)) {
    if (entry->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    char target[256];
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    struct stat info {};
    if (std::strncmp(target, "/memfd:", 7) == 0 && stat(path.c_str(), &info) == 0) {
      own.push_back(static_cast<unsigned long long>(info.st_ino));
    }
  }
  closedir(fds);

  FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return -1;
  int64_t bytes = 0;
  bool peer = false;  // the mapping whose fields follow is a peer's memfd
  char line[4096];
  while (std::fgets(line, sizeof(line), smaps) != nullptr) {
    unsigned long long inode = 0;
    int name_at = 0;
    // A mapping's header: "start-end perms offset dev inode [name]"; its fields follow, one
    // "Name: value" per line, which this pattern does not match.
    if (std::sscanf(line, "%*x-%*x %*s %*x %*s %llu %n", &inode, &name_at) == 1 &&
        name_at > 0) {
      peer = std::strncmp(line + name_at, "/memfd:", 7) == 0 &&
             std::find(own.begin(), own.end(), inode) == own.end();
      continue;
    }
    long long kib = 0;
    if (peer && std::sscanf(line, "Rss: %lld kB", &kib) == 1) bytes += kib * 1024;
  }
  std::fclose(smaps);
  return bytes;
}

void RssProbe::take_baseline() {
  // The peak from here on: "5" resets VmHWM to the current RSS (Linux 4.0 on), so that a
  // transient before the baseline cannot pass for zrt's growth. Where the write is refused,
  // VmHWM stays the whole run's peak, which errs only if such a transient rose above the
  // baseline plus zrt's buffers.
  if (FILE* clear = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", clear);
    std::fclose(clear);
  }
  peers_baseline = peer_memfd_resident_bytes();
  baseline = proc_status_bytes("VmRSS");
}

void RssProbe::take_peak() {
  peak = proc_status_bytes("VmHWM");
  peers_end = peer_memfd_resident_bytes();
}

}  // namespace train_lm
