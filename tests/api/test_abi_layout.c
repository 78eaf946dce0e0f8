/* Pins the layout of every public struct of zrt.h (sizes and field offsets on LP64 Linux, the
 * platforms zrt ships for): reordering, inserting or resizing a field breaks the ABI of every
 * program built against an earlier header, and fails here. Growing a struct at its end (the ABI
 * rule at the top of zrt.h) changes only its SIZE line and adds a FIELD line. Compiled as C. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zrt/zrt.h"

static int failures = 0;

static void expect(const char* what, size_t actual, size_t expected) {
  if (actual != expected) {
    printf("%s is %zu, pinned at %zu\n", what, actual, expected);
    ++failures;
  }
}

#define SIZE(type, bytes) expect("sizeof(" #type ")", sizeof(type), bytes)
#define FIELD(type, field, offset) \
  expect("offsetof(" #type ", " #field ")", offsetof(type, field), offset)

int main(void) {
  if (sizeof(void*) != 8 || sizeof(size_t) != 8 || sizeof(int) != 4) {
    printf("not an LP64 platform: the pinned layout does not apply\n");
    return 77; /* skipped */
  }
  SIZE(zrt_comm_config_t, 32);
  FIELD(zrt_comm_config_t, size, 0);
  FIELD(zrt_comm_config_t, magic, 8);
  FIELD(zrt_comm_config_t, version, 12);
  FIELD(zrt_comm_config_t, timeout_ms, 16);
  FIELD(zrt_comm_config_t, name, 24);

  SIZE(zrt_oob_t, 56);
  FIELD(zrt_oob_t, struct_size, 0);
  FIELD(zrt_oob_t, allgather, 8);
  FIELD(zrt_oob_t, test, 16);
  FIELD(zrt_oob_t, free, 24);
  FIELD(zrt_oob_t, user_data, 32);
  FIELD(zrt_oob_t, rank, 40);
  FIELD(zrt_oob_t, size, 44);
  FIELD(zrt_oob_t, local_rank, 48);
  FIELD(zrt_oob_t, local_size, 52);

  SIZE(zrt_coll_counters_t, 32);
  FIELD(zrt_coll_counters_t, calls, 0);
  FIELD(zrt_coll_counters_t, bytes_sent, 8);
  FIELD(zrt_coll_counters_t, bytes_received, 16);
  FIELD(zrt_coll_counters_t, busy_ns, 24);

  SIZE(zrt_coll_kind_stats_t, 64);
  FIELD(zrt_coll_kind_stats_t, user, 0);
  FIELD(zrt_coll_kind_stats_t, internal, 32);

  /* per_kind is last: a new collective kind lengthens it, and only the SIZE line changes. */
  SIZE(zrt_comm_stats_t, 584); /* 72 + 64 per kind, 8 kinds */
  expect("ZRT_COLL_KIND_COUNT", ZRT_COLL_KIND_COUNT, 8);
  FIELD(zrt_comm_stats_t, size, 0);
  FIELD(zrt_comm_stats_t, user, 8);
  FIELD(zrt_comm_stats_t, internal, 40);
  FIELD(zrt_comm_stats_t, per_kind, 72);

  SIZE(zrt_partition_config_t, 136);
  FIELD(zrt_partition_config_t, size, 0);
  FIELD(zrt_partition_config_t, magic, 8);
  FIELD(zrt_partition_config_t, version, 12);
  FIELD(zrt_partition_config_t, stage, 16);
  FIELD(zrt_partition_config_t, param_dtype, 20);
  FIELD(zrt_partition_config_t, reduce_dtype, 24);
  FIELD(zrt_partition_config_t, master_dtype, 28);
  FIELD(zrt_partition_config_t, optimizer_slots, 32);
  FIELD(zrt_partition_config_t, bucket_bytes, 40);
  FIELD(zrt_partition_config_t, prefetch_depth, 48);
  FIELD(zrt_partition_config_t, prefetch_bytes, 56);
  FIELD(zrt_partition_config_t, max_live_bytes, 64);
  FIELD(zrt_partition_config_t, persistence_threshold, 72);
  FIELD(zrt_partition_config_t, alignment, 80);
  FIELD(zrt_partition_config_t, mem_kind, 88);
  FIELD(zrt_partition_config_t, no_sync_accumulation, 92);
  FIELD(zrt_partition_config_t, step_backup, 96);
  FIELD(zrt_partition_config_t, prefetch_next_step, 100);
  FIELD(zrt_partition_config_t, offload_optimizer, 104);
  FIELD(zrt_partition_config_t, grad_accumulate, 108);
  FIELD(zrt_partition_config_t, shard_group_size, 112);
  FIELD(zrt_partition_config_t, hpz_group_size, 120);
  FIELD(zrt_partition_config_t, grad_windows, 128);

  SIZE(zrt_partition_traffic_t, 32);
  FIELD(zrt_partition_traffic_t, size, 0);
  FIELD(zrt_partition_traffic_t, shard_group_size, 8);
  FIELD(zrt_partition_traffic_t, replica_groups, 12);
  FIELD(zrt_partition_traffic_t, intra_group_bytes, 16);
  FIELD(zrt_partition_traffic_t, inter_group_bytes, 24);

  SIZE(zrt_param_info_t, 128);
  FIELD(zrt_param_info_t, size, 0);
  FIELD(zrt_param_info_t, unit, 8);
  FIELD(zrt_param_info_t, numel, 16);
  FIELD(zrt_param_info_t, flags, 24);
  FIELD(zrt_param_info_t, resident, 28);
  FIELD(zrt_param_info_t, first_segment, 32);
  FIELD(zrt_param_info_t, last_segment, 36);
  FIELD(zrt_param_info_t, segment_offset, 40);
  FIELD(zrt_param_info_t, view_offset, 48);
  FIELD(zrt_param_info_t, dtype, 56);
  FIELD(zrt_param_info_t, ndim, 60);
  FIELD(zrt_param_info_t, dims, 64);
  expect("ZRT_MAX_DIMS", ZRT_MAX_DIMS, 8);

  SIZE(zrt_shard_piece_t, 32);
  FIELD(zrt_shard_piece_t, param, 0);
  FIELD(zrt_shard_piece_t, param_offset, 8);
  FIELD(zrt_shard_piece_t, shard_offset, 16);
  FIELD(zrt_shard_piece_t, count, 24);

  SIZE(zrt_param_span_t, 24);
  FIELD(zrt_param_span_t, shard_offset, 0);
  FIELD(zrt_param_span_t, count, 8);
  FIELD(zrt_param_span_t, data, 16);

  SIZE(zrt_optimizer_args_t, 104);
  FIELD(zrt_optimizer_args_t, size, 0);
  FIELD(zrt_optimizer_args_t, master, 8);
  FIELD(zrt_optimizer_args_t, grad, 16);
  FIELD(zrt_optimizer_args_t, state, 24);
  FIELD(zrt_optimizer_args_t, num_state, 32);
  FIELD(zrt_optimizer_args_t, count, 40);
  FIELD(zrt_optimizer_args_t, pieces, 48);
  FIELD(zrt_optimizer_args_t, num_pieces, 56);
  FIELD(zrt_optimizer_args_t, step, 64);
  FIELD(zrt_optimizer_args_t, mem_kind, 72);
  FIELD(zrt_optimizer_args_t, param_dtype, 76);
  FIELD(zrt_optimizer_args_t, param_spans, 80);
  FIELD(zrt_optimizer_args_t, num_param_spans, 88);
  FIELD(zrt_optimizer_args_t, params_written, 96);

  SIZE(zrt_optimizer_config_t, 128);
  FIELD(zrt_optimizer_config_t, size, 0);
  FIELD(zrt_optimizer_config_t, magic, 8);
  FIELD(zrt_optimizer_config_t, version, 12);
  FIELD(zrt_optimizer_config_t, kind, 16);
  FIELD(zrt_optimizer_config_t, lr, 24);
  FIELD(zrt_optimizer_config_t, beta1, 32);
  FIELD(zrt_optimizer_config_t, beta2, 40);
  FIELD(zrt_optimizer_config_t, eps, 48);
  FIELD(zrt_optimizer_config_t, weight_decay, 56);
  FIELD(zrt_optimizer_config_t, momentum, 64);
  FIELD(zrt_optimizer_config_t, dampening, 72);
  FIELD(zrt_optimizer_config_t, nesterov, 80);
  FIELD(zrt_optimizer_config_t, bias_correction, 84);
  FIELD(zrt_optimizer_config_t, grad_scale, 88);
  FIELD(zrt_optimizer_config_t, clip_factor, 96);
  FIELD(zrt_optimizer_config_t, decay_mask, 104);
  FIELD(zrt_optimizer_config_t, decay_mask_count, 112);
  FIELD(zrt_optimizer_config_t, pool, 120);

  SIZE(zrt_partition_memory_t, 184);
  FIELD(zrt_partition_memory_t, size, 0);
  FIELD(zrt_partition_memory_t, full_params, 8);
  FIELD(zrt_partition_memory_t, param_shard, 16);
  FIELD(zrt_partition_memory_t, gradients, 24);
  FIELD(zrt_partition_memory_t, grad_shard, 32);
  FIELD(zrt_partition_memory_t, master, 40);
  FIELD(zrt_partition_memory_t, optimizer_state, 48);
  FIELD(zrt_partition_memory_t, buckets, 56);
  FIELD(zrt_partition_memory_t, gather_window, 64);
  FIELD(zrt_partition_memory_t, grad_staging, 72);
  FIELD(zrt_partition_memory_t, model_state, 80);
  FIELD(zrt_partition_memory_t, total, 88);
  FIELD(zrt_partition_memory_t, theoretical_model_state, 96);
  FIELD(zrt_partition_memory_t, parameters, 104);
  FIELD(zrt_partition_memory_t, padded_parameters, 112);
  FIELD(zrt_partition_memory_t, step_backup, 120);
  FIELD(zrt_partition_memory_t, device_model_state, 128);
  FIELD(zrt_partition_memory_t, device_total, 136);
  FIELD(zrt_partition_memory_t, host_model_state, 144);
  FIELD(zrt_partition_memory_t, host_total, 152);
  FIELD(zrt_partition_memory_t, theoretical_device_model_state, 160);
  FIELD(zrt_partition_memory_t, theoretical_host_model_state, 168);
  FIELD(zrt_partition_memory_t, param_secondary, 176);

  SIZE(zrt_partition_stats_t, 72);
  FIELD(zrt_partition_stats_t, size, 0);
  FIELD(zrt_partition_stats_t, fetches, 8);
  FIELD(zrt_partition_stats_t, gathers, 16);
  FIELD(zrt_partition_stats_t, prefetches, 24);
  FIELD(zrt_partition_stats_t, prefetch_hits, 32);
  FIELD(zrt_partition_stats_t, evictions, 40);
  FIELD(zrt_partition_stats_t, max_gathered_units, 48);
  FIELD(zrt_partition_stats_t, max_gathered_bytes, 56);
  FIELD(zrt_partition_stats_t, order_recorded, 64);
  FIELD(zrt_partition_stats_t, order_invalidated, 68);
  if (failures != 0) return 1;
  printf("every public struct has its pinned layout\n");
  return 0;
}
