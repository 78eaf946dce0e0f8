// A rank program for zrt-run's tests. Modes:
//   env                  print the launcher variables on stdout, one line on stderr
//   fail RANK CODE       rank RANK exits with CODE at once; the others sleep, then say so
//   kill RANK            rank RANK kills itself with SIGKILL; the others sleep
//   bootstrap            all-gather the ranks through the launcher's store and print them
//   orphan DIR           join the store (starting the launcher watch), write DIR/rankR.pid,
//                        then print a line every 5 ms for 30 s (a rank whose launcher dies)
//   plain DIR            write DIR/rankR.pid and sleep 30 s without touching zrt
//   job                  all-gather JOB_MARK (an integer each job's processes share) and say
//                        whether every rank of the communicator has this one's (exit 5 if not);
//                        HELPER_TIMEOUT_MS bounds the bootstrap (default 20000)
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "lib/bootstrap/bootstrap.h"

namespace {

const char* env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

int rank_from_env() {
  return std::atoi(env_or("RANK", "-1"));
}

// Sleeps long enough that only zrt-run's termination can end it in a fast test: longer than the
// 20 s --timeout zrt_run_test gives zrt-run, so "survived" is never printed in time.
int sleep_then_report() {
  std::printf("waiting\n");
  std::fflush(stdout);
  sleep(30);
  std::printf("survived\n");
  return 0;
}

int bootstrap_mode() {
  zrt::EnvRanks ranks;
  zrt::Status status = zrt::read_env_ranks(&ranks);
  if (!status.is_ok()) {
    std::fprintf(stderr, "read_env_ranks: %s\n", status.message().c_str());
    return 2;
  }
  std::unique_ptr<zrt::Bootstrap> bootstrap;
  status = zrt::create_store_bootstrap(ranks, 20000, &bootstrap);
  if (!status.is_ok()) {
    std::fprintf(stderr, "create_store_bootstrap: %s\n", status.message().c_str());
    return 3;
  }
  const int mine = bootstrap->rank() * 10;
  std::vector<int> all(static_cast<size_t>(bootstrap->size()));
  status = bootstrap->allgather(&mine, all.data(), sizeof(mine));
  if (status.is_ok()) status = bootstrap->barrier();
  if (!status.is_ok()) {
    std::fprintf(stderr, "bootstrap: %s\n", status.message().c_str());
    return 4;
  }
  std::string line = "gathered";
  for (int value : all) line += " " + std::to_string(value);
  std::printf("%s external=%d\n", line.c_str(), ranks.store_external ? 1 : 0);
  return 0;
}

// Two jobs must never form one communicator: every rank compares the JOB_MARK of all.
int job_mode() {
  zrt::EnvRanks ranks;
  zrt::Status status = zrt::read_env_ranks(&ranks);
  std::unique_ptr<zrt::Bootstrap> bootstrap;
  const int64_t timeout_ms = std::atoll(env_or("HELPER_TIMEOUT_MS", "20000"));
  if (status.is_ok()) status = zrt::create_store_bootstrap(ranks, timeout_ms, &bootstrap);
  if (!status.is_ok()) {
    std::fprintf(stderr, "job: %s\n", status.message().c_str());
    return 3;
  }
  const int mark = std::atoi(env_or("JOB_MARK", "0"));
  std::vector<int> marks(static_cast<size_t>(bootstrap->size()));
  status = bootstrap->allgather(&mark, marks.data(), sizeof(mark));
  if (!status.is_ok()) {
    std::fprintf(stderr, "job: %s\n", status.message().c_str());
    return 4;
  }
  std::string all;
  bool same = true;
  for (int value : marks) {
    all += " " + std::to_string(value);
    same = same && value == mark;
  }
  std::printf("job %s rank %d/%d local %d/%d marks%s\n", same ? "ok" : "MIXED", bootstrap->rank(),
              bootstrap->size(), bootstrap->local_rank(), bootstrap->local_size(), all.c_str());
  std::fflush(stdout);
  return same ? 0 : 5;
}

void write_pid(const std::string& dir) {
  const std::string path = dir + "/rank" + std::to_string(rank_from_env()) + ".pid";
  const std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) return;
  std::fprintf(file, "%d\n", getpid());
  std::fclose(file);
  std::rename(temporary.c_str(), path.c_str());  // whole or absent for the reader
}

int orphan_mode(const std::string& dir) {
  zrt::EnvRanks ranks;
  zrt::Status status = zrt::read_env_ranks(&ranks);
  std::unique_ptr<zrt::Bootstrap> bootstrap;
  if (status.is_ok()) status = zrt::create_store_bootstrap(ranks, 20000, &bootstrap);
  if (status.is_ok()) status = bootstrap->barrier();
  if (!status.is_ok()) {
    std::fprintf(stderr, "orphan: %s\n", status.message().c_str());
    return 3;
  }
  write_pid(dir);
  for (int i = 0; i < 6000; ++i) {
    std::printf("rank %d line %d\n", bootstrap->rank(), i);
    std::fflush(stdout);
    usleep(5000);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") {
    std::printf("RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s\n",
                env_or("RANK", "-"), env_or("WORLD_SIZE", "-"), env_or("LOCAL_RANK", "-"),
                env_or("LOCAL_WORLD_SIZE", "-"), env_or("MASTER_ADDR", "-"));
    std::printf("MASTER_PORT=%s ZRT_STORE_EXTERNAL=%s TOKEN_LENGTH=%zu ZRT_RANK=%s\n",
                env_or("MASTER_PORT", "-"), env_or("ZRT_STORE_EXTERNAL", "-"),
                std::strlen(env_or("ZRT_JOB_TOKEN", "")), env_or("ZRT_RANK", "unset"));
    std::printf(
        "GROUP_RANK=%s NODE_RANK=%s GROUP_WORLD_SIZE=%s ZRT_STORE_ADDR=%s "
        "ZRT_STORE_PORT=%s\n",
        env_or("GROUP_RANK", "-"), env_or("NODE_RANK", "-"), env_or("GROUP_WORLD_SIZE", "-"),
        env_or("ZRT_STORE_ADDR", "-"), env_or("ZRT_STORE_PORT", "-"));
    std::fprintf(stderr, "to stderr\n");
    std::printf("no newline at the end");
    return 0;
  }
  if (mode == "fail" && argc == 4) {
    if (rank_from_env() == std::atoi(argv[2])) return std::atoi(argv[3]);
    return sleep_then_report();
  }
  if (mode == "kill" && argc == 3) {
    if (rank_from_env() == std::atoi(argv[2])) raise(SIGKILL);
    return sleep_then_report();
  }
  if (mode == "bootstrap") return bootstrap_mode();
  if (mode == "job") return job_mode();
  if (mode == "orphan" && argc == 3) return orphan_mode(argv[2]);
  if (mode == "plain" && argc == 3) {
    write_pid(argv[2]);
    sleep(30);
    return 0;
  }
  std::fprintf(stderr,
               "usage: zrt_run_helper env | fail RANK CODE | kill RANK | bootstrap | orphan DIR | "
               "plain DIR | job\n");
  return 64;
}
