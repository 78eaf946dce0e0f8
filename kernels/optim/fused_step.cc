#include "kernels/optim/fused_step.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "lib/core/dtype.h"

namespace zrt::optim {

namespace {

bool uses_betas(Kind kind) {
  return kind != Kind::kSgd;
}
bool is_adam(Kind kind) {
  return kind == Kind::kAdam || kind == Kind::kAdamW;
}

Status check_range(double value, const char* field, double low, bool low_open, double high,
                   bool high_open, const char* accepts) {
  const bool ok = std::isfinite(value) && (low_open ? value > low : value >= low) &&
                  (high_open ? value < high : value <= high);
  if (ok) return Status::ok();
  return Status::invalid_argument("config->{} is {}; it accepts {}", field, value, accepts);
}

Status check_flag(int value, const char* field) {
  if (value == 0 || value == 1) return Status::ok();
  return Status::invalid_argument("config->{} is {}; it accepts 0 or 1", field, value);
}

constexpr double kInf = HUGE_VAL;

size_t out_size(OutType out) {
  switch (out) {
    case OutType::kNone:
      return 0;
    case OutType::kF32:
      return 4;
    case OutType::kF16:
    case OutType::kBf16:
      return 2;
  }
  return 0;
}

// Whether piece p's parameter decays.
bool piece_decays(const zrt_optimizer_config_t& config, const zrt_shard_piece_t& piece) {
  if (config.weight_decay == 0.0) return false;
  return config.decay_mask == nullptr || config.decay_mask[piece.param] != 0;
}

Status check_pieces(const zrt_optimizer_args_t& args, const zrt_optimizer_config_t& config) {
  if (args.num_pieces > 0 && args.pieces == nullptr) {
    return Status::invalid_argument("args->pieces is NULL with num_pieces {}", args.num_pieces);
  }
  size_t end = 0;
  for (size_t i = 0; i < args.num_pieces; ++i) {
    const zrt_shard_piece_t& piece = args.pieces[i];
    if (piece.shard_offset < end || piece.count > args.count ||
        piece.shard_offset > args.count - piece.count) {
      return Status::invalid_argument(
          "args->pieces[{}] (param {}, shard elements {} + {}) is outside the shard of {} "
          "elements or overlaps the piece before it; pieces must be in shard order",
          i, piece.param, piece.shard_offset, piece.count, args.count);
    }
    end = piece.shard_offset + piece.count;
    if (config.decay_mask != nullptr &&
        (piece.param < 0 || static_cast<size_t>(piece.param) >= config.decay_mask_count)) {
      return Status::invalid_argument(
          "args->pieces[{}] is of param {}, beyond config->decay_mask_count {}: give the mask "
          "an entry for every parameter",
          i, piece.param, config.decay_mask_count);
    }
  }
  return Status::ok();
}

Status check_spans(const zrt_optimizer_args_t& args) {
  if (args.param_spans == nullptr) {
    return Status::invalid_argument("args->param_spans is NULL with num_param_spans {}",
                                    args.num_param_spans);
  }
  size_t end = 0;
  for (size_t i = 0; i < args.num_param_spans; ++i) {
    const zrt_param_span_t& span = args.param_spans[i];
    if (span.shard_offset != end || span.count > args.count - end ||
        (span.count > 0 && span.data == nullptr)) {
      return Status::invalid_argument(
          "args->param_spans[{}] (shard elements {} + {}, data {}) does not continue the spans "
          "before it (which end at {}) inside the shard of {} elements",
          i, span.shard_offset, span.count, span.data, end, args.count);
    }
    end += span.count;
  }
  if (end != args.count) {
    return Status::invalid_argument("args->param_spans cover {} of the shard's {} elements", end,
                                    args.count);
  }
  return Status::ok();
}

Status check_args(Kind kind, const zrt_optimizer_config_t& config,
                  const zrt_optimizer_args_t& args) {
  if (args.mem_kind != ZRT_MEM_HOST) {
    return Status::error(ZRT_UNSUPPORTED,
                         "args->mem_kind is {}: the fused optimizers run on host memory only",
                         mem_kind_name(args.mem_kind));
  }
  if (args.step < 1) {
    return Status::invalid_argument("args->step is {}; steps count from 1", args.step);
  }
  if (args.count > 0 && (args.master == nullptr || args.grad == nullptr)) {
    return Status::invalid_argument("args->master or args->grad is NULL with count {}", args.count);
  }
  const int needed = state_slots_needed(kind, config);
  if (args.num_state < needed || (needed > 0 && args.state == nullptr)) {
    return Status::invalid_argument(
        "{} needs {} optimizer state slots and args has {} (set optimizer_slots in the "
        "partition config)",
        kind_name(kind), needed, args.num_state);
  }
  for (int s = 0; s < needed; ++s) {
    if (args.count > 0 && args.state[s] == nullptr) {
      return Status::invalid_argument("args->state[{}] is NULL", s);
    }
  }
  return check_pieces(args, config);
}

// The stretches of one span (or of the whole shard without output), with the pieces from
// *piece on, merged where neighbours share their decay setting.
void add_span(const zrt_optimizer_args_t& args, const zrt_optimizer_config_t& config, size_t begin,
              size_t end, char* out, size_t elem, size_t* piece, std::vector<Stretch>* stretches) {
  size_t at = begin;
  bool first = true;
  while (at < end) {
    while (*piece < args.num_pieces &&
           args.pieces[*piece].shard_offset + args.pieces[*piece].count <= at) {
      ++*piece;
    }
    size_t next = end;
    bool decay = false;
    if (*piece < args.num_pieces) {
      const zrt_shard_piece_t& p = args.pieces[*piece];
      if (p.shard_offset <= at) {
        next = std::min(end, p.shard_offset + p.count);
        decay = piece_decays(config, p);
      } else {
        next = std::min(end, p.shard_offset);  // padding up to the next piece
      }
    }
    if (!first && stretches->back().decay == decay) {
      stretches->back().count += next - at;
    } else {
      stretches->push_back(
          Stretch{at, next - at, decay, out == nullptr ? nullptr : out + (at - begin) * elem});
    }
    first = false;
    at = next;
  }
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAdamW:
      return "adamw";
    case Kind::kAdam:
      return "adam";
    case Kind::kSgd:
      return "sgd";
    case Kind::kLion:
      return "lion";
  }
  return "?";
}

zrt_optimizer_config_t default_config(Kind kind) {
  switch (kind) {
    case Kind::kAdamW: {
      const zrt_optimizer_config_t config = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_ADAMW);
      return config;
    }
    case Kind::kAdam: {
      const zrt_optimizer_config_t config = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_ADAM);
      return config;
    }
    case Kind::kSgd: {
      const zrt_optimizer_config_t config = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_SGD);
      return config;
    }
    case Kind::kLion:
      break;
  }
  const zrt_optimizer_config_t config = ZRT_OPTIMIZER_CONFIG_INIT(ZRT_OPTIMIZER_LION);
  return config;
}

Status check_config(Kind kind, const zrt_optimizer_config_t& config) {
  ZRT_RETURN_IF_ERROR(check_range(config.lr, "lr", 0, false, kInf, true, "a finite value >= 0"));
  if (uses_betas(kind)) {
    ZRT_RETURN_IF_ERROR(check_range(config.beta1, "beta1", 0, false, 1, true, "[0, 1)"));
    ZRT_RETURN_IF_ERROR(check_range(config.beta2, "beta2", 0, false, 1, true, "[0, 1)"));
  }
  if (is_adam(kind)) {
    ZRT_RETURN_IF_ERROR(
        check_range(config.eps, "eps", 0, false, kInf, true, "a finite value >= 0"));
    ZRT_RETURN_IF_ERROR(check_flag(config.bias_correction, "bias_correction"));
  }
  ZRT_RETURN_IF_ERROR(check_range(config.weight_decay, "weight_decay", 0, false, kInf, true,
                                  "a finite value >= 0"));
  if (kind == Kind::kSgd) {
    ZRT_RETURN_IF_ERROR(
        check_range(config.momentum, "momentum", 0, false, kInf, true, "a finite value >= 0"));
    ZRT_RETURN_IF_ERROR(
        check_range(config.dampening, "dampening", -kInf, true, kInf, true, "a finite value"));
    ZRT_RETURN_IF_ERROR(check_flag(config.nesterov, "nesterov"));
    if (config.nesterov && (config.momentum <= 0 || config.dampening != 0)) {
      return Status::invalid_argument(
          "config->nesterov is 1 with momentum {} and dampening {}; Nesterov momentum needs "
          "momentum > 0 and dampening 0",
          config.momentum, config.dampening);
    }
  }
  ZRT_RETURN_IF_ERROR(
      check_range(config.grad_scale, "grad_scale", 0, true, kInf, true, "a finite value > 0"));
  return check_range(config.clip_factor, "clip_factor", 0, false, kInf, true,
                     "a finite value >= 0");
}

int state_slots_needed(Kind kind, const zrt_optimizer_config_t& config) {
  switch (kind) {
    case Kind::kAdamW:
    case Kind::kAdam:
      return 2;
    case Kind::kSgd:
      return config.momentum != 0.0 ? 1 : 0;
    case Kind::kLion:
      return 1;
  }
  return 0;
}

StepConstants step_constants(Kind kind, const zrt_optimizer_config_t& config, int64_t step) {
  // Each value as torch.optim computes it in Python (f64), rounded to f32 once, as torch's
  // kernels round a Python scalar.
  const double lr = config.lr;
  StepConstants k;
  k.unscale = static_cast<float>(1.0 / config.grad_scale);
  k.clip = static_cast<float>(config.clip_factor);
  k.decay_factor = static_cast<float>(1.0 - lr * config.weight_decay);
  k.weight_decay = static_cast<float>(config.weight_decay);
  k.beta1 = static_cast<float>(config.beta1);
  k.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  k.beta2 = static_cast<float>(config.beta2);
  k.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  k.neg_lr = static_cast<float>(-lr);
  if (is_adam(kind)) {
    const double s = static_cast<double>(step);
    const double bias1 = config.bias_correction ? 1.0 - std::pow(config.beta1, s) : 1.0;
    const double bias2 = config.bias_correction ? 1.0 - std::pow(config.beta2, s) : 1.0;
    k.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
    k.eps = static_cast<float>(config.eps);
    k.neg_step_size = static_cast<float>(-(lr / bias1));
  }
  if (kind == Kind::kSgd) {
    k.momentum = static_cast<float>(config.momentum);
    k.one_minus_dampening = static_cast<float>(1.0 - config.dampening);
    k.has_momentum = config.momentum != 0.0;
    k.nesterov = config.nesterov != 0;
    k.first_step = step == 1;
  }
  return k;
}

Status output_type(const zrt_optimizer_args_t& args, OutType* out) {
  *out = OutType::kNone;
  if (args.params_written == nullptr || args.num_param_spans == 0) return Status::ok();
  switch (args.param_dtype) {
    case ZRT_F32:
      *out = OutType::kF32;
      return Status::ok();
    case ZRT_F16:
      *out = OutType::kF16;
      return Status::ok();
    case ZRT_BF16:
      *out = OutType::kBf16;
      return Status::ok();
    default:
      return Status::invalid_argument("args->param_dtype is {}; parameters are f32, f16 or bf16",
                                      dtype_name(args.param_dtype));
  }
}

Status plan_stretches(const zrt_optimizer_args_t& args, const zrt_optimizer_config_t& config,
                      OutType out, std::vector<Stretch>* stretches) {
  ZRT_RETURN_IF_ERROR(check_pieces(args, config));
  stretches->clear();
  size_t piece = 0;
  if (out == OutType::kNone) {
    add_span(args, config, 0, args.count, nullptr, 0, &piece, stretches);
    return Status::ok();
  }
  ZRT_RETURN_IF_ERROR(check_spans(args));
  for (size_t i = 0; i < args.num_param_spans; ++i) {
    const zrt_param_span_t& span = args.param_spans[i];
    add_span(args, config, span.shard_offset, span.shard_offset + span.count,
             static_cast<char*>(span.data), out_size(out), &piece, stretches);
  }
  return Status::ok();
}

Status fused_step(Kind kind, const zrt_optimizer_config_t& config, const zrt_optimizer_args_t& args,
                  const KernelTable& table, ThreadPool* pool) {
  ZRT_RETURN_IF_ERROR(check_config(kind, config));
  ZRT_RETURN_IF_ERROR(check_args(kind, config, args));
  OutType out = OutType::kNone;
  ZRT_RETURN_IF_ERROR(output_type(args, &out));
  std::vector<Stretch> stretches;
  ZRT_RETURN_IF_ERROR(plan_stretches(args, config, out, &stretches));
  const StepConstants constants = step_constants(kind, config, args.step);
  const int slots = state_slots_needed(kind, config);
  float* state0 = slots > 0 ? args.state[0] : nullptr;
  float* state1 = slots > 1 ? args.state[1] : nullptr;
  const size_t elem = out_size(out);

  // Contiguous ranges, one per task, cut at multiples of 16 elements (64 bytes of f32).
  const size_t total = args.count;
  const int threads = pool != nullptr ? pool->threads() : 1;
  const size_t useful = std::max<size_t>(1, total / kMinElementsPerThread);
  const int tasks = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), useful));
  auto bound = [&](int t) -> size_t {
    if (t >= tasks) return total;
    const size_t n = static_cast<size_t>(tasks);
    const size_t i = static_cast<size_t>(t);
    const size_t at = total / n * i + total % n * i / n;
    return at / 16 * 16;
  };
  const std::function<void(int)> task = [&](int t) {
    const size_t lo = bound(t);
    const size_t hi = bound(t + 1);
    // The first stretch that ends after lo.
    auto it = std::upper_bound(stretches.begin(), stretches.end(), lo,
                               [](size_t at, const Stretch& s) { return at < s.begin + s.count; });
    for (; it != stretches.end() && it->begin < hi; ++it) {
      const size_t begin = std::max(lo, it->begin);
      const size_t end = std::min(hi, it->begin + it->count);
      Run run;
      run.master = args.master + begin;
      run.grad = args.grad + begin;
      run.state0 = state0 != nullptr ? state0 + begin : nullptr;
      run.state1 = state1 != nullptr ? state1 + begin : nullptr;
      run.out =
          it->out == nullptr ? nullptr : static_cast<char*>(it->out) + (begin - it->begin) * elem;
      run.count = end - begin;
      table.kernel(kind, it->decay, it->out == nullptr ? OutType::kNone : out)(constants, run);
    }
  };
  if (pool != nullptr && tasks > 1) {
    pool->run(tasks, task);
  } else {
    task(0);
  }
  if (out != OutType::kNone) *args.params_written = 1;
  return Status::ok();
}

}  // namespace zrt::optim
