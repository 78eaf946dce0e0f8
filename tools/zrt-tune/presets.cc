#include "tools/zrt-tune/presets.h"

#include <fmt/format.h>

namespace zrt::tune {

const std::vector<PresetShape>& preset_shapes() {
  // tiny and mini are sized for tests and laptops (a few MB, compute of a few ms per unit);
  // the others are GPT-2's published shapes.
  static const std::vector<PresetShape> shapes = {
      {"gpt2-tiny", 4, 128, 8192, 128, 4096, 1.0, "1.9 M params, for tests"},
      {"gpt2-mini", 6, 256, 16384, 256, 8192, 2.0, "9 M params"},
      {"gpt2-small", 12, 768, 50257, 1024, 8192, 50.0, "124 M params"},
      {"gpt2-medium", 24, 1024, 50257, 1024, 8192, 100.0, "355 M params"},
      {"gpt2-large", 36, 1280, 50257, 1024, 8192, 150.0, "774 M params"},
      {"gpt2-xl", 48, 1600, 50257, 1024, 8192, 200.0, "1.56 B params"},
  };
  return shapes;
}

std::string preset_names() {
  std::string names;
  for (const PresetShape& s : preset_shapes()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

Status make_preset(const std::string& name, double tokens, double tflops, Profile* profile) {
  const PresetShape* shape = nullptr;
  for (const PresetShape& s : preset_shapes()) {
    if (s.name == name) shape = &s;
  }
  if (shape == nullptr) {
    return Status::invalid_argument("--preset: unknown preset '{}' (choose {})", name,
                                    preset_names());
  }
  if (tokens < 0 || tflops < 0) {
    return Status::invalid_argument("--tokens and --tflops must be positive");
  }
  const double t = tokens > 0 ? tokens : shape->tokens;
  const double rate = (tflops > 0 ? tflops : shape->tflops) * 1e12;
  const uint64_t h = static_cast<uint64_t>(shape->hidden);
  const uint64_t v = static_cast<uint64_t>(shape->vocab);
  const uint64_t s = static_cast<uint64_t>(shape->seq);
  auto ms = [&](double flops) { return flops / rate * 1e3; };

  Profile out;
  out.name = shape->name;
  ProfileUnit embed;
  embed.name = "embed";
  embed.params = {{"wte.weight", v * h, false}, {"wpe.weight", s * h, false}};
  embed.forward_ms = ms(2.0 * static_cast<double>(v * h) * t);  // the tied output projection
  embed.backward_ms = 2 * embed.forward_ms;
  out.units.push_back(std::move(embed));
  for (int l = 0; l < shape->layers; ++l) {
    ProfileUnit block;
    block.name = fmt::format("h.{}", l);
    block.params = {{"ln_1.weight", h, false},
                    {"ln_1.bias", h, false},
                    {"attn.c_attn.weight", 3 * h * h, false},
                    {"attn.c_attn.bias", 3 * h, false},
                    {"attn.c_proj.weight", h * h, false},
                    {"attn.c_proj.bias", h, false},
                    {"ln_2.weight", h, false},
                    {"ln_2.bias", h, false},
                    {"mlp.c_fc.weight", 4 * h * h, false},
                    {"mlp.c_fc.bias", 4 * h, false},
                    {"mlp.c_proj.weight", 4 * h * h, false},
                    {"mlp.c_proj.bias", h, false}};
    uint64_t params = 0;
    for (const ProfileTensor& p : block.params) params += p.numel;
    block.forward_ms =
        ms(2.0 * static_cast<double>(params) * t + 4.0 * static_cast<double>(s * h) * t);
    block.backward_ms = 2 * block.forward_ms;
    out.units.push_back(std::move(block));
  }
  ProfileUnit final_norm;
  final_norm.name = "ln_f";
  final_norm.params = {{"ln_f.weight", h, false}, {"ln_f.bias", h, false}};
  final_norm.forward_ms = ms(10.0 * static_cast<double>(h) * t);
  final_norm.backward_ms = 2 * final_norm.forward_ms;
  out.units.push_back(std::move(final_norm));
  *profile = std::move(out);
  return Status::ok();
}

}  // namespace zrt::tune
