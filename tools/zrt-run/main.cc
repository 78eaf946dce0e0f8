// zrt-run: starts N local ranks of a zrt program with the environment a launcher provides and
// serves their rendezvous store. See --help.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "tools/zrt-run/launcher.h"

namespace {

constexpr const char* kExamples = R"(Examples:
  zrt-run -n 4 ./train --steps 100       4 ranks, output lines prefixed "[rank] "
  zrt-run -n 2 --no-prefix ./bench       raw output
  zrt-run -n 8 --timeout 600 ./job       kill the job if it runs longer than 10 minutes
  zrt-run -n 2 --tag-output ./prog       "[rank:stdout] " / "[rank:stderr] " prefixes
  zrt-run -n 2 --bind ./prog             each rank on its own cores (see zrt-topo -n 2)

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
MASTER_PORT, ZRT_JOB_TOKEN (random) and ZRT_STORE_EXTERNAL=1: zrt-run serves the rendezvous
store itself. Ranks' stdin is /dev/null. If a rank exits non-zero or is killed, the others get
SIGTERM, then SIGKILL after a grace period, and zrt-run exits non-zero naming the rank.
SIGINT and SIGTERM are forwarded to every rank.)";

}  // namespace

int main(int argc, char** argv) {
  zrt::LaunchOptions options;
  CLI::App app{
      "zrt-run: launch N local ranks of a zrt program\n"
      "Usage: zrt-run -n N [--port P] [--no-prefix] [--tag-output] [--timeout S] program "
      "[args...]"};
  app.footer(kExamples);
  app.add_option("-n,--ranks", options.ranks, "number of ranks to start")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("--port", options.port,
                 "TCP port of zrt's rendezvous store, ZRT_STORE_PORT (0 = any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--master-port", options.master_port,
                 "MASTER_PORT for the framework's own store, e.g. torch.distributed's default "
                 "init (0 = a free port)")
      ->check(CLI::Range(0, 65535));
  bool no_prefix = false;
  app.add_flag("--no-prefix", no_prefix, "do not prefix output lines with the rank");
  app.add_flag("--tag-output", options.tag_output,
               "prefix lines with rank and stream: [rank:stdout] / [rank:stderr]");
  app.add_option("--timeout", options.timeout_s,
                 "seconds after which the whole job is terminated (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace-ms", options.grace_ms,
                 "milliseconds between SIGTERM and SIGKILL when the job is brought down")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  app.add_flag("--bind", options.bind,
               "bind each rank to its own cores, near its GPU/NIC (hwloc; `zrt-topo -n N` "
               "shows the plan); exports ZRT_BIND_CPUS and ZRT_PROGRESS_CPU");
  // Everything from the program name on belongs to the program, options included, so the
  // program is not a CLI11 positional (that would let CLI11 parse the program's options).
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  options.command = app.remaining();
  if (!options.command.empty() && options.command.front() == "--") {
    options.command.erase(options.command.begin());
  }
  if (options.command.empty()) {
    std::fprintf(stderr,
                 "zrt-run: no program given\nUsage: zrt-run -n N [OPTIONS] program [args...]\n"
                 "Run with --help for more information.\n");
    return 2;
  }
  options.prefix = !no_prefix;
  return zrt::run_job(options);
}
