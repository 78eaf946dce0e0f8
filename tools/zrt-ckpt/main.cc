// zrt-ckpt: inspects a sharded checkpoint (parameters, sizes, dtypes, the N it was saved at,
// checksums) and converts it into one consolidated safetensors file, offline.
//
//   zrt-ckpt inspect DIR [--verify] [--json]
//   zrt-ckpt convert DIR OUT.safetensors [--dtype f32|f16|bf16]
//
// Exit status: 0 ok, 1 a checkpoint error (the message names the file and parameter), 2 usage.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "zero/checkpoint/checkpoint_reader.h"
#include "lib/core/dtype.h"
#include "tools/zrt-ckpt/ckpt_report.h"

int main(int argc, char** argv) {
  CLI::App app{"zrt-ckpt: inspect, verify and consolidate zrt sharded checkpoints"};
  app.require_subcommand(1);
  std::string dir, out, dtype_text = "f32";
  bool verify = false, json = false;
  CLI::App* inspect = app.add_subcommand("inspect", "print parameters, sizes, dtypes and files");
  inspect->add_option("dir", dir, "checkpoint folder")->required();
  inspect->add_flag("--verify", verify, "recompute every file's checksum");
  inspect->add_flag("--json", json, "print JSON instead of tables");
  CLI::App* convert =
      app.add_subcommand("convert", "write the full parameters into one safetensors file");
  convert->add_option("dir", dir, "checkpoint folder")->required();
  convert->add_option("out", out, "output file (safetensors)")->required();
  convert->add_option("--dtype", dtype_text, "f32, f16 or bf16 (converted from the f32 master)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (convert->parsed()) {
    zrt_dtype_t dtype = ZRT_F32;
    if (!zrt::dtype_from_name(dtype_text.c_str(), &dtype)) {
      fmt::print(stderr, "zrt-ckpt: --dtype {}: unknown dtype\n", dtype_text);
      return 2;
    }
    const zrt::Status status = zrt::consolidate_checkpoint(dir, out, dtype);
    if (!status.is_ok()) {
      fmt::print(stderr, "zrt-ckpt: {}\n", status.message());
      return 1;
    }
    fmt::print("wrote {} ({})\n", out, zrt::dtype_name(dtype));
    return 0;
  }

  zrt::CheckpointReader reader;
  zrt::Status status = reader.open(dir);
  if (!status.is_ok()) {
    fmt::print(stderr, "zrt-ckpt: {}\n", status.message());
    return 1;
  }
  zrt::ckpt::Verification verified(reader.manifest().files.size());
  bool all_ok = true;
  for (size_t i = 0; verify && i < verified.size(); ++i) {
    uint64_t actual = 0;
    const zrt::Status check = reader.verify_file(i, &actual);
    verified[i] = check.is_ok() ? "ok" : check.message();
    all_ok = all_ok && check.is_ok();
  }
  if (json) {
    fmt::print("{}\n", zrt::ckpt::inspection_to_json(reader, verified).dump(2));
  } else {
    fmt::print("{}", zrt::ckpt::render_inspection(reader, verified));
  }
  return all_ok ? 0 : 1;
}
