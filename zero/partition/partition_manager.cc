// The coordinator: registration, finalize (layout, resources, cross-rank check, the parts),
// parameter loading, the queries, and each training call's argument and state checks before
// it goes to the part that does the work.
#include "zero/partition/partition_manager.h"

#include <algorithm>
#include <cstdint>

#include "collectives/collectives.h"
#include "zero/comm/communicator.h"
#include "lib/core/dtype.h"
#include "lib/core/log.h"
#include "engine/device.h"
#include "engine/engine.h"
#include "zero/partition/model_agreement.h"

namespace zrt {

PartitionManager::PartitionManager(Communicator& comm, const PartitionOptions& options)
    : world_(comm), ctx_(std::make_unique<PartitionContext>(comm, options)) {}

PartitionManager::~PartitionManager() {
  const Status status = destroy();
  if (!status.is_ok()) ZRT_LOG_WARN("partition manager destroyed with: {}", status.message());
}

Status PartitionManager::check_finalized(const char* what) const {
  if (destroyed_) return Status::invalid_usage("{}: the partition manager was destroyed", what);
  if (!finalized_) {
    return Status::invalid_usage("{}: call zrt_partition_finalize first", what);
  }
  return Status::ok();
}

Status PartitionManager::check_unit(int unit) const {
  if (unit < 0 || static_cast<size_t>(unit) >= unit_specs_.size()) {
    return Status::invalid_argument("unit {} is unknown ({} units registered)", unit,
                                    unit_specs_.size());
  }
  return Status::ok();
}

Status PartitionManager::check_not_armed(const char* what) const {
  if (step_ == nullptr || !step_->armed()) return Status::ok();
  return Status::invalid_usage(
      "{}: the step's optimizer was registered with zrt_partition_step_in_backward and runs "
      "during this backward; call {} after zrt_partition_step",
      what, what);
}

Status PartitionManager::check_armed_microbatch(const char* what) const {
  if (step_ == nullptr || !step_->armed_backward_done()) return Status::ok();
  return Status::invalid_usage(
      "{}: the micro-batch armed by zrt_partition_step_in_backward is complete and its "
      "optimizer has run; call zrt_partition_step before the next micro-batch",
      what);
}

Status PartitionManager::check_param(int param) const {
  if (param < 0 || static_cast<size_t>(param) >= param_specs_.size()) {
    return Status::invalid_argument("param {} is unknown ({} parameters registered)", param,
                                    param_specs_.size());
  }
  return Status::ok();
}

Status PartitionManager::add_unit(const std::string& name, int* unit) {
  if (finalized_) {
    return Status::invalid_usage("cannot add unit \"{}\": the partition is already finalized",
                                 name);
  }
  unit_specs_.push_back({name});
  *unit = static_cast<int>(unit_specs_.size()) - 1;
  return Status::ok();
}

Status PartitionManager::register_param(ParamSpec spec, int* param) {
  const std::string& name = spec.name;
  if (finalized_) {
    return Status::invalid_usage("cannot add param \"{}\": the partition is already finalized",
                                 name);
  }
  ZRT_RETURN_IF_ERROR(check_unit(spec.unit));
  if (spec.numel == 0) return Status::invalid_argument("param \"{}\": numel is 0", name);
  if (spec.numel > kMaxNumel) {
    return Status::invalid_argument(
        "param \"{}\": numel {} is over the limit of {} (2^50) elements per parameter", name,
        spec.numel, kMaxNumel);
  }
  const size_t registered = registered_numel_;  // <= kMaxNumel: the subtraction cannot wrap
  if (spec.numel > kMaxNumel - registered) {
    return Status::invalid_argument(
        "param \"{}\": {} elements bring the model to {}, over the limit of {} (2^50) elements in "
        "all",
        name, spec.numel, registered + spec.numel, kMaxNumel);
  }
  if ((spec.flags & ~(ZRT_PARAM_FROZEN | ZRT_PARAM_UNSHARDED)) != 0) {
    return Status::invalid_argument("param \"{}\": unknown flags {:#x}", name, spec.flags);
  }
  registered_numel_ += spec.numel;
  param_specs_.push_back(std::move(spec));
  *param = static_cast<int>(param_specs_.size()) - 1;
  return Status::ok();
}

Status PartitionManager::add_param(int unit, const std::string& name, size_t numel, uint32_t flags,
                                   int* param) {
  ParamSpec spec{name, numel, unit, flags, ctx_->options.param_dtype, {}, /*shaped=*/false};
  // A 1-D shape of a numel that int64 cannot hold would not be a shape any framework has.
  if (numel <= static_cast<size_t>(INT64_MAX)) spec.dims = {static_cast<int64_t>(numel)};
  return register_param(std::move(spec), param);
}

Status PartitionManager::add_param_shaped(int unit, const std::string& name, int ndim,
                                          const int64_t* dims, zrt_dtype_t dtype, uint32_t flags,
                                          int* param) {
  if (ndim < 0 || ndim > ZRT_MAX_DIMS) {
    return Status::invalid_argument("param \"{}\": ndim is {}; expected 0..{} (ZRT_MAX_DIMS)", name,
                                    ndim, ZRT_MAX_DIMS);
  }
  if (ndim > 0 && dims == nullptr) {
    return Status::invalid_argument("param \"{}\": dims is NULL with ndim {}", name, ndim);
  }
  if (dtype == ZRT_F64) {
    return Status::invalid_argument(
        "param \"{}\": float64 parameters are not supported (zrt trains f32, f16 and bf16 "
        "parameters with f32 master weights); register it as float32 (in torch: "
        "module.float() before sharding)",
        name);
  }
  if (dtype != ZRT_F32 && dtype != ZRT_F16 && dtype != ZRT_BF16) {
    return Status::invalid_argument(
        "param \"{}\": dtype {} is not a parameter dtype; expected f32, f16 or bf16", name,
        dtype_name(dtype));
  }
  ParamSpec spec{name, 1, unit, flags, dtype, {}, /*shaped=*/true};
  for (int d = 0; d < ndim; ++d) {
    if (dims[d] < 1) {
      return Status::invalid_argument(
          "param \"{}\": dims[{}] is {}; every dimension must be at least 1 (zrt parameters "
          "hold at least one element)",
          name, d, dims[d]);
    }
    const auto dim = static_cast<uint64_t>(dims[d]);
    if (dim > SIZE_MAX / spec.numel) {
      return Status::invalid_argument(
          "param \"{}\": the shape's element count overflows size_t at dims[{}] = {}", name, d,
          dims[d]);
    }
    spec.numel *= static_cast<size_t>(dim);
    spec.dims.push_back(dims[d]);
  }
  return register_param(std::move(spec), param);
}

// Every rank must have registered the same model with the same configuration, or the
// collectives would pair mismatched buffers: a wrong result or a hang. One all-gather of two
// digests per rank proves it before anything else runs.
Status PartitionManager::check_ranks_agree() {
  // Over the world, not the shard group: the groups' collectives pair up too.
  Communicator& comm = world_;
  const int size = comm.size();
  if (size == 1) return Status::ok();
  // The model digest covers what the layout does not: the registered shapes and dtypes.
  const uint64_t model = ctx_->layout.hash() ^ model_digest(unit_specs_, param_specs_);
  uint64_t mine[2] = {partition_options_hash(ctx_->options, 0x7a72), model};
  std::vector<uint64_t> all(2 * static_cast<size_t>(size), 0);
  CollectiveArgs args;
  args.kind = ZRT_COLL_ALL_GATHER;
  args.sendbuf = mine;
  args.recvbuf = all.data();
  args.count = sizeof(mine);
  args.dtype = ZRT_U8;
  ZRT_RETURN_IF_ERROR(comm.run_internal(
      args, "checking that every rank registered the same model and configuration"));
  std::string config_differs, model_differs;
  for (int r = 0; r < size; ++r) {
    if (all[2 * r] != all[0]) config_differs += fmt::format(" {}", r);
    if (all[2 * r + 1] != all[1]) model_differs += fmt::format(" {}", r);
  }
  if (!config_differs.empty()) {
    return Status::invalid_usage(
        "ranks disagree on the partition configuration: ranks{} differ from rank 0",
        config_differs);
  }
  if (!model_differs.empty()) {
    // Every rank saw the same digests, so every rank takes this path together.
    return explain_model_mismatch(comm, unit_specs_, param_specs_, model_differs);
  }
  return Status::ok();
}

Status PartitionManager::finalize() {
  if (destroyed_) return Status::invalid_usage("the partition manager was destroyed");
  if (finalized_) return Status::invalid_usage("zrt_partition_finalize was already called");
  if (!groups_.formed) ZRT_RETURN_IF_ERROR(form_shard_groups(world_, ctx_->options, &groups_));
  if (groups_.hybrid()) {
    const PartitionOptions options = ctx_->options;
    ctx_ =
        std::make_unique<PartitionContext>(*groups_.group, world_, groups_.replicas.get(), options);
  } else if (ctx_->options.hpz_group_size != groups_.secondary_size) {
    // The plan and the window read hpZ's group size as resolved (ZRT_SHARD_GROUP_HOST or off).
    PartitionOptions options = ctx_->options;
    options.hpz_group_size = groups_.secondary_size;
    ctx_ = std::make_unique<PartitionContext>(world_, options);
  }
  if (groups_.secondary != nullptr) {
    ctx_->secondary.comm = groups_.secondary.get();
    ctx_->secondary.size = groups_.secondary_size;
    ctx_->secondary.rank = groups_.secondary->rank();
  }
  ZRT_RETURN_IF_ERROR(
      Layout::build(ctx_->options, ctx_->size, unit_specs_, param_specs_, &ctx_->layout));
  ZRT_RETURN_IF_ERROR(check_ranks_agree());
  ctx_->plan = plan_buffers(ctx_->options, ctx_->layout);
  for (const UnitSpec& unit : unit_specs_) ctx_->unit_names.push_back(unit.name);
  ZRT_RETURN_IF_ERROR(resources_.setup(*ctx_));
  ctx_->shard = ctx_->layout.shard_map(ctx_->layout.shards() == 1 ? 0 : ctx_->rank);
  window_ = std::make_unique<GatherWindow>(*ctx_);
  grads_ = std::make_unique<GradientPipeline>(*ctx_);
  step_ = std::make_unique<StepTransaction>(*ctx_, *window_, *grads_);
  finalized_ = true;
  ZRT_LOG_INFO("partition: stage {}, {} units, {} trainable elements ({} padded) in {} segments",
               ctx_->policy.stage(), unit_specs_.size(), ctx_->layout.trainable_numel(),
               ctx_->layout.padded_numel(), ctx_->layout.segments().size());
  return Status::ok();
}

Status PartitionManager::load_param(int param, const void* values, zrt_dtype_t dtype) {
  ZRT_RETURN_IF_ERROR(check_finalized("load_param"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  if (values == nullptr) return Status::invalid_argument("values is NULL");
  if (dtype != ZRT_F32 && dtype != ZRT_F16 && dtype != ZRT_BF16) {
    return Status::invalid_argument("dtype {} is not f32, f16 or bf16", dtype_name(dtype));
  }
  ZRT_RETURN_IF_ERROR(check_not_armed("load_param"));
  ZRT_RETURN_IF_ERROR(step_->check_not_interrupted("load_param"));
  ZRT_RETURN_IF_ERROR(step_->prepare_master_write());
  // Units gathered ahead hold the old parameters.
  window_->forget();
  const ParamLocation& loc = ctx_->layout.params()[param];
  const PartitionBuffers& buf = ctx_->buffers;
  ElementOps& ops = *ctx_->ops;
  const zrt_dtype_t pdt = ctx_->options.param_dtype;
  const size_t in_size = dtype_size(dtype);
  const char* in = static_cast<const char*>(values);
  if (loc.place == ParamPlace::kFrozen) {
    ops.convert(dtype, in, pdt, ctx_->param_ptr(buf.frozen, loc.view_offset), loc.numel);
    return Status::ok();
  }
  if (!ctx_->policy.shards_params() || loc.place == ParamPlace::kPersistent) {
    ops.convert(dtype, in, pdt, ctx_->param_ptr(buf.full_params, loc.view_offset), loc.numel);
  }
  for (int index : ctx_->shard.param_pieces[param]) {
    const zrt_shard_piece_t& piece = ctx_->shard.pieces[index];
    const char* src = in + piece.param_offset * in_size;
    ops.convert(dtype, src, ZRT_F32, buf.master + piece.shard_offset, piece.count);
    if (buf.param_shard != nullptr) {
      ops.convert(dtype, src, pdt, ctx_->param_ptr(buf.param_shard, piece.shard_offset),
                  piece.count);
    }
  }
  return Status::ok();
}

Status PartitionManager::param_info(int param, zrt_param_info_t* info) const {
  ZRT_RETURN_IF_ERROR(check_finalized("param_info"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  const ParamLocation& loc = ctx_->layout.params()[param];
  info->unit = loc.unit;
  info->numel = loc.numel;
  info->flags = loc.flags;
  info->resident = !ctx_->policy.shards_params() || loc.place != ParamPlace::kSegmented;
  info->first_segment = loc.first_segment;
  info->last_segment = loc.last_segment;
  info->segment_offset = loc.segment_offset;
  info->view_offset = loc.view_offset;
  const ParamSpec& spec = param_specs_[param];
  info->dtype = spec.dtype;
  info->ndim = static_cast<int>(spec.dims.size());
  for (int d = 0; d < ZRT_MAX_DIMS; ++d) {
    info->dims[d] = d < info->ndim ? spec.dims[static_cast<size_t>(d)] : 0;
  }
  return Status::ok();
}

Status PartitionManager::shard_pieces(const zrt_shard_piece_t** pieces, size_t* count) const {
  ZRT_RETURN_IF_ERROR(check_finalized("shard_pieces"));
  *pieces = ctx_->shard.pieces.data();
  *count = ctx_->shard.pieces.size();
  return Status::ok();
}

Status PartitionManager::fetch(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("fetch"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  ZRT_RETURN_IF_ERROR(step_->check_not_interrupted("fetch"));
  if (window_->is_fetched(unit)) {
    return Status::invalid_usage("unit {} (\"{}\") is already fetched; release it first", unit,
                                 unit_specs_[unit].name);
  }
  if (step_->armed() && (grads_->is_signalled(unit) || step_->armed_backward_done())) {
    // Its segment's optimizer may be running or done: the parameters are neither this step's
    // nor the next's until the step commits.
    return Status::invalid_usage(
        "fetch of unit {} (\"{}\"): its gradients were signalled in the micro-batch armed by "
        "zrt_partition_step_in_backward, whose optimizer may already have updated its "
        "parameters; fetch a unit before its grad_ready, or after zrt_partition_step",
        unit, unit_specs_[unit].name);
  }
  ZRT_RETURN_IF_ERROR(window_->fetch(unit));
  // Every fetch after master or state changed enqueues a share of the step backup's copy, so it
  // runs behind the framework's compute, spread over the forward; after this unit's gather and
  // prefetches, so that it delays none the framework is waiting for.
  step_->on_fetch();
  return Status::ok();
}

Status PartitionManager::release(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("release"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  if (!window_->is_fetched(unit)) {
    return Status::invalid_usage("unit {} (\"{}\") is not fetched, so it cannot be released", unit,
                                 unit_specs_[unit].name);
  }
  return window_->release(unit);
}

Status PartitionManager::param_data(int param, void** data) const {
  ZRT_RETURN_IF_ERROR(check_finalized("param_data"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  const ParamLocation& loc = ctx_->layout.params()[param];
  const PartitionBuffers& buf = ctx_->buffers;
  if (loc.place == ParamPlace::kFrozen) {
    *data = ctx_->param_ptr(buf.frozen, loc.view_offset);
  } else if (!ctx_->policy.shards_params() || loc.place == ParamPlace::kPersistent) {
    *data = ctx_->param_ptr(buf.full_params, loc.view_offset);
  } else {
    // Stage 3: the unit's own address, fixed whether it is fetched or not (its data is there
    // only while it is); on the slot-address path (bench only) where its slot is, if fetched.
    char* view = window_->unit_address(loc.unit);
    if (view == nullptr) view = window_->unit_view(loc.unit);
    if (view == nullptr) {
      return Status::invalid_usage("param {} (\"{}\"): its unit {} is not fetched", param,
                                   param_specs_[param].name, loc.unit);
    }
    *data = ctx_->param_ptr(view, loc.view_offset);
  }
  return Status::ok();
}

Status PartitionManager::wait_params() {
  ZRT_RETURN_IF_ERROR(check_finalized("wait_params"));
  // Everything a step or a load publishes is enqueued on the all-gather stream (conversions,
  // the stages 1/2 gathers, stage 3's persistent gather); units gathered on fetch have their
  // own events and are the fetch's business.
  return ctx_->streams.ag->synchronize().with_context(
      "waiting for the parameters the last step published");
}

Status PartitionManager::grad_data(int param, void** grad) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_data"));
  ZRT_RETURN_IF_ERROR(check_param(param));
  ZRT_RETURN_IF_ERROR(step_->check_not_interrupted("grad_data"));
  const ParamLocation& loc = ctx_->layout.params()[param];
  if (loc.place == ParamPlace::kFrozen) {
    return Status::invalid_argument("param {} (\"{}\") is frozen: it has no gradient", param,
                                    param_specs_[param].name);
  }
  ZRT_RETURN_IF_ERROR(check_armed_microbatch("grad_data"));
  const int open = grads_->open_unit();
  if (open >= 0 && open != loc.unit) {
    return Status::invalid_usage(
        "param {} belongs to unit {}, but unit {}'s gradients are open: signal them with "
        "zrt_partition_grad_ready first",
        param, loc.unit, open);
  }
  // After grad_ready the unit's gradients are being reduced: a write now would race the
  // reduction or be lost. The buffer comes back with the next micro-batch.
  if (grads_->is_signalled(loc.unit)) {
    return Status::invalid_usage(
        "param {} (\"{}\"): unit {}'s gradients were already signalled with "
        "zrt_partition_grad_ready in this micro-batch; take grad_data before grad_ready, or "
        "after the remaining units are signalled (the next micro-batch)",
        param, param_specs_[param].name, loc.unit);
  }
  // Opening a unit that grad_ready would refuse would leave its gradients open for good.
  if (open < 0 && !grads_->backward_stays_completable(loc.unit)) {
    return Status::invalid_usage(
        "param {} (\"{}\") of unit {}: that unit's gradients now would leave the reduction "
        "buckets held by partly filled segments that no later unit could complete; take the "
        "gradients of units in backward order (the reverse of registration): unit {} next",
        param, param_specs_[param].name, loc.unit, grads_->next_in_backward_order());
  }
  return grads_->grad_data(param, grad);
}

Status PartitionManager::set_sync(bool sync) {
  ZRT_RETURN_IF_ERROR(check_finalized("set_sync"));
  ZRT_RETURN_IF_ERROR(step_->check_not_interrupted("set_sync"));
  if (grads_->microbatch_started()) {
    return Status::invalid_usage(
        "set_sync in the middle of a backward pass ({} of {} units "
        "signalled); call it between micro-batches",
        grads_->signalled_count(), ctx_->layout.trainable_units());
  }
  if (!sync && ctx_->buffers.full_grads == nullptr) {
    return Status::invalid_usage(
        "stage {} keeps no full local gradients, so a micro-batch cannot skip the reduction; "
        "set no_sync_accumulation in the config",
        ctx_->policy.stage());
  }
  if (!sync && step_->armed()) {
    return Status::invalid_usage(
        "set_sync(0): the step's optimizer was registered with zrt_partition_step_in_backward "
        "for the coming micro-batch, which must reduce; arm it before the step's last "
        "micro-batch instead");
  }
  grads_->set_sync(sync);
  return Status::ok();
}

Status PartitionManager::grad_ready(int unit) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_ready"));
  ZRT_RETURN_IF_ERROR(check_unit(unit));
  if (ctx_->layout.units()[unit].trainable_numel == 0) {
    return Status::invalid_argument("unit {} (\"{}\") has no trainable parameter", unit,
                                    unit_specs_[unit].name);
  }
  ZRT_RETURN_IF_ERROR(check_armed_microbatch("grad_ready"));
  if (grads_->is_signalled(unit)) {
    return Status::invalid_usage("unit {} (\"{}\"): gradients signalled twice in one micro-batch",
                                 unit, unit_specs_[unit].name);
  }
  const int open = grads_->open_unit();
  if (open >= 0 && open != unit) {
    return Status::invalid_usage("grad_ready of unit {} while unit {}'s gradients are open", unit,
                                 open);
  }
  if (!grads_->backward_stays_completable(unit)) {
    return Status::invalid_usage(
        "unit {} (\"{}\"): its gradients now would leave the reduction buckets held by "
        "partly filled segments that no later unit could complete; signal units in backward "
        "order (the reverse of registration): unit {} next",
        unit, unit_specs_[unit].name, grads_->next_in_backward_order());
  }
  return grads_->grad_ready(unit);
}

Status PartitionManager::grad_norm(double* norm, bool* has_nonfinite) {
  ZRT_RETURN_IF_ERROR(check_finalized("grad_norm"));
  if (norm == nullptr && has_nonfinite == nullptr) {
    return Status::invalid_argument("norm and has_nonfinite are both NULL");
  }
  if (step_->armed()) {
    // The callbacks have already read (or are reading) the gradients unclipped.
    return Status::invalid_usage(
        "grad_norm: the step's optimizer was registered with zrt_partition_step_in_backward and "
        "runs as the gradients are reduced, before a norm could scale them; to clip, call "
        "grad_norm and then zrt_partition_step without arming");
  }
  return grads_->grad_norm(norm, has_nonfinite);
}

Status PartitionManager::step(const StepTransaction::Callback& optimizer) {
  ZRT_RETURN_IF_ERROR(check_finalized("step"));
  // A bad argument is this caller's bug alone: refused at once, like any argument check.
  if (optimizer.fn == nullptr) return Status::invalid_argument("optimizer is NULL");
  if (step_->armed() && !step_->armed_with(optimizer.fn, optimizer.user_data)) {
    return Status::invalid_argument(
        "optimizer and user_data differ from those given to zrt_partition_step_in_backward for "
        "this step, whose optimizer is already running; pass the same pair");
  }
  return step_->step(optimizer);
}

Status PartitionManager::step_in_backward(zrt_optimizer_fn optimizer, void* user_data) {
  ZRT_RETURN_IF_ERROR(check_finalized("step_in_backward"));
  if (optimizer == nullptr) return Status::invalid_argument("optimizer is NULL");
  if (!ctx_->options.offload_optimizer) {
    return Status::invalid_usage(
        "step_in_backward needs offload_optimizer = 1 in the config: without offload the "
        "optimizer runs once over the whole shard in zrt_partition_step");
  }
  if (ctx_->buffers.backup_master == nullptr) {
    return Status::invalid_usage(
        "step_in_backward needs step_backup = 1 or 2 in the config: each segment's optimizer "
        "runs before the step knows that every rank's reductions succeeded, and only the backup "
        "can undo it");
  }
  if (resources_.on_device()) {
    return Status(ZRT_UNSUPPORTED,
                  "step_in_backward: with mem_kind ZRT_MEM_CUDA the offloaded optimizer runs "
                  "from zrt_partition_step (the copies to the host already overlap the device's "
                  "reductions there); call zrt_partition_step alone");
  }
  if (step_->armed()) {
    return Status::invalid_usage(
        "step_in_backward was already called for this step; call zrt_partition_step");
  }
  if (grads_->microbatch_started()) {
    return Status::invalid_usage(
        "step_in_backward in the middle of a backward pass ({} of {} units signalled); call it "
        "before the backward of the step's last micro-batch",
        grads_->signalled_count(), ctx_->layout.trainable_units());
  }
  if (!grads_->sync()) {
    return Status::invalid_usage(
        "step_in_backward: the coming micro-batch skips the reduction (set_sync(0)); call "
        "set_sync(1) first, or arm the step before its last, synchronised micro-batch");
  }
  return step_->arm(optimizer, user_data);
}

// The optimizer is often built after the model is sharded, and only it knows how many state
// arrays it keeps: this replaces the state arrays (and their backups) before the first step,
// in three phases with a vote after each of the first two, so that every rank changes or none
// does: check (usage, the same count everywhere), allocate the new arrays beside the old, swap.
Status PartitionManager::set_optimizer_slots(int slots) {
  const char* what = "set_optimizer_slots";
  ZRT_RETURN_IF_ERROR(check_finalized(what));
  Status ready = check_slots_settable(slots);
  std::vector<int32_t> asked;
  ZRT_RETURN_IF_ERROR(
      step_->agree(ready, slots, "set_optimizer_slots: agreeing to change", &asked));
  std::string differ;
  for (size_t r = 0; r < asked.size(); ++r) {
    if (asked[r] != asked[0]) differ += fmt::format(" rank {}: {},", r, asked[r]);
  }
  if (!differ.empty()) {
    differ.pop_back();
    return Status::invalid_usage("set_optimizer_slots: the ranks ask for different counts (rank "
                                 "0: {},{}); every rank must pass the same",
                                 asked[0], differ);
  }
  if (slots == static_cast<int>(ctx_->buffers.state.size())) return Status::ok();
  // The full backup's copy may still read the old arrays.
  Status staged = step_->prepare_master_write();
  PartitionResources::OptimizerState state;
  if (staged.is_ok()) {
    staged = resources_.prepare_optimizer_state(*ctx_, slots, ctx_->plan.backup, &state);
  }
  ZRT_RETURN_IF_ERROR(step_->agree(staged, slots, "set_optimizer_slots: agreeing to swap", &asked)
                          .with_context("set_optimizer_slots: the optimizer state is unchanged"));
  resources_.adopt_optimizer_state(*ctx_, std::move(state));
  ctx_->options.optimizer_slots = slots;
  ctx_->plan.optimizer_slots = slots;
  step_->optimizer_state_replaced();
  ZRT_LOG_INFO("partition: {} optimizer state slot(s)", slots);
  return Status::ok();
}

Status PartitionManager::check_slots_settable(int slots) const {
  if (slots < 0 || slots > kMaxOptimizerSlots) {
    return Status::invalid_argument("set_optimizer_slots: slots is {}; expected 0..{}", slots,
                                    kMaxOptimizerSlots);
  }
  if (step_->step_count() > 0) {
    return Status::invalid_usage(
        "set_optimizer_slots: {} step(s) were taken, and the state holds the optimizer's "
        "history; the count can change only before the first step (or set "
        "config.optimizer_slots at zrt_partition_create)",
        step_->step_count());
  }
  ZRT_RETURN_IF_ERROR(check_not_armed("set_optimizer_slots"));
  return step_->check_not_interrupted("set_optimizer_slots");
}

Status PartitionManager::memory(MemoryFigures* figures) const {
  ZRT_RETURN_IF_ERROR(check_finalized("memory"));
  MemoryFigures f = memory_figures(ctx_->options, ctx_->layout);  // theoretical figure and counts
  resources_.measure(&f);                                         // bytes actually carved
  *figures = f;
  return Status::ok();
}

Status PartitionManager::traffic(zrt_partition_traffic_t* traffic) const {
  ZRT_RETURN_IF_ERROR(check_finalized("traffic"));
  zrt_comm_stats_t stats{};
  ctx_->comm.engine().counters().snapshot(&stats);
  if (ctx_->secondary.comm != nullptr) {
    // hpZ: what runs over every rank crosses the groups; the secondary copy's gathers do not.
    traffic->shard_group_size = ctx_->secondary.size;
    traffic->replica_groups = ctx_->world.size / ctx_->secondary.size;
    traffic->inter_group_bytes = stats.user.bytes_sent;
    ctx_->secondary.comm->engine().counters().snapshot(&stats);
    traffic->intra_group_bytes = stats.user.bytes_sent;
    return Status::ok();
  }
  traffic->shard_group_size = groups_.hybrid() ? groups_.group_size : ctx_->size;
  traffic->replica_groups = groups_.hybrid() ? groups_.replica_groups : 1;
  traffic->intra_group_bytes = stats.user.bytes_sent;
  traffic->inter_group_bytes = 0;
  if (ctx_->replicas != nullptr) {
    ctx_->replicas->engine().counters().snapshot(&stats);
    traffic->inter_group_bytes = stats.user.bytes_sent;
  }
  return Status::ok();
}

Status PartitionManager::window_stats(WindowStats* stats) const {
  ZRT_RETURN_IF_ERROR(check_finalized("stats"));
  *stats = window_->stats();
  return Status::ok();
}

Status PartitionManager::destroy() {
  if (destroyed_) return Status::ok();
  destroyed_ = true;
  // Its thread may still wait on the streams or run a callback over the buffers.
  if (step_ != nullptr) step_->stop_backward_optimizer();
  Status status = resources_.release(*ctx_);
  const Status groups = groups_.destroy();
  return status.is_ok() ? groups : status;
}

// --- Checkpoint access (used by zero/checkpoint) ----------------------------------------------

Status PartitionManager::checkpoint_quiesce(const char* what, CheckpointAccess access) {
  ZRT_RETURN_IF_ERROR(check_finalized(what));
  if (groups_.hybrid()) {
    return Status(ZRT_UNSUPPORTED,
                  fmt::format("{}: checkpoints of hybrid-sharded partitions (shard_group_size "
                              "{} of {} ranks) are not supported; set "
                              "config.shard_group_size = {} (flat sharding) to save or load",
                              what, groups_.group_size, world_.size(), world_.size()));
  }
  if (resources_.on_device()) {
    // The checkpoint layer reads and writes master, state and frozen store on the host.
    return Status(ZRT_UNSUPPORTED,
                  fmt::format("{}: checkpoints of ZRT_MEM_CUDA partitions are not supported; "
                              "copy the shard to host memory (zrt_partition_step's optimizer "
                              "sees it) or use mem_kind = ZRT_MEM_HOST",
                              what));
  }
  const int fetched = window_->first_fetched();
  if (fetched >= 0) {
    return Status::invalid_usage("{}: unit {} (\"{}\") is fetched; call it between steps", what,
                                 fetched, unit_specs_[fetched].name);
  }
  ZRT_RETURN_IF_ERROR(check_not_armed(what));
  // A load replaces what an unfinished step would update, so it may drop that step; a save
  // would write a half-stepped shard, or gradients that no checkpoint holds.
  const bool drops_step = access == CheckpointAccess::kReplace && !grads_->microbatch_started();
  if (!drops_step) ZRT_RETURN_IF_ERROR(step_->check_not_interrupted(what));
  if (grads_->pending() && !drops_step) {
    return Status::invalid_usage(
        "{}: gradients of an unfinished step are pending (checkpoints hold no gradients); call "
        "it after zrt_partition_step",
        what);
  }
  ZRT_RETURN_IF_ERROR(ctx_->streams.ag->synchronize().with_context(
      fmt::format("{}: waiting for the post-step parameter gathers", what)));
  // The parameter shard is read as it is (read_param_shard): bring it up to date.
  return window_->flush_conversions().with_context(
      fmt::format("{}: converting master to the parameter shard", what));
}

Status PartitionManager::read_param_shard(size_t shard_offset, size_t count, void* out) const {
  const Layout& layout = ctx_->layout;
  if (shard_offset + count > layout.shard_numel()) {
    return Status::invalid_argument("read_param_shard: [{}, {}) is outside the {}-element shard",
                                    shard_offset, shard_offset + count, layout.shard_numel());
  }
  const PartitionBuffers& buf = ctx_->buffers;
  const size_t p_size = ctx_->p_size;
  char* dst = static_cast<char*>(out);
  switch (ctx_->policy.param_home()) {
    case ParamHome::kReplicated:
      ctx_->ops->copy(dst, buf.full_params + shard_offset * p_size, count * p_size);
      return Status::ok();
    case ParamHome::kShard:
      ctx_->ops->copy(dst, buf.param_shard + shard_offset * p_size, count * p_size);
      return Status::ok();
    case ParamHome::kOwnedSlices:
      break;
  }
  // The owned slice of each segment sits inside the full buffer.
  for (size_t s = 0; s < layout.segments().size() && count > 0; ++s) {
    const Segment& seg = layout.segments()[s];
    if (shard_offset >= seg.shard_offset + seg.slice) continue;
    const size_t in_slice = shard_offset - seg.shard_offset;
    const size_t n = std::min(count, seg.slice - in_slice);
    const size_t full = ctx_->segment_start(static_cast<int>(s)) +
                        static_cast<size_t>(ctx_->rank) * seg.slice + in_slice;
    ctx_->ops->copy(dst, buf.full_params + full * p_size, n * p_size);
    dst += n * p_size;
    shard_offset += n;
    count -= n;
  }
  return Status::ok();
}

Status PartitionManager::restore_checkpoint(const float* master,
                                            const std::vector<const float*>& states,
                                            const void* frozen, zrt_dtype_t frozen_dtype,
                                            int64_t step) {
  if (states.size() != ctx_->buffers.state.size()) {
    return Status(ZRT_INTERNAL_ERROR,
                  fmt::format("restore_checkpoint: {} optimizer state slots given, {} expected",
                              states.size(), ctx_->buffers.state.size()));
  }
  // The unfinished step, interrupted or not yet taken, is dropped with its gradients.
  step_->discard_interrupted();
  if (grads_->pending()) grads_->end_step();
  return step_->restore_checkpoint(master, states, frozen, frozen_dtype, step);
}

}  // namespace zrt
