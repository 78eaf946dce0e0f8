/*
 * zrt.h — the public C API of zrt, a collective-communication runtime for ZeRO-style sharded
 * data-parallel training.
 *
 * This is the only header a framework includes. It compiles as C99 and as C++.
 *
 * General contract (holds for every function unless its own comment says otherwise):
 *  - Every function returns a zrt_status_t. On anything but ZRT_SUCCESS (or ZRT_IN_PROGRESS where
 *    documented), zrt_last_error() on the same thread returns a message that names the function,
 *    the argument or peer at fault, and the cause. Output arguments are written only on success.
 *  - Nothing aborts the process. A failed or vanished peer surfaces as ZRT_REMOTE_ERROR or
 *    ZRT_TIMEOUT within the communicator's timeout (ZRT_TIMEOUT in the environment, default 60 s).
 *  - Handles are opaque. Passing NULL where a handle is required returns ZRT_INVALID_ARGUMENT.
 *  - Config structs start with their own size, a magic and the header version; initialise them
 *    with the matching ZRT_..._INIT macro so that a library built against a newer header can
 *    tell which fields an older caller knows about.
 *  - Thread safety: functions on different communicators may be called concurrently. Functions
 *    on one communicator may be called from several threads unless documented otherwise; work
 *    enqueued on one stream from several threads is ordered by the order of the calls.
 */
#ifndef ZRT_ZRT_H_
#define ZRT_ZRT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ZRT_API __attribute__((visibility("default")))
#else
#define ZRT_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------------- */

#define ZRT_VERSION_MAJOR 0
#define ZRT_VERSION_MINOR 1
#define ZRT_VERSION_PATCH 0
/* One integer that orders versions: major * 10000 + minor * 100 + patch. */
#define ZRT_VERSION_CODE (ZRT_VERSION_MAJOR * 10000 + ZRT_VERSION_MINOR * 100 + ZRT_VERSION_PATCH)

/* Written into every config struct by its ZRT_..._INIT macro; a struct without it is refused. */
#define ZRT_CONFIG_MAGIC 0x7a72u /* "zr" */

/* The enums below are C enums: a C caller may pass any int, and zrt checks it (an unknown
 * dtype is ZRT_INVALID_ARGUMENT; ops >= ZRT_OP_COUNT are created ops). In C++, a value beyond
 * an enum's enumerators is undefined behaviour unless the enum has a fixed underlying type, so
 * C++ sees them with int, the type their values already promoted to: same size, ABI and
 * arithmetic, and every value defined. */
#ifdef __cplusplus
#define ZRT_ENUM_TYPE : int
#else
#define ZRT_ENUM_TYPE
#endif

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_status ZRT_ENUM_TYPE {
  ZRT_SUCCESS = 0,
  ZRT_IN_PROGRESS = 1,      /* a non-blocking query: the work has not finished yet */
  ZRT_INVALID_ARGUMENT = 2, /* an argument is NULL, out of range or inconsistent */
  ZRT_INVALID_USAGE = 3,    /* the call is not valid now (wrong order, mismatched ranks) */
  ZRT_SYSTEM_ERROR = 4,     /* the OS or a library below zrt failed (errno text in message) */
  ZRT_REMOTE_ERROR = 5,     /* a peer failed, disconnected or reported an error */
  ZRT_TIMEOUT = 6,          /* a wait exceeded the communicator's timeout */
  ZRT_UNSUPPORTED = 7,      /* valid but not available in this build or on this machine */
  ZRT_OUT_OF_MEMORY = 8,    /* an allocation failed */
  ZRT_INTERNAL_ERROR = 9    /* a bug in zrt: please report the message */
} zrt_status_t;

/* Short constant name of a status ("ZRT_TIMEOUT"); "ZRT_UNKNOWN_STATUS" for other values.
 * Thread-safe; never returns NULL. */
ZRT_API const char* zrt_status_string(zrt_status_t status);

/* The message describing the last failure of a zrt call on the calling thread ("" if none).
 * The pointer stays valid until the next zrt call on this thread. Thread-safe (per thread). */
ZRT_API const char* zrt_last_error(void);

/* Writes the library's version code (ZRT_VERSION_CODE of the build) into *version.
 * Errors: ZRT_INVALID_ARGUMENT if version is NULL. */
ZRT_API zrt_status_t zrt_get_version(int* version);

/* ---------------------------------------------------------------------------------------------
 * Data types, reduction operations, memory kinds
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_dtype ZRT_ENUM_TYPE {
  ZRT_F32 = 0,
  ZRT_F64 = 1,
  ZRT_F16 = 2,  /* IEEE binary16; reduced in f32 */
  ZRT_BF16 = 3, /* bfloat16; reduced in f32 */
  ZRT_I8 = 4,
  ZRT_U8 = 5,
  ZRT_I32 = 6,
  ZRT_I64 = 7,
  ZRT_DTYPE_COUNT = 8
} zrt_dtype_t;

/* Size in bytes of one element of dtype into *bytes.
 * Errors: ZRT_INVALID_ARGUMENT for an unknown dtype or NULL bytes. Thread-safe. */
ZRT_API zrt_status_t zrt_dtype_size(zrt_dtype_t dtype, size_t* bytes);

/* Built-in reductions. Values >= ZRT_OP_COUNT are communicator-created operations
 * (see zrt_op_create_premul_sum) and are valid only on the communicator that created them. */
typedef enum zrt_op ZRT_ENUM_TYPE {
  ZRT_SUM = 0,
  ZRT_AVG = 1, /* sum, then divide by the number of ranks (floating types only) */
  ZRT_MIN = 2,
  ZRT_MAX = 3,
  ZRT_PROD = 4,
  ZRT_OP_COUNT = 5
} zrt_op_t;

typedef enum zrt_mem_kind ZRT_ENUM_TYPE {
  ZRT_MEM_HOST = 0, /* ordinary host memory, moved by the UCX transport */
  ZRT_MEM_CUDA = 1, /* CUDA device memory, moved by NCCL (builds with -Dnccl=enabled) */
  ZRT_MEM_KIND_COUNT = 2
} zrt_mem_kind_t;

/* ---------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------- */

typedef struct zrt_comm* zrt_comm_t;

typedef struct zrt_comm_config {
  size_t size;        /* sizeof(zrt_comm_config_t) as the caller compiled it */
  uint32_t magic;     /* ZRT_CONFIG_MAGIC */
  uint32_t version;   /* ZRT_VERSION_CODE as the caller compiled it */
  int64_t timeout_ms; /* every wait fails with ZRT_TIMEOUT after this long without progress;
                         0 = ZRT_TIMEOUT from the environment (seconds), else 60 s */
  const char* name;   /* shown in log lines; NULL = "zrt"; copied */
} zrt_comm_config_t;

#define ZRT_COMM_CONFIG_INIT \
  { sizeof(zrt_comm_config_t), ZRT_CONFIG_MAGIC, ZRT_VERSION_CODE, 0, NULL }

/* Creates a communicator from the environment. Ranks are read, in this order of preference,
 * from zrt's own variables (ZRT_RANK, ZRT_WORLD_SIZE, ZRT_LOCAL_RANK, ZRT_LOCAL_WORLD_SIZE),
 * torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), Open MPI's
 * (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, ..._LOCAL_SIZE) and
 * Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). The rendezvous store is at
 * ZRT_STORE_ADDR:ZRT_STORE_PORT, else MASTER_ADDR:MASTER_PORT; it is served by the launcher
 * (zrt-run) when ZRT_STORE_EXTERNAL=1, else by rank 0. A client must present ZRT_JOB_TOKEN
 * (any string; all ranks must agree) or it is refused. WORLD_SIZE=1 needs no store.
 * Collective over all ranks of the job; blocks until every rank arrived or the timeout passed
 * (ZRT_TIMEOUT, naming the missing ranks). config may be NULL for defaults.
 * Errors: ZRT_INVALID_ARGUMENT (comm NULL, bad config, malformed environment: the variable is
 * named), ZRT_TIMEOUT, ZRT_REMOTE_ERROR (token refused, peer failed), ZRT_SYSTEM_ERROR.
 * Thread-safe; each call creates an independent communicator. */
ZRT_API zrt_status_t zrt_comm_init_env(const zrt_comm_config_t* config, zrt_comm_t* comm);

/* Out-of-band all-gather supplied by a framework that already has a process group (the model is
 * UCC's ucc_oob_coll_t). zrt calls allgather() with `bytes` bytes from every rank and expects
 * rank r's contribution at recvbuf + r * bytes on every rank, then polls test() until it returns
 * ZRT_SUCCESS (done) or an error, and always calls free() once per request. The callbacks are
 * only called from inside zrt_comm_init_oob and zrt_comm_split, on the calling thread. */
typedef struct zrt_oob {
  zrt_status_t (*allgather)(const void* sendbuf, void* recvbuf, size_t bytes, void* user_data,
                            void** request);
  zrt_status_t (*test)(void* request); /* ZRT_SUCCESS, ZRT_IN_PROGRESS, or an error */
  void (*free)(void* request);
  void* user_data;
  int rank;
  int size;
  int local_rank; /* -1 = derive from host names */
  int local_size; /* -1 = derive from host names */
} zrt_oob_t;

/* Creates a communicator from an out-of-band all-gather; needs no store and no environment.
 * Collective over oob->size ranks. The oob struct is not kept after the call returns.
 * Errors: ZRT_INVALID_ARGUMENT (NULL callbacks, rank >= size, size < 1), ZRT_REMOTE_ERROR (a
 * callback failed: its status is in the message), ZRT_TIMEOUT, ZRT_SYSTEM_ERROR. */
ZRT_API zrt_status_t zrt_comm_init_oob(const zrt_oob_t* oob, const zrt_comm_config_t* config,
                                       zrt_comm_t* comm);

/* Queries. Errors: ZRT_INVALID_ARGUMENT for a NULL comm or output. Thread-safe. */
ZRT_API zrt_status_t zrt_comm_rank(zrt_comm_t comm, int* rank);
ZRT_API zrt_status_t zrt_comm_size(zrt_comm_t comm, int* size);
ZRT_API zrt_status_t zrt_comm_local_rank(zrt_comm_t comm, int* local_rank);
ZRT_API zrt_status_t zrt_comm_local_size(zrt_comm_t comm, int* local_size);

/* Pass as color to zrt_comm_split to take no part in any new communicator (*newcomm = NULL). */
#define ZRT_SPLIT_NOCOLOR (-1)

/* Splits comm: ranks with the same color form a new communicator, ordered by key then by old
 * rank. Collective over all ranks of comm (all must call it, in the same order relative to
 * other collectives on comm's default stream). config NULL = inherit comm's settings.
 * Errors: ZRT_INVALID_ARGUMENT (color < -1, NULL newcomm), ZRT_TIMEOUT, ZRT_REMOTE_ERROR. */
ZRT_API zrt_status_t zrt_comm_split(zrt_comm_t comm, int color, int key,
                                    const zrt_comm_config_t* config, zrt_comm_t* newcomm);

/* Destroys a communicator: waits for its streams' pending work, then closes connections in step
 * with the other ranks (collective when the communicator is healthy; local after an error or
 * zrt_comm_abort). Frees every resource, including streams, events and ops still alive. NULL is
 * accepted (returns ZRT_SUCCESS). Not thread-safe with other calls on the same communicator.
 * Errors: the first error of pending work is returned, but resources are freed regardless. */
ZRT_API zrt_status_t zrt_comm_destroy(zrt_comm_t comm);

/* Aborts a communicator: local and immediate. Every pending and future operation on it fails
 * with ZRT_REMOTE_ERROR ("communicator aborted"), and every thread blocked in a wait on it
 * returns at once. Resources are still freed by zrt_comm_destroy. Safe to call from any thread,
 * concurrently with waits on the same communicator. Errors: ZRT_INVALID_ARGUMENT (NULL). */
ZRT_API zrt_status_t zrt_comm_abort(zrt_comm_t comm);

/* The communicator's asynchronous error: ZRT_SUCCESS while healthy, else the status of the
 * first failure (a dead peer, a timeout, an abort), whose message zrt_last_error() then holds.
 * Thread-safe; does not block. */
ZRT_API zrt_status_t zrt_comm_get_error(zrt_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Streams and events
 *
 * A stream is an ordered queue of asynchronous work on one communicator. Work enqueued on one
 * stream completes in order; work on different streams progresses concurrently. Streams must be
 * created in the same order on every rank of the communicator (stream k of one rank talks to
 * stream k of the others). Each communicator has a default stream, used when a stream argument
 * is NULL. An event marks a point in a stream; other streams and host threads can wait on it.
 * The verbs match CUDA's so that CUDA streams map onto them unchanged.
 *
 * Errors: a failed operation fails its stream. Every later operation on that stream, and every
 * event recorded after it, reports the same status and message (the original cause). A stream
 * waiting on a failed event fails in turn.
 * ------------------------------------------------------------------------------------------- */

typedef struct zrt_stream* zrt_stream_t;
typedef struct zrt_event* zrt_event_t;

/* Creates a stream for buffers of memory kind `kind`. Local (no communication), but see the
 * ordering rule above. Errors: ZRT_INVALID_ARGUMENT, ZRT_UNSUPPORTED (kind not built in). */
ZRT_API zrt_status_t zrt_stream_create(zrt_comm_t comm, zrt_mem_kind_t kind, zrt_stream_t* stream);

/* Waits for the stream's work, then destroys it. Returns the stream's error, if any. */
ZRT_API zrt_status_t zrt_stream_destroy(zrt_stream_t stream);

/* Blocks until all work enqueued on the stream so far has completed, or fails.
 * Returns ZRT_SUCCESS or the stream's error. Blocking does not spin. */
ZRT_API zrt_status_t zrt_stream_synchronize(zrt_stream_t stream);

/* ZRT_SUCCESS if all work so far has completed, ZRT_IN_PROGRESS if not, else the error. */
ZRT_API zrt_status_t zrt_stream_query(zrt_stream_t stream);

/* Makes all work enqueued on `stream` after this call wait until `event` has completed (its
 * recorded point was reached). An event never recorded is complete. The event may belong to
 * another stream of the same communicator. Errors: ZRT_INVALID_ARGUMENT (NULL, or objects of
 * different communicators). */
ZRT_API zrt_status_t zrt_stream_wait_event(zrt_stream_t stream, zrt_event_t event);

ZRT_API zrt_status_t zrt_event_create(zrt_comm_t comm, zrt_event_t* event);
ZRT_API zrt_status_t zrt_event_destroy(zrt_event_t event);

/* Captures the stream's current tail: the event completes when everything enqueued before it
 * has. Re-recording an event moves it to the new point. */
ZRT_API zrt_status_t zrt_event_record(zrt_event_t event, zrt_stream_t stream);

/* ZRT_SUCCESS (completed), ZRT_IN_PROGRESS, or the error of the work it follows. */
ZRT_API zrt_status_t zrt_event_query(zrt_event_t event);

/* Blocks until the event has completed; returns its status. */
ZRT_API zrt_status_t zrt_event_synchronize(zrt_event_t event);

/* ---------------------------------------------------------------------------------------------
 * Collectives and point-to-point
 *
 * All are enqueued on a stream (NULL = the communicator's default stream) and return at once;
 * the buffers must stay valid and untouched until the stream (or an event recorded after the
 * call) completes. Counts are in elements of dtype. Argument conventions follow NCCL:
 *  - reduce_scatter: sendbuf holds size * recvcount elements, recvbuf recvcount; in place when
 *    recvbuf == sendbuf + rank * recvcount (elements).
 *  - all_gather: sendbuf holds sendcount elements, recvbuf size * sendcount; in place when
 *    sendbuf == recvbuf + rank * sendcount.
 *  - all_reduce, broadcast, reduce: in place when sendbuf == recvbuf.
 * Any other overlap of sendbuf and recvbuf is refused with ZRT_INVALID_ARGUMENT.
 * Every rank must enqueue the same collectives on its stream k in the same order, with the same
 * count, dtype, op and root. Results are bitwise identical on all ranks and from run to run for
 * a given size and algorithm (the reduction order is fixed; see README "Determinism").
 * The algorithm is chosen by size and rank count; ZRT_ALGO=ring|rd|direct overrides it.
 * When every rank of the communicator is on one host, the rings of reduce-scatter, all-gather
 * and large all-reduce move data by plain stores into the next rank's mapped staging (UCX
 * shared memory) with small notifications; otherwise by tagged messages. Results are the same
 * bits either way. ZRT_WINDOWS=0 forces the messages; ZRT_WINDOW_SLOTS (2-16, default 8) and
 * ZRT_WINDOW_SLOT_KIB (4-16384, default 256) size the staging, which every stream of the
 * communicator holds once it communicates (slots x KiB, registered and touched at first use).
 * Collective-order checker: with ZRT_CHECK=1 (the default in builds without NDEBUG, i.e. the
 * debug and debugoptimized buildtypes; ZRT_CHECK=0 turns it off) every collective first
 * exchanges a 40-byte fingerprint (stream, sequence number, kind, count, dtype, op, root, and the
 * partition unit or bucket it serves) with its peers. A mismatch fails the collective on every
 * rank with ZRT_INVALID_USAGE and a message naming both calls ("rank 1 called all_gather(unit 2,
 * ...) where rank 0 called ..."); a rank that falls behind is named in the timeout message.
 * Fingerprint bytes are not counted in zrt_comm_stats.
 * Errors (at enqueue): ZRT_INVALID_ARGUMENT (NULL comm, NULL buffer with count > 0, unknown
 * dtype/op, root >= size, a stream or op of another communicator, bad overlap).
 * Errors (at completion, reported by the stream): ZRT_REMOTE_ERROR, ZRT_TIMEOUT.
 * ------------------------------------------------------------------------------------------- */

ZRT_API zrt_status_t zrt_all_reduce(zrt_comm_t comm, const void* sendbuf, void* recvbuf,
                                    size_t count, zrt_dtype_t dtype, zrt_op_t op,
                                    zrt_stream_t stream);
ZRT_API zrt_status_t zrt_reduce_scatter(zrt_comm_t comm, const void* sendbuf, void* recvbuf,
                                        size_t recvcount, zrt_dtype_t dtype, zrt_op_t op,
                                        zrt_stream_t stream);
ZRT_API zrt_status_t zrt_all_gather(zrt_comm_t comm, const void* sendbuf, void* recvbuf,
                                    size_t sendcount, zrt_dtype_t dtype, zrt_stream_t stream);
/* Copies root's sendbuf into every rank's recvbuf (sendbuf is read on root only). */
ZRT_API zrt_status_t zrt_broadcast(zrt_comm_t comm, const void* sendbuf, void* recvbuf,
                                   size_t count, zrt_dtype_t dtype, int root, zrt_stream_t stream);
/* Reduces every rank's sendbuf into root's recvbuf (recvbuf is written on root only). */
ZRT_API zrt_status_t zrt_reduce(zrt_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                                zrt_dtype_t dtype, zrt_op_t op, int root, zrt_stream_t stream);
/* Completes when every rank has reached this point of its stream k. */
ZRT_API zrt_status_t zrt_barrier(zrt_comm_t comm, zrt_stream_t stream);

/* Point-to-point: a zrt_send to `peer` matches the zrt_recv from this rank enqueued in the same
 * order on the peer's corresponding stream; counts and dtypes must agree (a longer message than
 * the receive buffer fails both sides). peer == own rank is allowed (a local copy). */
ZRT_API zrt_status_t zrt_send(zrt_comm_t comm, const void* sendbuf, size_t count, zrt_dtype_t dtype,
                              int peer, zrt_stream_t stream);
ZRT_API zrt_status_t zrt_recv(zrt_comm_t comm, void* recvbuf, size_t count, zrt_dtype_t dtype,
                              int peer, zrt_stream_t stream);

/* Creates a reduction that multiplies each rank's input by `scalar`, then sums (gradient
 * averaging by 1/N or unscaling by a loss scale in one pass). Floating dtypes only. The op is
 * valid on comm until zrt_op_destroy or zrt_comm_destroy. Local. */
/* Like NCCL's ncclRedOp_t, a created op is a number that only means something on its own
 * communicator: two communicators may hand out the same value, so pass an op only to the
 * communicator that created it (zrt cannot tell another communicator's op from its own). */
ZRT_API zrt_status_t zrt_op_create_premul_sum(zrt_comm_t comm, double scalar, zrt_op_t* op);
ZRT_API zrt_status_t zrt_op_destroy(zrt_comm_t comm, zrt_op_t op);

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_coll_kind ZRT_ENUM_TYPE {
  ZRT_COLL_ALL_REDUCE = 0,
  ZRT_COLL_REDUCE_SCATTER = 1,
  ZRT_COLL_ALL_GATHER = 2,
  ZRT_COLL_BROADCAST = 3,
  ZRT_COLL_REDUCE = 4,
  ZRT_COLL_BARRIER = 5,
  ZRT_COLL_SEND = 6,
  ZRT_COLL_RECV = 7,
  ZRT_COLL_KIND_COUNT = 8
} zrt_coll_kind_t;

/* Counters of operations that completed. A fixed layout: it is an array element, so it never
 * grows (new counters would be new fields of zrt_comm_stats_t). */
typedef struct zrt_coll_counters {
  uint64_t calls;          /* operations completed */
  uint64_t bytes_sent;     /* payload bytes this rank sent to other ranks */
  uint64_t bytes_received; /* payload bytes this rank received from other ranks */
  uint64_t busy_ns;        /* wall time from start to completion, summed over operations */
} zrt_coll_counters_t;

/* One collective kind's counters, the caller's and zrt's own apart. */
typedef struct zrt_coll_kind_stats {
  zrt_coll_counters_t user;     /* operations the caller asked for (see zrt_comm_stats_t) */
  zrt_coll_counters_t internal; /* zrt's own exchanges of this kind */
} zrt_coll_kind_stats_t;

/* Size first; grows at the end only: a new collective kind lengthens per_kind, hence last. */
typedef struct zrt_comm_stats {
  size_t size; /* sizeof(zrt_comm_stats_t) as the caller compiled it; set before the call */
  /* The caller's operations, all kinds: the collectives of this API (zrt_all_reduce ...
   * zrt_barrier) and the partition managers' parameter gathers and gradient reductions (the
   * ZeRO traffic). */
  zrt_coll_counters_t user;
  /* zrt's own exchanges, all kinds: agreements, step votes, gradient norms, configuration
   * checks, splits, closing barriers. */
  zrt_coll_counters_t internal;
  zrt_coll_kind_stats_t per_kind[ZRT_COLL_KIND_COUNT]; /* indexed by zrt_coll_kind_t */
} zrt_comm_stats_t;

/* Reads the communicator's counters since creation or the last reset (only completed
 * operations count; the order checker's fingerprints never do). Writes the fields that the
 * caller's stats->size covers, at most sizeof(zrt_comm_stats_t) bytes, and never stats->size
 * itself: a caller built against an older, shorter struct gets its prefix. Thread-safe.
 * Errors: ZRT_INVALID_ARGUMENT (NULL, or stats->size does not cover `user`). */
ZRT_API zrt_status_t zrt_comm_stats(zrt_comm_t comm, zrt_comm_stats_t* stats);
/* Sets every counter of the communicator to zero. Thread-safe. Errors: ZRT_INVALID_ARGUMENT. */
ZRT_API zrt_status_t zrt_comm_stats_reset(zrt_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Partition managers (ZeRO stages 0/1/2/3)
 *
 * A framework registers its parameters, grouped in units (its layers or modules) in forward
 * order, then finalizes. From then on zrt owns the flat sharded buffers (parameters, gradients,
 * f32 master weights, optimizer state) and all ZeRO communication; the framework keeps its own
 * compute kernels and its own optimizer, which zrt calls on the local shard.
 *
 * Layout (segment-major). The trainable parameters form segments: constant-size gradient
 * buckets filled in backward order (stages 0/1/2), or one segment per unit (stage 3). Each
 * segment is padded to a multiple of N x alignment elements and split into N equal contiguous
 * slices; rank r owns slice r of every segment and its shard is the concatenation of those
 * slices, one contiguous buffer. A parameter may straddle slices; zrt_partition_param_info and
 * zrt_partition_shard_pieces map between parameters and the shard both ways. Stage 0 is plain
 * data parallelism for comparison (every rank owns everything, gradients are all-reduced).
 * Frozen parameters are replicated on every rank in every stage (no gradient, master or state).
 * In stage 3, trainable parameters flagged ZRT_PARAM_UNSHARDED or smaller than
 * persistence_threshold stay gathered (one extra "persistent" segment); their master and state
 * are still sharded.
 *
 * Training protocol, per step:
 *   forward:   for each unit u in order: zrt_partition_fetch(u), compute with the pointers of
 *              zrt_partition_param_data, zrt_partition_release(u).
 *   backward:  for each unit in reverse order: fetch(u) (and again under recomputation),
 *              write the unit's gradients at zrt_partition_grad_data, zrt_partition_grad_ready(u),
 *              release(u). The reduction of each complete bucket (unit in stage 3) starts at
 *              once on zrt's reduce-scatter stream, overlapping the rest of backward.
 *   repeat forward/backward for more micro-batches (zrt_partition_set_sync chooses whether a
 *   micro-batch reduces or only accumulates locally), then zrt_partition_step.
 * Gradients are averaged over ranks; the framework divides by its micro-batch count.
 *
 * Thread safety: a partition manager is used from one thread at a time (the framework's
 * training thread); different managers may be used concurrently. Every call that waits for
 * communication fails with ZRT_TIMEOUT after the communicator's timeout.
 * ------------------------------------------------------------------------------------------- */

typedef struct zrt_partition* zrt_partition_t;

/* Parameter flags for zrt_partition_add_param. */
#define ZRT_PARAM_DEFAULT 0u
#define ZRT_PARAM_FROZEN 1u    /* no gradient: replicated, never reduced or updated */
#define ZRT_PARAM_UNSHARDED 2u /* stage 3: always gathered (its master/state stay sharded) */

typedef struct zrt_partition_config {
  size_t size;                  /* sizeof(zrt_partition_config_t) as the caller compiled it */
  uint32_t magic;               /* ZRT_CONFIG_MAGIC */
  uint32_t version;             /* ZRT_VERSION_CODE as the caller compiled it */
  int stage;                    /* 0, 1, 2, 3. Default 2: stage 1's traffic, less gradient memory */
  zrt_dtype_t param_dtype;      /* f32/f16/bf16. Default f32 (what a plain framework registers) */
  zrt_dtype_t reduce_dtype;     /* gradient buckets and reduction. Default f32 (accurate sums) */
  zrt_dtype_t master_dtype;     /* must be f32 (optimizer updates vanish in 16 bits) */
  int optimizer_slots;          /* f32 state arrays per element. Default 2 (Adam) */
  size_t bucket_bytes;          /* stages 0-2 bucket size. Default 25 MiB (DDP's bucket_cap_mb) */
  int prefetch_depth;           /* stage 3 units gathered ahead. Default 1 */
  size_t prefetch_bytes;        /* stage 3 cap on prefetched bytes in flight; 0 = none */
  size_t max_live_bytes;        /* stage 3 cap on gathered bytes at once; 0 = depth + 1 units */
  size_t persistence_threshold; /* stage 3, elements; smaller params stay gathered. 100000 */
  size_t alignment;             /* elements; slices start on multiples of it. Default 128 */
  zrt_mem_kind_t mem_kind;      /* where the buffers live. Default ZRT_MEM_HOST */
  int no_sync_accumulation;     /* stages 2/3: keep full local gradients so micro-batches may skip
                                   the reduction (zrt_partition_set_sync(pm, 0)). Default 0 */
  int step_backup;              /* 1: keep one copy of master + optimizer state (allocated once at
                                   finalize) so a step whose optimizer fails on any rank is rolled
                                   back on every rank (see zrt_partition_step). 0: no copy; only
                                   failures before the optimizer leave the state intact. Default 1 */
  int prefetch_next_step;       /* stage 3, 1: zrt_partition_step ends by gathering the first units
                                   of the next forward (the expected order, within prefetch_depth
                                   and the byte caps), so the next step's first fetch need not
                                   wait. For training loops: after the last step those gathers go
                                   unused, and the first step sends their bytes on top of
                                   3P(N-1)/N (later steps send exactly that). Stages 1/2 always
                                   gather at the end of the step. Default 0 */
} zrt_partition_config_t;

#define ZRT_PARTITION_CONFIG_INIT                                                            \
  {                                                                                          \
    sizeof(zrt_partition_config_t), ZRT_CONFIG_MAGIC, ZRT_VERSION_CODE, 2, ZRT_F32, ZRT_F32, \
        ZRT_F32, 2, (size_t)25 << 20, 1, 0, 0, 100000, 128, ZRT_MEM_HOST, 0, 1, 0            \
  }

/* Applies the keys of a JSON object in file `path` over *config (absent keys keep their value):
 * the field names above, dtypes and mem_kind as strings ("bf16", "host"). config must have been
 * initialised with ZRT_PARTITION_CONFIG_INIT. Errors: ZRT_INVALID_ARGUMENT (NULL, unknown key,
 * wrong type, value out of range: the key is named), ZRT_SYSTEM_ERROR (file unreadable). */
ZRT_API zrt_status_t zrt_partition_config_load(const char* path, zrt_partition_config_t* config);

/* Creates a partition manager on comm (which must outlive it). config NULL = defaults; it is
 * copied. Local. Errors: ZRT_INVALID_ARGUMENT (bad config: the field is named),
 * ZRT_UNSUPPORTED (mem_kind not available in this build). */
ZRT_API zrt_status_t zrt_partition_create(zrt_comm_t comm, const zrt_partition_config_t* config,
                                          zrt_partition_t* pm);

/* Waits for pending communication, then frees every buffer. NULL is accepted. Pointers handed
 * out become invalid. Returns the first error of pending work. */
ZRT_API zrt_status_t zrt_partition_destroy(zrt_partition_t pm);

/* Registration, before zrt_partition_finalize, identical on every rank. Units are added in
 * forward order and numbered from 0; parameters are numbered from 0 in the order added.
 * name is copied (NULL = ""). Errors: ZRT_INVALID_ARGUMENT (unknown unit, numel 0, unknown
 * flags), ZRT_INVALID_USAGE (after finalize). */
ZRT_API zrt_status_t zrt_partition_add_unit(zrt_partition_t pm, const char* name, int* unit);
ZRT_API zrt_status_t zrt_partition_add_param(zrt_partition_t pm, int unit, const char* name,
                                             size_t numel, uint32_t flags, int* param);

/* Lays out the segments, allocates every long-lived buffer in arenas (touched once), creates
 * the gather and reduce-scatter streams, and checks that every rank registered the same model
 * with the same configuration. Collective. Parameters start at zero: load them with
 * zrt_partition_load_param. Errors: ZRT_INVALID_USAGE (called twice, no parameter, ranks
 * disagree: the differing ranks are named), ZRT_OUT_OF_MEMORY, ZRT_TIMEOUT, ZRT_REMOTE_ERROR. */
ZRT_API zrt_status_t zrt_partition_finalize(zrt_partition_t pm);

/* Sets a parameter's value from `values` (numel elements of `dtype`, f32/f16/bf16, the full
 * parameter, identical on every rank): its master copy, its shard and any resident copy. Local;
 * call it on every rank between finalize and the first fetch of a step. Errors:
 * ZRT_INVALID_ARGUMENT (unknown param, NULL, dtype), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_load_param(zrt_partition_t pm, int param, const void* values,
                                              zrt_dtype_t dtype);

typedef struct zrt_param_info {
  size_t size; /* sizeof(zrt_param_info_t); set before the call */
  int unit;
  size_t numel;
  uint32_t flags; /* as registered */
  int resident;   /* 1: full data always available (stages 0-2, frozen, persistent) */
  int first_segment, last_segment; /* segments holding it (-1 when frozen) */
  size_t segment_offset;           /* element offset of its first element in first_segment */
  size_t view_offset; /* element offset in its gathered buffer (full buffer, unit window
                         slot, persistent or frozen store) */
} zrt_param_info_t;

/* Where a parameter lives (see zrt_param_info_t). Local. Errors: ZRT_INVALID_ARGUMENT,
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_param_info(zrt_partition_t pm, int param,
                                              zrt_param_info_t* info);

/* One contiguous piece of the local shard: elements [param_offset, param_offset + count) of
 * `param` are at shard elements [shard_offset, shard_offset + count). Padding is not listed. */
typedef struct zrt_shard_piece {
  int param;
  size_t param_offset;
  size_t shard_offset;
  size_t count;
} zrt_shard_piece_t;

/* The local shard's piece map, in shard order: *count pieces at *pieces, owned by pm and valid
 * until it is destroyed. Local. Errors: ZRT_INVALID_ARGUMENT, ZRT_INVALID_USAGE. */
ZRT_API zrt_status_t zrt_partition_shard_pieces(zrt_partition_t pm,
                                                const zrt_shard_piece_t** pieces, size_t* count);

/* Makes unit's parameters available (stage 3: all-gathers it into a gather window slot if it is
 * not already there or in flight, then starts prefetching the next units within prefetch_depth
 * and the byte budgets, in the order recorded during the first step or else the declared order;
 * stages 0-2: waits for the parameters' post-step all-gather). Blocks until the data is there.
 * A unit may be fetched again after release (backward, recomputation). Errors:
 * ZRT_INVALID_ARGUMENT (unknown unit), ZRT_INVALID_USAGE (not finalized, already fetched,
 * gather window full of fetched units: release one), ZRT_TIMEOUT, ZRT_REMOTE_ERROR. */
ZRT_API zrt_status_t zrt_partition_fetch(zrt_partition_t pm, int unit);

/* The framework is done with unit's parameters; stage 3 frees its window slot.
 * Errors: ZRT_INVALID_ARGUMENT (unknown unit), ZRT_INVALID_USAGE (unit not fetched). */
ZRT_API zrt_status_t zrt_partition_release(zrt_partition_t pm, int unit);

/* Pointer to a parameter's full data (numel elements of param_dtype), valid while its unit is
 * fetched (always, for resident parameters). The framework may read it, never write it. After
 * zrt_partition_step, the data of stages 1/2 is rewritten asynchronously until
 * zrt_partition_fetch of its unit has returned: read it only between fetch and the next step.
 * Errors: ZRT_INVALID_ARGUMENT, ZRT_INVALID_USAGE (unit not fetched). */
ZRT_API zrt_status_t zrt_partition_param_data(zrt_partition_t pm, int param, void** data);

/* Pointer where the framework writes a trainable parameter's gradient for this micro-batch
 * (numel elements of param_dtype, overwritten, not accumulated: zrt accumulates). The unit's
 * gradient buffers share one staging window: they are valid from this call until
 * zrt_partition_grad_ready of that unit, and only one unit's may be open at a time. zrt may
 * still be reading a unit's gradients out of its window after grad_ready returned (see there).
 * With host buckets two windows alternate, so the next unit's gradients go to the other one
 * while the last unit's leave; the first grad_data of a unit waits only until the window it
 * hands out has been read (the unit before the last). A pointer must therefore be taken again
 * for every unit, never kept from an earlier one. Parameters of a unit whose grad_data was
 * never called before its grad_ready (unused in this micro-batch) contribute zero gradients.
 * Errors: ZRT_INVALID_ARGUMENT
 * (unknown or frozen param), ZRT_INVALID_USAGE (another unit's gradients are open),
 * ZRT_TIMEOUT. */
ZRT_API zrt_status_t zrt_partition_grad_data(zrt_partition_t pm, int param, void** grad);

/* Whether the coming micro-batch reduces its gradients (1, default) or only accumulates them
 * locally (0; stages 0/1, or 2/3 with no_sync_accumulation). Set between micro-batches. Errors:
 * ZRT_INVALID_USAGE (in the middle of a backward, or no-sync unavailable in this stage). */
ZRT_API zrt_status_t zrt_partition_set_sync(zrt_partition_t pm, int sync);

/* The unit's gradients are written: zrt accumulates them into its buckets and starts the
 * reduction of every bucket this completes. It may wait for a bucket to come free (its previous
 * reduction), and returns once the work is enqueued: with host buckets (stages 2/3 without
 * no_sync_accumulation), large gradients are copied out of the window on zrt's progress thread
 * after the call returns, or, where the window holds a whole bucket in the reduce dtype, the
 * bucket's first reduction after a step reads the window itself; so the unit's gradient
 * pointers must not be written again (they are handed out anew by later grad_data calls, which
 * wait for those copies and reductions). Errors:
 * ZRT_INVALID_ARGUMENT (unknown unit), ZRT_INVALID_USAGE (signalled twice in one micro-batch),
 * ZRT_TIMEOUT, ZRT_REMOTE_ERROR. */
ZRT_API zrt_status_t zrt_partition_grad_ready(zrt_partition_t pm, int unit);

/* Global gradient figures over all ranks, computed on the reduced gradient shards after waiting
 * for all reductions: the L2 norm (sum of squares in f64) and whether any element is inf/NaN.
 * Either output may be NULL; asking for both costs one all-reduce. Collective. Errors:
 * ZRT_INVALID_ARGUMENT (both NULL), ZRT_INVALID_USAGE (gradients incomplete), ZRT_TIMEOUT. */
ZRT_API zrt_status_t zrt_partition_grad_norm(zrt_partition_t pm, double* norm, int* has_nonfinite);

/* What the optimizer callback receives: the local shard, count elements each. master, grad and
 * state[i] are f32 and contiguous; the optimizer updates master and state in place (grad is
 * read-only). Padding elements have zero gradient. pieces map the shard to parameters. */
typedef struct zrt_optimizer_args {
  size_t size; /* sizeof(zrt_optimizer_args_t) */
  float* master;
  const float* grad;
  float* const* state;
  int num_state;
  size_t count;
  const zrt_shard_piece_t* pieces;
  size_t num_pieces;
  int64_t step; /* 1 on the first step */
} zrt_optimizer_args_t;

/* Returns ZRT_SUCCESS, or an error that zrt_partition_step passes on (see there for what is
 * rolled back).
 *
 * mem_kind ZRT_MEM_CUDA: master, grad, state and every pointer the partition hands out
 * (param_data, grad_data) are device pointers, and load_param's values must be device memory
 * too. The optimizer is a device-side optimizer launched by the framework. zrt synchronizes its
 * own streams before the callback (the gradient shard is final); the callback must launch its
 * kernels on the legacy default stream or a blocking stream, or synchronize its stream before
 * returning, since zrt's publishing kernels are ordered after those streams (device-side
 * waits, no host synchronization). Gradients likewise: zrt's work for grad_ready starts after
 * what the framework queued on those streams, and the framework's later kernels there start
 * after zrt has consumed the gradient window and published the parameters.
 * zrt_partition_create with ZRT_MEM_CUDA initialises the communicator's NCCL side
 * (collective) and returns ZRT_UNSUPPORTED with the CUDA runtime's reason when no device is
 * usable, or when zrt was built without NCCL. */
typedef zrt_status_t (*zrt_optimizer_fn)(const zrt_optimizer_args_t* args, void* user_data);

/* Waits for all reductions, calls optimizer once with the local shard, then publishes the
 * updated parameters and returns without waiting for them: stage 0 converts master to
 * param_dtype at once; stages 1/2 enqueue, bucket by bucket on the all-gather stream, the
 * conversion of this rank's slice and the all-gather of the bucket (zrt_partition_fetch waits
 * for its unit's buckets); stage 3 converts each unit's slice of the parameter shard just ahead
 * of that unit's next all-gather and regathers the persistent parameters at once. Checkpoints
 * (zrt_partition_save, zrt_partition_export_full) wait for all of it. The gradients are then
 * clear for the next step. Collective. Errors: ZRT_INVALID_ARGUMENT
 * (NULL optimizer), ZRT_INVALID_USAGE (gradients of some unit missing, no synchronised
 * micro-batch, units still fetched), the optimizer's error, ZRT_TIMEOUT, ZRT_REMOTE_ERROR.
 *
 * All or nothing. The ranks agree twice (one tiny all-gather of each rank's status, N > 1):
 * after the reductions, so that no rank runs its optimizer unless every rank's reductions
 * succeeded; and after the optimizer, so that a callback failing on any rank fails the step on
 * every rank. A step that returns an error leaves master, optimizer state, parameters, the
 * gradients and the step count as they were before the call, on every rank, so the framework
 * can checkpoint or call zrt_partition_step again:
 *  - failures before the optimizer (a reduction that fails or times out, a dead peer, a usage
 *    error on some rank): nothing was touched; a rank returns its own error, or
 *    ZRT_REMOTE_ERROR naming the ranks that failed when its own part succeeded (a NULL
 *    optimizer is refused at once, without the vote);
 *  - an optimizer failing on some rank(s): with step_backup = 1 (default) every rank restores
 *    master and state from the copy taken just before the callback. Every rank returns the
 *    status of the lowest failing rank's callback, and the message names each failing rank
 *    and its status;
 *  - the agreement itself failing (a peer died or the communicator was aborted during the
 *    optimizer): this rank restores locally and returns the communication error;
 *  - publishing failing after every optimizer succeeded (the all-gathers could not be
 *    enqueued): master and state are restored and the local parameters re-derived from them
 *    (stage 3 shard, stages 0-2 the owned slices; slices that peers' gathers had already
 *    delivered are not re-fetched).
 * With step_backup = 0 only failures before the optimizer are covered: after an optimizer
 * failure on any rank (or a failed agreement after it), every rank returns an error without
 * publishing, and master/state hold whatever the callbacks left (updated where they succeeded);
 * restore from a checkpoint rather than retrying. The post-step conversions and all-gathers run
 * asynchronously: once zrt_partition_step has returned ZRT_SUCCESS the step is committed, and a
 * later gather failure surfaces in zrt_partition_fetch. The copy of master and state for
 * step_backup is taken in the background, a share at each zrt_partition_fetch after they
 * changed, so it overlaps the framework's compute; a step copies what the fetches did not. */
ZRT_API zrt_status_t zrt_partition_step(zrt_partition_t pm, zrt_optimizer_fn optimizer,
                                        void* user_data);

/* Bytes this rank holds, per category. Model state = full_params + param_shard + gradients +
 * grad_shard + master + optimizer_state; theoretical_model_state is the ZeRO formula for the
 * configuration (f16 params and Adam: 16P; 4P + 12P/N; 2P + 14P/N; 16P/N, generalised to the
 * configured dtypes and slots, plus replicated frozen and persistent parameters and, with
 * no_sync_accumulation, the full local gradients), computed for the unpadded parameter count;
 * the difference is the segments' padding. */
typedef struct zrt_partition_memory {
  size_t size;              /* sizeof(zrt_partition_memory_t); set before the call */
  uint64_t full_params;     /* gathered-for-good parameters (stages 0-2; stage 3 persistent) */
  uint64_t param_shard;     /* stage 3 parameter shard */
  uint64_t gradients;       /* full local gradients (stages 0/1; 2/3 with no-sync) */
  uint64_t grad_shard;      /* reduced gradient shard (stages 2/3) */
  uint64_t master;          /* f32 master shard */
  uint64_t optimizer_state; /* optimizer_slots f32 arrays of shard size */
  uint64_t buckets;         /* reduction buckets (constant size) */
  uint64_t gather_window;   /* stage 3 gather window slots (constant size) */
  uint64_t grad_staging;    /* the framework's gradient window (the largest unit's
                               gradients; two that alternate with host buckets, stages 2/3),
                               and the f32 copy of the gradient shard handed to the optimizer
                               when reduce_dtype is not f32 (or the shard is not contiguous,
                               stage 1) */
  uint64_t model_state;     /* sum of the six model-state categories */
  uint64_t total;           /* every category, step_backup included */
  double theoretical_model_state; /* the ZeRO formula, unpadded */
  uint64_t parameters;            /* trainable elements (P), without padding */
  uint64_t padded_parameters;     /* trainable elements with segment padding */
  uint64_t step_backup;           /* copy of master + optimizer state for rolling back a failed step
                                     (step_backup = 1); not model state, included in total. Written
                                     only when memory->size covers it */
} zrt_partition_memory_t;

/* Fills *memory for a finalized manager (measured from its arenas); memory->size may be that
 * of an older struct ending at padded_parameters. Local. Errors:
 * ZRT_INVALID_ARGUMENT (NULL, size too small), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_memory(zrt_partition_t pm, zrt_partition_memory_t* memory);

/* Counters of the stage 3 gather window since finalize (all zero in stages 0-2 except
 * fetches), for tuning prefetch_depth and the byte budgets. */
typedef struct zrt_partition_stats {
  size_t size; /* sizeof(zrt_partition_stats_t); set before the call */
  uint64_t fetches;
  uint64_t gathers;       /* all-gathers issued on demand */
  uint64_t prefetches;    /* all-gathers issued ahead */
  uint64_t prefetch_hits; /* fetches that found their unit gathered or in flight */
  uint64_t evictions;     /* prefetched units dropped unused (the fetch order changed) */
  int max_gathered_units; /* peak of non-persistent units in the window at once */
  uint64_t max_gathered_bytes;
  int order_recorded;    /* 1 once the first step's fetch order is used for prefetching */
  int order_invalidated; /* 1 if a later fetch departed from it (declared order since) */
} zrt_partition_stats_t;

/* Reads the window counters. Local. Errors: ZRT_INVALID_ARGUMENT (NULL, size too small),
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_stats(zrt_partition_t pm, zrt_partition_stats_t* stats);

/* ---------------------------------------------------------------------------------------------
 * CUDA (device memory through NCCL)
 *
 * Builds with CUDA and NCCL (-Dnccl=enabled or found) serve ZRT_MEM_CUDA: zrt_stream_create(comm,
 * ZRT_MEM_CUDA, ...) makes a zrt-owned high-priority CUDA stream, and collectives enqueued on a
 * CUDA stream are NCCL calls on it (same argument conventions as above; buffers must be device
 * memory of the communicator's device). Other builds, and machines without a usable GPU, answer
 * ZRT_UNSUPPORTED with the reason ("built without NCCL", "no usable CUDA device:
 * cudaErrorInsufficientDriver ...").
 *
 * Device: under zrt-run (ZRT_LOCAL_RANK set) rank r uses device local_rank % device_count;
 * otherwise the device current on the calling thread when the communicator's first CUDA stream
 * is created (call cudaSetDevice first, as with NCCL).
 * NCCL initialisation: the first CUDA stream (zrt_stream_create with ZRT_MEM_CUDA or
 * zrt_stream_from_cuda) of a communicator is collective: it exchanges NCCL's unique id with an
 * all-gather on the default stream, so every rank must create it at the same point relative to
 * the other collectives of the default stream. ncclCommInitRankConfig runs non-blocking and is
 * aborted after the communicator's timeout. zrt_comm_split of a communicator that has its NCCL
 * side splits it too (ncclCommSplit).
 * Ordering: zrt_event_create_cuda makes an event over a cudaEvent_t; recorded on a CUDA stream
 * and waited on by another, the dependency stays on the device (cudaStreamWaitEvent), never a
 * host synchronisation. Host functions of zrt on a CUDA stream run on CUDA's callback thread.
 * Errors on CUDA streams: an NCCL asynchronous error, a dead peer or a hang surface as
 * ZRT_REMOTE_ERROR / ZRT_TIMEOUT within the communicator's timeout (NCCL is then aborted).
 * Point-to-point on CUDA streams is NCCL's: a send may wait until its peer posts the matching
 * receive, so order sends and receives so that no cycle of ranks all send first (as with
 * blocking MPI sends). A send to and receive from the own rank become one device copy.
 * ------------------------------------------------------------------------------------------- */

/* The number of usable CUDA devices into *count (> 0). Errors: ZRT_INVALID_ARGUMENT (NULL),
 * ZRT_UNSUPPORTED (built without CUDA/NCCL, or no usable device: the message carries the CUDA
 * runtime's reason). Thread-safe; needs no communicator. */
ZRT_API zrt_status_t zrt_cuda_device_count(int* count);

/* NCCL's version code (e.g. 22809 for 2.28.9) into *version; needs no device.
 * Errors: ZRT_INVALID_ARGUMENT (NULL), ZRT_UNSUPPORTED (built without NCCL). Thread-safe. */
ZRT_API zrt_status_t zrt_nccl_version(int* version);

/* Wraps the framework's CUDA stream (a cudaStream_t passed as void*; 0 means CUDA's legacy
 * default stream) as a zrt stream of kind ZRT_MEM_CUDA, so that collectives and events can be
 * placed on the framework's own stream. zrt never destroys the CUDA stream; it must outlive the
 * zrt stream. Same ordering rule and first-use initialisation as zrt_stream_create.
 * Errors: ZRT_INVALID_ARGUMENT (NULL comm or output), ZRT_UNSUPPORTED, ZRT_TIMEOUT,
 * ZRT_REMOTE_ERROR (another rank could not initialise CUDA: it is named). */
ZRT_API zrt_status_t zrt_stream_from_cuda(zrt_comm_t comm, void* cuda_stream, zrt_stream_t* stream);

/* The cudaStream_t behind a CUDA zrt stream, into *cuda_stream. Errors: ZRT_INVALID_ARGUMENT
 * (NULL, or a host stream). */
ZRT_API zrt_status_t zrt_stream_get_cuda(zrt_stream_t stream, void** cuda_stream);

/* Creates an event over a cudaEvent_t on the communicator's device (initialising the NCCL side
 * like the first CUDA stream if needed). It may be recorded on CUDA and host streams; destroy it
 * with zrt_event_destroy. Errors: ZRT_INVALID_ARGUMENT, ZRT_UNSUPPORTED. */
ZRT_API zrt_status_t zrt_event_create_cuda(zrt_comm_t comm, zrt_event_t* event);

/* ---------------------------------------------------------------------------------------------
 * Checkpoints of partition managers (sharded, atomic, loadable at another N)
 *
 * A checkpoint is a folder holding one shard file per rank of the saving run and manifest.json,
 * which names every parameter (name, numel, frozen) and maps each byte range of each shard file
 * to a (parameter, element range): master weights (f32), every optimizer state slot (f32), the
 * param-dtype copy when param_dtype is not f32, and the frozen parameters. The mapping does not
 * depend on N, the stage or the bucket size, so a checkpoint loads into any of them.
 *
 * Crash safety: every file is written under a temporary name, fsynced and renamed, shard files
 * carry a per-save tag in their names, and rank 0 writes the manifest last, after every rank's
 * shard is durable; files of earlier saves are removed only after that. A crash at any point
 * leaves the previous checkpoint in the folder loadable. Each file's checksum (xxh3-64) is in
 * the manifest and is verified on load. The manifest format is documented in
 * lib/checkpoint/manifest.h; tools/zrt-ckpt inspects and consolidates checkpoints.
 *
 * All four calls are collective over the manager's communicator and must be made between steps
 * (after zrt_partition_finalize or zrt_partition_step; no unit fetched, no gradients pending).
 * Every rank returns the same status and message.
 * ------------------------------------------------------------------------------------------- */

/* Saves the manager's state into folder `dir` (created if needed; a previous checkpoint there
 * is replaced atomically). Each rank writes only its own shard, in parallel. Errors:
 * ZRT_INVALID_ARGUMENT (NULL), ZRT_INVALID_USAGE (not finalized, in the middle of a step),
 * ZRT_SYSTEM_ERROR (a file could not be written: the file and errno are named), ZRT_TIMEOUT,
 * ZRT_REMOTE_ERROR. On error the folder still holds the previous checkpoint, if any. */
ZRT_API zrt_status_t zrt_partition_save(zrt_partition_t pm, const char* dir);

/* Loads the checkpoint in `dir`, saved at any N, stage and bucket size by a manager with the
 * same parameters (names, sizes, frozen flags, in order) and optimizer_slots. Each rank reads
 * just the byte ranges its shard now owns; every file is verified against its checksum. On
 * success the manager behaves as if it had trained to the saved step (parameters republished,
 * zrt_partition_get_step = saved step, the optimizer's next step count follows it). On any
 * error the state of every rank is untouched. Errors: ZRT_INVALID_ARGUMENT (NULL; no manifest;
 * a missing, truncated or corrupted file; a manifest for another model or of an unknown format
 * version: the message names the file and the parameter), ZRT_INVALID_USAGE (not finalized,
 * in the middle of a step), ZRT_SYSTEM_ERROR, ZRT_TIMEOUT, ZRT_REMOTE_ERROR. */
ZRT_API zrt_status_t zrt_partition_load(zrt_partition_t pm, const char* dir);

/* Writes the full parameters into one file at `path` for inference, in the safetensors layout
 * (8-byte little-endian header length, JSON header {name: {dtype, shape [numel], data_offsets}},
 * then the data; tensor names are "unit.param", or the parameter's name when it already starts
 * with "unit.", made unique with ".<index>"). dtype: ZRT_F32,
 * or ZRT_F16/ZRT_BF16 (converted from the f32 master, which is what the parameters hold when it
 * is param_dtype). Gathered a segment (bucket or unit) at a time: no rank ever holds the whole
 * model. Rank 0 writes the file (temporary name, fsync, rename). Errors: ZRT_INVALID_ARGUMENT
 * (NULL, dtype), ZRT_INVALID_USAGE, ZRT_SYSTEM_ERROR (naming the file), ZRT_TIMEOUT. */
ZRT_API zrt_status_t zrt_partition_export_full(zrt_partition_t pm, const char* path,
                                               zrt_dtype_t dtype);

/* The number of optimizer steps taken (or loaded from a checkpoint) into *step. Local.
 * Errors: ZRT_INVALID_ARGUMENT (NULL), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_get_step(zrt_partition_t pm, int64_t* step);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZRT_ZRT_H_ */
