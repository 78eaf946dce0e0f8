// zrt-mem: plans memory per rank for ZeRO stages 0-3 from the partition manager's own memory
// model. See --help.
#include <fmt/format.h>

#include "tools/zrt-mem/mem_options.h"
#include "tools/zrt-mem/mem_plan.h"

int main(int argc, char** argv) {
  using namespace zrt::mem;
  constexpr int kExitOk = 0, kExitUsage = 2;
  MemCommand command;
  zrt::Status status = parse_mem_command(argc, argv, &command);
  if (status.is_ok() && command.show_help) {
    fmt::print("{}", command.help);
    return kExitOk;
  }
  MemPlan plan;
  if (status.is_ok()) status = plan_memory(command.request, &plan);
  if (!status.is_ok()) {
    fmt::print(stderr, "zrt-mem: {}\n", status.message());
    return kExitUsage;
  }
  if (command.json) {
    fmt::print("{}\n", mem_plan_to_json(command.request, plan).dump(2));
  } else {
    fmt::print("{}", render_mem_plan(command.request, plan));
  }
  return kExitOk;
}
