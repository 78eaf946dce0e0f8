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

Several nodes (torchrun's options; run it on every node, node 0 first or last):
  zrt-run --nnodes 2 --node-rank 0 --master-addr h0 --rdzv-id job7 -n 2 ./train    on h0
  zrt-run --nnodes 2 --node-rank 1 --master-addr h0 --rdzv-id job7 -n 2 ./train    on h1

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK=NODE_RANK,
GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ZRT_STORE_ADDR/PORT, ZRT_JOB_TOKEN and
ZRT_STORE_EXTERNAL=1: zrt-run serves the rendezvous store itself, so a dying rank 0 does not
take it along. On one node the store is on loopback, MASTER_PORT a free port (--master-port)
and the token random. On several, node 0's zrt-run serves the store on every interface at
--master-port + 1 (--port), MASTER_PORT = --master-port (default 29500) is left to the
framework as under torchrun, and global ranks are node-major (node K holds K*n .. K*n+n-1).
The job's identity is --rdzv-id, else the launcher's job id (SLURM_JOB_ID, ZRT_JOB_TOKEN, ...);
several nodes need one. A node of another job, or one started with another --nnodes or -n, is
refused with an error on both sides; a node that does not arrive within --join-timeout is named.
Ranks' stdin is /dev/null. If a rank exits non-zero or is killed (on any node), every rank of
the job gets SIGTERM, then SIGKILL after a grace period, and every zrt-run exits non-zero
naming the node and rank. SIGINT and SIGTERM are forwarded to every local rank.)";

}  // namespace

int main(int argc, char** argv) {
  zrt::LaunchOptions options;
  CLI::App app{
      "zrt-run: launch the ranks of a zrt program, on one node or several\n"
      "Usage: zrt-run -n N [--nnodes M --node-rank K --master-addr HOST] [--port P] "
      "[--no-prefix] [--tag-output] [--timeout S] program [args...]"};
  app.footer(kExamples);
  app.add_option("-n,--ranks,--nproc-per-node,--nproc_per_node", options.ranks,
                 "number of ranks to start on this node")
      ->required()
      ->check(CLI::Range(1, 4096));
  app.add_option("--port", options.port,
                 "TCP port of zrt's rendezvous store, ZRT_STORE_PORT (0 = any free port on one "
                 "node, --master-port + 1 on several)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--master-port,--master_port", options.master_port,
                 "MASTER_PORT for the framework's own store, e.g. torch.distributed's default "
                 "init (0 = a free port below the ephemeral range on one node, 29500 on several); "
                 "zrt's store is on the next port unless --port says otherwise")
      ->check(CLI::Range(0, 65535));
  app.add_option("--nnodes", options.nnodes, "number of nodes, each running one zrt-run")
      ->check(CLI::Range(1, 4096));
  app.add_option("--node-rank,--node_rank", options.node_rank,
                 "this node's index, 0..nnodes-1; node 0 serves the job's store")
      ->check(CLI::Range(0, 4095));
  app.add_option("--master-addr,--master_addr", options.master_addr,
                 "node 0's address as the other nodes reach it (MASTER_ADDR)");
  app.add_option("--rdzv-id,--rdzv_id", options.rdzv_id,
                 "the job's identity, the same on every node; needed on several nodes unless "
                 "the launcher gives one (SLURM_JOB_ID, ZRT_JOB_TOKEN, ...)");
  app.add_option("--join-timeout", options.join_timeout_s,
                 "seconds the nodes wait for one another, at the start and at the end")
      ->check(CLI::PositiveNumber);
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
  if (options.node_rank >= options.nnodes) {
    std::fprintf(stderr, "zrt-run: --node-rank %d is not below --nnodes %d\n", options.node_rank,
                 options.nnodes);
    return 2;
  }
  return zrt::run_job(options);
}
