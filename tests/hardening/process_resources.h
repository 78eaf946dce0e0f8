// What a process holds that a communicator may create and must give back: threads, file
// descriptors and shared memory (mappings of /dev/shm files, SysV segments and memfds, SysV
// segments this process created, and /dev/shm files). Compared before init and after destroy
// to prove that zrt_comm_destroy releases everything, also after an error.
#pragma once

#include <set>
#include <string>

namespace zrt::testing {

struct ProcessResources {
  int threads = 0;                // entries of /proc/self/task
  int fds = 0;                    // entries of /proc/self/fd (the listing's own fd excluded)
  int shm_mappings = 0;           // /proc/self/maps lines of /dev/shm files, SysV segments, memfds
  int sysv_segments = 0;          // /proc/sysvipc/shm entries whose creator is this process
  std::set<std::string> dev_shm;  // names in /dev/shm (a set: other processes add their own)

  // "threads 5, fds 12, shm mappings 0, SysV segments 0, /dev/shm entries 3".
  std::string describe() const;
};

ProcessResources count_process_resources();

// Empty when `after` holds nothing that `before` did not, else what leaked. New /dev/shm names
// count only if this process still maps them or they carry its pid: other processes on the
// machine (other ranks, other tests) create and remove their own entries meanwhile.
std::string resource_leaks(const ProcessResources& before, const ProcessResources& after);

}  // namespace zrt::testing
