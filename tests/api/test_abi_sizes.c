/* The ABI rule of zrt.h, from C: every config and query consumer accepts a struct as an older
 * header had it (size = the offset of its last field here), reads no config field beyond that
 * size and writes nothing past it; the zrt_..._init functions write exactly their macro's values.
 * One rank, through a single-rank out-of-band all-gather: no store, no environment. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zrt/zrt.h"

#define POISON 0xab

static int failures = 0;

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      printf("%s:%d: %s failed (%s)\n", __FILE__, __LINE__, #condition, zrt_last_error()); \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

#define CHECK_OK(call) CHECK((call) == ZRT_SUCCESS)

/* Whether bytes [from, to) of `base` still hold the poison. */
static int untouched(const void* base, size_t from, size_t to) {
  const unsigned char* bytes = (const unsigned char*)base;
  size_t i;
  for (i = from; i < to; ++i) {
    if (bytes[i] != POISON) return 0;
  }
  return 1;
}

/* The all-gather of a job of one rank: the contribution is the result. */
static int request_token;
static zrt_status_t self_allgather(const void* sendbuf, void* recvbuf, size_t bytes,
                                   void* user_data, void** request) {
  (void)user_data;
  memcpy(recvbuf, sendbuf, bytes);
  *request = &request_token;
  return ZRT_SUCCESS;
}
static zrt_status_t self_test(void* request) {
  return request == &request_token ? ZRT_SUCCESS : ZRT_INTERNAL_ERROR;
}
static void self_free(void* request) {
  (void)request;
}

/* Each init function equals its macro, field by field, and honours the size it is given. */
static void test_init_functions(void) {
  const zrt_comm_config_t comm_macro = ZRT_COMM_CONFIG_INIT;
  const zrt_oob_t oob_macro = ZRT_OOB_INIT;
  const zrt_partition_config_t part_macro = ZRT_PARTITION_CONFIG_INIT;
  zrt_comm_config_t comm;
  zrt_oob_t oob;
  zrt_partition_config_t part;
  size_t older;

  memset(&comm, POISON, sizeof comm);
  CHECK_OK(zrt_comm_config_init(&comm, sizeof comm));
  CHECK(comm.size == comm_macro.size && comm.magic == comm_macro.magic);
  CHECK(comm.version == comm_macro.version && comm.timeout_ms == comm_macro.timeout_ms);
  CHECK(comm.name == comm_macro.name);

  memset(&oob, POISON, sizeof oob);
  CHECK_OK(zrt_oob_init(&oob, sizeof oob));
  CHECK(oob.struct_size == oob_macro.struct_size && oob.allgather == oob_macro.allgather);
  CHECK(oob.test == oob_macro.test && oob.free == oob_macro.free);
  CHECK(oob.user_data == oob_macro.user_data && oob.rank == oob_macro.rank);
  CHECK(oob.size == oob_macro.size && oob.local_rank == oob_macro.local_rank);
  CHECK(oob.local_size == oob_macro.local_size);

  memset(&part, POISON, sizeof part);
  CHECK_OK(zrt_partition_config_init(&part, sizeof part));
  CHECK(part.size == part_macro.size && part.magic == part_macro.magic);
  CHECK(part.version == part_macro.version && part.stage == part_macro.stage);
  CHECK(part.param_dtype == part_macro.param_dtype);
  CHECK(part.reduce_dtype == part_macro.reduce_dtype);
  CHECK(part.master_dtype == part_macro.master_dtype);
  CHECK(part.optimizer_slots == part_macro.optimizer_slots);
  CHECK(part.bucket_bytes == part_macro.bucket_bytes);
  CHECK(part.prefetch_depth == part_macro.prefetch_depth);
  CHECK(part.prefetch_bytes == part_macro.prefetch_bytes);
  CHECK(part.max_live_bytes == part_macro.max_live_bytes);
  CHECK(part.persistence_threshold == part_macro.persistence_threshold);
  CHECK(part.alignment == part_macro.alignment && part.mem_kind == part_macro.mem_kind);
  CHECK(part.no_sync_accumulation == part_macro.no_sync_accumulation);
  CHECK(part.step_backup == part_macro.step_backup);
  CHECK(part.prefetch_next_step == part_macro.prefetch_next_step);
  CHECK(part.offload_optimizer == part_macro.offload_optimizer && part.offload_optimizer == 0);
  CHECK(part.grad_accumulate == part_macro.grad_accumulate && part.grad_accumulate == 0);
  CHECK(part.shard_group_size == part_macro.shard_group_size);
  CHECK(part.hpz_group_size == part_macro.hpz_group_size && part.hpz_group_size == 0);

  /* An older caller's struct: the defaults of the fields it has, nothing past its end. */
  older = offsetof(zrt_partition_config_t, prefetch_next_step);
  memset(&part, POISON, sizeof part);
  CHECK_OK(zrt_partition_config_init(&part, older));
  CHECK(part.size == older && part.step_backup == ZRT_STEP_BACKUP_SEGMENT && part.stage == 2);
  CHECK(untouched(&part, older, sizeof part));
  older = offsetof(zrt_comm_config_t, name);
  memset(&comm, POISON, sizeof comm);
  CHECK_OK(zrt_comm_config_init(&comm, older));
  CHECK(comm.size == older && comm.timeout_ms == 0 && untouched(&comm, older, sizeof comm));
  older = offsetof(zrt_oob_t, local_size);
  memset(&oob, POISON, sizeof oob);
  CHECK_OK(zrt_oob_init(&oob, older));
  CHECK(oob.struct_size == older && oob.local_rank == -1 && untouched(&oob, older, sizeof oob));

  /* Below the header: refused, nothing written. */
  memset(&part, POISON, sizeof part);
  CHECK(zrt_partition_config_init(&part, offsetof(zrt_partition_config_t, version)) ==
        ZRT_INVALID_ARGUMENT);
  CHECK(untouched(&part, 0, sizeof part));
  CHECK(zrt_comm_config_init(NULL, sizeof comm) == ZRT_INVALID_ARGUMENT);
}

/* A communicator from an older oob and an older config whose missing fields hold values that
 * would be refused if zrt read them. */
static zrt_comm_t make_comm(void) {
  zrt_oob_t oob;
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  zrt_comm_t comm = NULL;
  CHECK_OK(zrt_oob_init(&oob, sizeof oob));
  oob.allgather = self_allgather;
  oob.test = self_test;
  oob.free = self_free;
  oob.rank = 0;
  oob.size = 1;
  oob.local_rank = -1;
  oob.local_size = 5; /* beyond the older size: must not be read */
  oob.struct_size = offsetof(zrt_oob_t, local_size);
  config.size = offsetof(zrt_comm_config_t, name);
  config.name = ""; /* refused if read */
  CHECK_OK(zrt_comm_init_oob(&oob, &config, &comm));
  return comm;
}

static void test_comm_configs(zrt_comm_t comm) {
  zrt_comm_config_t config = ZRT_COMM_CONFIG_INIT;
  struct {
    zrt_comm_config_t config;
    char newer_field[8];
  } newer;
  zrt_comm_t child = NULL;
  config.size = offsetof(zrt_comm_config_t, name);
  config.name = "";
  CHECK_OK(zrt_comm_split(comm, 0, 0, &config, &child));
  CHECK_OK(zrt_comm_destroy(child));
  /* A config from a newer header than this library: its new fields would be ignored. */
  memset(&newer, 0, sizeof newer);
  newer.config = config;
  newer.config.size = sizeof newer;
  newer.config.name = NULL;
  child = NULL;
  CHECK(zrt_comm_split(comm, 0, 0, &newer.config, &child) == ZRT_INVALID_ARGUMENT);
  CHECK(child == NULL && strstr(zrt_last_error(), "config->size") != NULL);
  config.size = sizeof(size_t);
  CHECK(zrt_comm_split(comm, 0, 0, &config, &child) == ZRT_INVALID_ARGUMENT);
}

static void test_partition_config_load(void) {
  const char* path = "test_abi_sizes.json";
  zrt_partition_config_t config;
  const size_t older = offsetof(zrt_partition_config_t, prefetch_next_step);
  FILE* file = fopen(path, "w");
  CHECK(file != NULL);
  if (file == NULL) return;
  fputs("{\"stage\": 3, \"prefetch_depth\": 2, \"prefetch_next_step\": 1}", file);
  fclose(file);
  memset(&config, POISON, sizeof config);
  CHECK_OK(zrt_partition_config_init(&config, older));
  CHECK_OK(zrt_partition_config_load(path, &config));
  CHECK(config.size == older && config.stage == 3 && config.prefetch_depth == 2);
  CHECK(untouched(&config, older, sizeof config));
  remove(path);
}

/* A finalized stage 3 manager made from an older config (prefetch_next_step absent, and
 * invalid behind the size). */
static zrt_partition_t make_partition(zrt_comm_t comm) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  struct {
    zrt_partition_config_t config;
    char newer_field[8];
  } newer;
  zrt_partition_t pm = NULL;
  int unit = -1;
  int param = -1;
  /* From a newer header than this library, or below the header: refused. */
  memset(&newer, 0, sizeof newer);
  newer.config = config;
  newer.config.size = sizeof newer;
  CHECK(zrt_partition_create(comm, &newer.config, &pm) == ZRT_INVALID_ARGUMENT);
  CHECK(pm == NULL && strstr(zrt_last_error(), "config->size") != NULL);
  config.size = offsetof(zrt_partition_config_t, version);
  CHECK(zrt_partition_create(comm, &config, &pm) == ZRT_INVALID_ARGUMENT && pm == NULL);
  config.size = sizeof config;
  config.stage = 3;
  config.prefetch_next_step = 7; /* refused if read */
  config.size = offsetof(zrt_partition_config_t, prefetch_next_step);
  CHECK_OK(zrt_partition_create(comm, &config, &pm));
  if (pm == NULL) return NULL;
  CHECK_OK(zrt_partition_add_unit(pm, "layer", &unit));
  CHECK_OK(zrt_partition_add_param(pm, unit, "weight", 300000, ZRT_PARAM_DEFAULT, &param));
  CHECK_OK(zrt_partition_finalize(pm));
  CHECK_OK(zrt_partition_fetch(pm, unit));
  CHECK_OK(zrt_partition_release(pm, unit));
  return pm;
}

/* A config from before hpz_group_size (120 bytes): the field is not read, even when the bytes
 * behind the caller's struct hold a value refused at stage 2; and config_init leaves them. */
static void test_pre_hpz_config(zrt_comm_t comm) {
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  const size_t older = offsetof(zrt_partition_config_t, hpz_group_size);
  zrt_partition_t pm = NULL;
  CHECK(older == 120);
  config.stage = 2;
  config.hpz_group_size = 7; /* refused if read */
  CHECK(zrt_partition_create(comm, &config, &pm) == ZRT_INVALID_ARGUMENT && pm == NULL);
  CHECK(strstr(zrt_last_error(), "config.hpz_group_size") != NULL);
  config.size = older;
  CHECK_OK(zrt_partition_create(comm, &config, &pm));
  if (pm != NULL) CHECK_OK(zrt_partition_destroy(pm));
  memset(&config, POISON, sizeof config);
  CHECK_OK(zrt_partition_config_init(&config, older));
  CHECK(config.size == older && config.shard_group_size == 0);
  CHECK(untouched(&config, older, sizeof config));
}

/* Each query, with an older size: the prefix equals the whole query's, nothing past it. */
static void test_queries(zrt_partition_t pm) {
  zrt_partition_memory_t memory_full, memory;
  zrt_partition_stats_t stats_full, stats;
  zrt_param_info_t info_full, info;
  size_t older;

  memset(&memory_full, 0, sizeof memory_full);
  memory_full.size = sizeof memory_full;
  CHECK_OK(zrt_partition_memory(pm, &memory_full));
  older = offsetof(zrt_partition_memory_t, step_backup);
  memset(&memory, POISON, sizeof memory);
  memory.size = older;
  CHECK_OK(zrt_partition_memory(pm, &memory));
  CHECK(memory.size == older && memory.total == memory_full.total);
  CHECK(memcmp((char*)&memory + sizeof(size_t), (char*)&memory_full + sizeof(size_t),
               older - sizeof(size_t)) == 0);
  CHECK(untouched(&memory, older, sizeof memory));

  memset(&stats_full, 0, sizeof stats_full);
  stats_full.size = sizeof stats_full;
  CHECK_OK(zrt_partition_stats(pm, &stats_full));
  CHECK(stats_full.fetches == 1);
  older = offsetof(zrt_partition_stats_t, order_invalidated);
  memset(&stats, POISON, sizeof stats);
  stats.size = older;
  CHECK_OK(zrt_partition_stats(pm, &stats));
  CHECK(stats.fetches == 1 && stats.gathers == stats_full.gathers);
  CHECK(stats.order_recorded == stats_full.order_recorded);
  CHECK(untouched(&stats, older, sizeof stats));

  memset(&info_full, 0, sizeof info_full);
  info_full.size = sizeof info_full;
  CHECK_OK(zrt_partition_param_info(pm, 0, &info_full));
  CHECK(info_full.numel == 300000);
  older = offsetof(zrt_param_info_t, view_offset);
  memset(&info, POISON, sizeof info);
  info.size = older;
  CHECK_OK(zrt_partition_param_info(pm, 0, &info));
  CHECK(info.numel == 300000 && info.segment_offset == info_full.segment_offset);
  CHECK(untouched(&info, older, sizeof info));

  /* Not even the size field: refused, nothing written. */
  memset(&info, POISON, sizeof info);
  info.size = 4;
  CHECK(zrt_partition_param_info(pm, 0, &info) == ZRT_INVALID_ARGUMENT);
  CHECK(info.size == 4 && untouched(&info, sizeof(size_t), sizeof info));
}

int main(void) {
  zrt_comm_t comm;
  zrt_partition_t pm;
  test_init_functions();
  comm = make_comm();
  if (comm != NULL) {
    test_comm_configs(comm);
    test_partition_config_load();
    test_pre_hpz_config(comm);
    pm = make_partition(comm);
    if (pm != NULL) {
      test_queries(pm);
      CHECK_OK(zrt_partition_destroy(pm));
    }
    CHECK_OK(zrt_comm_destroy(comm));
  }
  if (failures != 0) return 1;
  printf("older struct sizes accepted by every consumer, nothing written past them\n");
  return 0;
}
