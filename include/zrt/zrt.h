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

/* ---------------------------------------------------------------------------------------------
 * Status codes and errors
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_status {
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

typedef enum zrt_dtype {
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
typedef enum zrt_op {
  ZRT_SUM = 0,
  ZRT_AVG = 1, /* sum, then divide by the number of ranks (floating types only) */
  ZRT_MIN = 2,
  ZRT_MAX = 3,
  ZRT_PROD = 4,
  ZRT_OP_COUNT = 5
} zrt_op_t;

typedef enum zrt_mem_kind {
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
ZRT_API zrt_status_t zrt_send(zrt_comm_t comm, const void* sendbuf, size_t count,
                              zrt_dtype_t dtype, int peer, zrt_stream_t stream);
ZRT_API zrt_status_t zrt_recv(zrt_comm_t comm, void* recvbuf, size_t count, zrt_dtype_t dtype,
                              int peer, zrt_stream_t stream);

/* Creates a reduction that multiplies each rank's input by `scalar`, then sums (gradient
 * averaging by 1/N or unscaling by a loss scale in one pass). Floating dtypes only. The op is
 * valid on comm until zrt_op_destroy or zrt_comm_destroy. Local. */
ZRT_API zrt_status_t zrt_op_create_premul_sum(zrt_comm_t comm, double scalar, zrt_op_t* op);
ZRT_API zrt_status_t zrt_op_destroy(zrt_comm_t comm, zrt_op_t op);

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_coll_kind {
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

typedef struct zrt_coll_counters {
  uint64_t calls;          /* operations completed */
  uint64_t bytes_sent;     /* payload bytes this rank sent to other ranks */
  uint64_t bytes_received; /* payload bytes this rank received from other ranks */
  uint64_t busy_ns;        /* wall time from start to completion, summed over operations */
} zrt_coll_counters_t;

typedef struct zrt_comm_stats {
  size_t size; /* sizeof(zrt_comm_stats_t) as the caller compiled it; set before the call */
  zrt_coll_counters_t per_kind[ZRT_COLL_KIND_COUNT];
  zrt_coll_counters_t total;
} zrt_comm_stats_t;

/* Reads the communicator's counters since creation or the last reset (only completed
 * operations count). stats->size must be set. Thread-safe.
 * Errors: ZRT_INVALID_ARGUMENT (NULL, or stats->size too small). */
ZRT_API zrt_status_t zrt_comm_stats(zrt_comm_t comm, zrt_comm_stats_t* stats);
ZRT_API zrt_status_t zrt_comm_stats_reset(zrt_comm_t comm);

/* @@PARTITION_API@@ (section owned by the partition manager; see below) */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZRT_ZRT_H_ */
