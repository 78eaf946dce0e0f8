/*
 * zrt.h — the public C API of zrt, a collective-communication runtime for ZeRO-style sharded
 * data-parallel training. The only header a framework includes; it compiles as C99 and as C++.
 * This header is the contract; docs/API.md is the usage guide (the protocols, the environment,
 * the checkpoint format).
 *
 * Conventions (they hold for every function unless its own comment says otherwise):
 *  - Status. Every function returns a zrt_status_t. On anything but ZRT_SUCCESS (or
 *    ZRT_IN_PROGRESS where documented), zrt_last_error() on the same thread names the function,
 *    the argument or peer at fault, and the cause.
 *  - Outputs. Output arguments are written only on success.
 *  - NULL. A NULL handle or a NULL output pointer is ZRT_INVALID_ARGUMENT; so is a handle that
 *    zrt did not create or has destroyed, when zrt can tell. Pointers that may be NULL say so.
 *  - Errors. Each function lists the errors specific to it. Not listed because always possible:
 *    ZRT_INVALID_ARGUMENT for NULL or foreign handles and outputs, ZRT_OUT_OF_MEMORY (also
 *    before allocating: a request that does not fit the memory available or the process's
 *    memory cgroup is refused with the figures, nothing allocated),
 *    ZRT_INTERNAL_ERROR, and, for every call that waits for peers, ZRT_TIMEOUT and
 *    ZRT_REMOTE_ERROR. Nothing aborts the process: a failed or vanished peer surfaces as
 *    ZRT_REMOTE_ERROR or ZRT_TIMEOUT within the communicator's timeout.
 *  - Local and collective. "Local" calls involve no other rank. "Collective" calls must be made
 *    by every rank of the communicator, in the same order relative to its other collective
 *    calls, and block until their exchange with the other ranks is done (or has failed).
 *  - Asynchronous work. Collectives and point-to-point calls are enqueued on a stream and return
 *    at once; their buffers must stay valid and unmodified until the work completes. Work that
 *    failed with its communicator (a peer's error, a mismatch, a timeout) may still have a
 *    transfer in the transport: its buffers stay valid until zrt_comm_destroy of that
 *    communicator returns, which cancels it (NCCL asks the same of ncclCommAbort).
 *  - Threads. Functions on different communicators may run concurrently. Functions on one
 *    communicator may be called from several threads unless documented otherwise; work enqueued
 *    on one stream from several threads is ordered by the order of the calls. A partition
 *    manager is used from one thread at a time.
 *  - ABI. Every struct that can grow starts with its size in bytes (a size_t, `struct_size` in
 *    zrt_oob_t; config structs then a magic and the header version) and only ever grows at its
 *    end; arrays would come last. The caller sets the size to sizeof the struct as it compiled
 *    it (the ZRT_..._INIT macros and zrt_..._init functions do). zrt accepts any size from the
 *    end of that header on: it reads the config fields the size covers (the rest keep their
 *    defaults) and writes only the first `size` bytes of a query struct. A size below the
 *    header, or a config struct larger than this library knows (its new fields would be
 *    ignored), is ZRT_INVALID_ARGUMENT. Structs without a size never change.
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

/* The magic of every config struct; a config struct without it is refused. */
#define ZRT_CONFIG_MAGIC 0x7a72u /* "zr" */

/* The enums below are C enums: a C caller may pass any int, and zrt checks it. C++ sees them
 * with the underlying type int (same size and ABI; docs/API.md, "Enums", says why). */
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
  ZRT_INTERNAL_ERROR = 9,   /* a bug in zrt: please report the message */
  ZRT_CALLBACK_ERROR = 10   /* the framework's callback failed (its message is in the error) */
} zrt_status_t;

/* The constant's name ("ZRT_TIMEOUT"), or "ZRT_UNKNOWN_STATUS". Never NULL. Thread-safe. */
ZRT_API const char* zrt_status_string(zrt_status_t status);

/* For the framework's callbacks (the optimizer of zrt_partition_step, the zrt_oob_t functions):
 * records `message` (copied; NULL = "") as the calling thread's callback failure and returns
 * ZRT_CALLBACK_ERROR, so a callback fails with `return zrt_callback_error("...");`. The zrt call
 * that invoked the callback reads the message when the callback returns ZRT_CALLBACK_ERROR and
 * puts it, with the failing rank, into zrt_last_error() (on every rank, for collective calls).
 * A callback that returns ZRT_CALLBACK_ERROR without calling this gets a generic message. A
 * value outside zrt_status_t returned by a callback is reported as such, as a
 * ZRT_CALLBACK_ERROR. Thread-safe (one message per thread); never fails. */
ZRT_API zrt_status_t zrt_callback_error(const char* message);

/* The message of the calling thread's last failed zrt call ("" if none), valid until the
 * thread's next zrt call. Thread-safe (one message per thread). */
ZRT_API const char* zrt_last_error(void);

/* The library's ZRT_VERSION_CODE. Thread-safe. */
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

/* The size in bytes of one element of dtype. Errors: ZRT_INVALID_ARGUMENT (unknown dtype).
 * Thread-safe. */
ZRT_API zrt_status_t zrt_dtype_size(zrt_dtype_t dtype, size_t* bytes);

/* Built-in reductions. Values >= ZRT_OP_COUNT are created operations (zrt_op_create_premul_sum),
 * valid only on the communicator that created them. */
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

/* The longest timeout zrt keeps (10^12 ms, about 31 years; ZRT_TIMEOUT's own limit). */
#define ZRT_TIMEOUT_MAX_MS 1000000000000LL

typedef struct zrt_comm_config {
  size_t size;        /* sizeof(zrt_comm_config_t) as the caller compiled it */
  uint32_t magic;     /* ZRT_CONFIG_MAGIC */
  uint32_t version;   /* ZRT_VERSION_CODE as the caller compiled it; not 0 */
  int64_t timeout_ms; /* every wait fails with ZRT_TIMEOUT after this long without progress;
                         0 = ZRT_TIMEOUT from the environment (seconds), else 60 s; values
                         above ZRT_TIMEOUT_MAX_MS are clamped to it ("wait forever") */
  const char* name;   /* shown in log lines, 1 to 64 characters; NULL = "zrt"; copied */
} zrt_comm_config_t;

#define ZRT_COMM_CONFIG_INIT                                                      \
  {                                                                               \
    sizeof(zrt_comm_config_t), /* size */                                         \
        ZRT_CONFIG_MAGIC,      /* magic */                                        \
        ZRT_VERSION_CODE,      /* version */                                      \
        0,                     /* timeout_ms: ZRT_TIMEOUT from the environment */ \
        NULL                   /* name: "zrt" */                                  \
  }

/* Writes the defaults of ZRT_COMM_CONFIG_INIT into the first `size` bytes of *config, `size`
 * being sizeof(zrt_comm_config_t) as the caller compiled it (for bindings that cannot use the
 * macro). Local; thread-safe. Errors: ZRT_INVALID_ARGUMENT (size below the header). */
ZRT_API zrt_status_t zrt_comm_config_init(zrt_comm_config_t* config, size_t size);

/* Creates a communicator over all ranks of a job, reading the ranks and the rendezvous store
 * from the environment (zrt's, torchrun's, Open MPI's or Slurm's variables: see docs/API.md).
 * config may be NULL for the defaults; it is not kept. Collective; blocks until every rank has
 * arrived. Thread-safe: each call creates an independent communicator. Errors:
 * ZRT_INVALID_ARGUMENT (bad config, malformed environment: the variable is named), ZRT_TIMEOUT
 * (naming the missing ranks), ZRT_REMOTE_ERROR (job token refused), ZRT_SYSTEM_ERROR. */
ZRT_API zrt_status_t zrt_comm_init_env(const zrt_comm_config_t* config, zrt_comm_t* comm);

/* An out-of-band all-gather from a framework that already has a process group (the protocol
 * zrt follows with it is in docs/API.md). The callbacks are called only from inside
 * zrt_comm_init_oob and zrt_comm_split, on the calling thread. */
typedef struct zrt_oob {
  size_t struct_size; /* sizeof(zrt_oob_t) as the caller compiled it (`size` is the rank count) */
  /* Starts gathering `bytes` bytes from every rank: rank r's land at recvbuf + r * bytes. */
  zrt_status_t (*allgather)(const void* sendbuf, void* recvbuf, size_t bytes, void* user_data,
                            void** request);
  zrt_status_t (*test)(void* request); /* ZRT_SUCCESS, ZRT_IN_PROGRESS, or an error */
  void (*free)(void* request);         /* called once per request */
  void* user_data;                     /* passed to allgather */
  int rank;                            /* 0 <= rank < size */
  int size;                            /* number of ranks, >= 1 */
  int local_rank;                      /* -1 = derive from host names (with local_size) */
  int local_size;                      /* -1 = derive from host names (with local_rank) */
} zrt_oob_t;

#define ZRT_OOB_INIT                                     \
  {                                                      \
    sizeof(zrt_oob_t), /* struct_size */                 \
        NULL,          /* allgather: must be set */      \
        NULL,          /* test: must be set */           \
        NULL,          /* free: must be set */           \
        NULL,          /* user_data */                   \
        0,             /* rank: must be set */           \
        0,             /* size: must be set */           \
        -1,            /* local_rank: from host names */ \
        -1             /* local_size: from host names */ \
  }

/* Writes the defaults of ZRT_OOB_INIT into the first `size` bytes of *oob, `size` being
 * sizeof(zrt_oob_t) as the caller compiled it. Local; thread-safe. Errors: ZRT_INVALID_ARGUMENT
 * (size below the header). */
ZRT_API zrt_status_t zrt_oob_init(zrt_oob_t* oob, size_t size);

/* Creates a communicator over oob->size ranks through the caller's all-gather; needs no store
 * and no environment. oob and config (NULL = defaults) are not kept. Collective. Errors:
 * ZRT_INVALID_ARGUMENT (NULL callback, rank not in [0, size), inconsistent local_rank and
 * local_size, bad config), ZRT_REMOTE_ERROR (a callback failed: its status is in the message),
 * ZRT_CALLBACK_ERROR (a callback returned it: its zrt_callback_error message; or a value
 * outside zrt_status_t), ZRT_SYSTEM_ERROR. */
ZRT_API zrt_status_t zrt_comm_init_oob(const zrt_oob_t* oob, const zrt_comm_config_t* config,
                                       zrt_comm_t* comm);

/* This rank, the number of ranks, and the same on this host. Local; thread-safe. */
ZRT_API zrt_status_t zrt_comm_rank(zrt_comm_t comm, int* rank);
ZRT_API zrt_status_t zrt_comm_size(zrt_comm_t comm, int* size);
ZRT_API zrt_status_t zrt_comm_local_rank(zrt_comm_t comm, int* local_rank);
ZRT_API zrt_status_t zrt_comm_local_size(zrt_comm_t comm, int* local_size);

/* The color that takes no part in any new communicator (*newcomm = NULL). */
#define ZRT_SPLIT_NOCOLOR (-1)

/* Splits comm: ranks with the same color form a new communicator, ordered by key then by old
 * rank. config NULL = comm's settings. Collective over comm, ordered with the other collectives
 * of its default stream; splits the NCCL side too when comm has one. Errors:
 * ZRT_INVALID_ARGUMENT (color < -1, bad config). */
ZRT_API zrt_status_t zrt_comm_split(zrt_comm_t comm, int color, int key,
                                    const zrt_comm_config_t* config, zrt_comm_t* newcomm);

/* Waits for the pending work of comm's streams, closes its connections (collective while comm
 * is healthy, local after an error or zrt_comm_abort) and frees everything made on it: streams,
 * events and ops. NULL is accepted. Not thread-safe with other calls on comm. Returns the first
 * error of the pending work; resources are freed regardless. */
ZRT_API zrt_status_t zrt_comm_destroy(zrt_comm_t comm);

/* Fails every pending and future operation on comm with ZRT_REMOTE_ERROR ("communicator
 * aborted") and wakes every thread waiting on it. Local and immediate; safe from any thread,
 * concurrently with waits on comm. zrt_comm_destroy still frees the resources. */
ZRT_API zrt_status_t zrt_comm_abort(zrt_comm_t comm);

/* ZRT_SUCCESS while comm is healthy, else the status of its first asynchronous failure (a dead
 * peer, a timeout, an abort), whose message zrt_last_error() then holds. Does not block;
 * thread-safe. */
ZRT_API zrt_status_t zrt_comm_get_error(zrt_comm_t comm);

/* ---------------------------------------------------------------------------------------------
 * Registered memory
 *
 * Host buffers that the communicator's peers on this host can map (shared memory zrt
 * allocates). Collectives take them like any host buffer, with the same results; an all-gather
 * whose sendbuf lies in one is read by the peers through their mapping of it (docs/API.md,
 * "Registered memory", says when that pays).
 * ------------------------------------------------------------------------------------------- */

/* Allocates `bytes` of registered host memory, page-aligned, zeroed and already touched, in
 * *buffer. Admitted against the machine's memory before anything is allocated. Valid until
 * zrt_mem_free, or zrt_comm_destroy, which frees what is left. Local; thread-safe. Errors:
 * ZRT_INVALID_ARGUMENT (bytes is 0), ZRT_OUT_OF_MEMORY, ZRT_SYSTEM_ERROR. */
ZRT_API zrt_status_t zrt_mem_alloc(zrt_comm_t comm, size_t bytes, void** buffer);

/* Frees a buffer of zrt_mem_alloc on the same comm; NULL is accepted. No enqueued work may still
 * use it. A peer that mapped it may keep its pages alive for a while (docs/API.md, "Registered
 * memory"). Local; thread-safe. Errors: ZRT_INVALID_ARGUMENT (not a live buffer of
 * zrt_mem_alloc on comm). */
ZRT_API zrt_status_t zrt_mem_free(zrt_comm_t comm, void* buffer);

/* The bytes comm's live zrt_mem_alloc buffers hold, in whole pages. Local; thread-safe. */
ZRT_API zrt_status_t zrt_mem_held(zrt_comm_t comm, size_t* bytes);

/* ---------------------------------------------------------------------------------------------
 * Streams and events
 *
 * A stream is an ordered queue of asynchronous work on one communicator (NULL = its default
 * stream); an event marks a point in a stream. Streams must be created in the same order on
 * every rank (stream k talks to stream k of the others). A failed operation fails its stream:
 * every later operation on it, every event recorded after it and every stream waiting on such
 * an event report the same status and message. The model is in docs/API.md.
 * ------------------------------------------------------------------------------------------- */

typedef struct zrt_stream* zrt_stream_t;
typedef struct zrt_event* zrt_event_t;

/* Creates a stream for buffers of memory kind `kind`. Local (ZRT_MEM_CUDA: the communicator's
 * first CUDA stream is collective, see the CUDA section). A communicator holds at most 1024
 * live streams. A host stream takes its staging memory at its first collective (how much:
 * docs/API.md, "Stream memory"), so that collective may fail with ZRT_OUT_OF_MEMORY. Errors:
 * ZRT_INVALID_ARGUMENT (kind), ZRT_INVALID_USAGE (1024 live streams already), ZRT_UNSUPPORTED
 * (kind not built in, no usable device). */
ZRT_API zrt_status_t zrt_stream_create(zrt_comm_t comm, zrt_mem_kind_t kind, zrt_stream_t* stream);

/* Waits for the stream's work, then destroys it; on a failed stream, until zrt no longer
 * touches the buffers of its work, so they may be freed once it returns. Returns the stream's
 * error, if any. Errors: ZRT_INVALID_USAGE (the default stream, which zrt_comm_destroy frees). */
ZRT_API zrt_status_t zrt_stream_destroy(zrt_stream_t stream);

/* Blocks, without spinning, until the work enqueued so far has completed; returns ZRT_SUCCESS
 * or the stream's error. */
ZRT_API zrt_status_t zrt_stream_synchronize(zrt_stream_t stream);

/* ZRT_SUCCESS if the work enqueued so far has completed, ZRT_IN_PROGRESS if not, else the
 * stream's error. Does not block. */
ZRT_API zrt_status_t zrt_stream_query(zrt_stream_t stream);

/* Makes the work enqueued on `stream` after this call wait until `event` has completed (an
 * event never recorded is complete). The event may belong to another stream of the same
 * communicator. Errors: ZRT_INVALID_ARGUMENT (objects of different communicators). */
ZRT_API zrt_status_t zrt_stream_wait_event(zrt_stream_t stream, zrt_event_t event);

/* Creates and destroys a host event. Local. */
ZRT_API zrt_status_t zrt_event_create(zrt_comm_t comm, zrt_event_t* event);
ZRT_API zrt_status_t zrt_event_destroy(zrt_event_t event);

/* Moves the event to the stream's current tail: it completes once everything enqueued on the
 * stream before this call has. */
ZRT_API zrt_status_t zrt_event_record(zrt_event_t event, zrt_stream_t stream);

/* ZRT_SUCCESS (completed), ZRT_IN_PROGRESS, or the error of the work it follows. Does not
 * block. */
ZRT_API zrt_status_t zrt_event_query(zrt_event_t event);

/* Blocks until the event has completed; returns its status. */
ZRT_API zrt_status_t zrt_event_synchronize(zrt_event_t event);

/* ---------------------------------------------------------------------------------------------
 * Collectives and point-to-point
 *
 * Enqueued on `stream` (NULL = the default stream); they return without waiting for their
 * completion, which the stream (or an event recorded after the call) reports. A small
 * collective on an idle host stream may first run for a bounded time in the call itself, and
 * complete there (docs/API.md, "Small collectives in the call"); the buffers' rules are the
 * same either way. Counts are in elements of dtype.
 * Buffers follow NCCL's conventions:
 *  - reduce_scatter: sendbuf holds size * recvcount elements, recvbuf recvcount; in place when
 *    recvbuf == sendbuf + rank * recvcount.
 *  - all_gather: sendbuf holds sendcount elements, recvbuf size * sendcount; in place when
 *    sendbuf == recvbuf + rank * sendcount.
 *  - all_reduce, broadcast, reduce: in place when sendbuf == recvbuf.
 * Any other overlap of sendbuf and recvbuf is ZRT_INVALID_ARGUMENT. Every rank must enqueue the
 * same collectives on its stream k in the same order, with the same count, dtype, op and root.
 * Results are bitwise identical on all ranks and from run to run for a given size and algorithm.
 * Errors at enqueue: ZRT_INVALID_ARGUMENT (NULL buffer with count > 0, unknown dtype or op,
 * root or peer out of range, a stream or op of another communicator, bad overlap). Errors at
 * completion, through the stream: ZRT_REMOTE_ERROR, ZRT_TIMEOUT, and ZRT_INVALID_USAGE when the
 * collective-order checker finds ranks calling different collectives. Algorithms, shared-memory
 * windows and the checker are described in docs/API.md.
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

/* A zrt_send to `peer` matches the zrt_recv from this rank enqueued in the same order on the
 * peer's corresponding stream; counts and dtypes must agree (a message longer than the receive
 * buffer fails both sides). peer may be the own rank (a local copy). On CUDA streams a send may
 * wait for its receive: see docs/API.md. */
ZRT_API zrt_status_t zrt_send(zrt_comm_t comm, const void* sendbuf, size_t count, zrt_dtype_t dtype,
                              int peer, zrt_stream_t stream);
ZRT_API zrt_status_t zrt_recv(zrt_comm_t comm, void* recvbuf, size_t count, zrt_dtype_t dtype,
                              int peer, zrt_stream_t stream);

/* Creates a reduction that multiplies each rank's input by `scalar`, then sums. Floating dtypes
 * only. Valid only on comm (another communicator may hand out the same value), until
 * zrt_op_destroy or zrt_comm_destroy. Local. */
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
   * checks, checkpoint export's gathers, the NCCL id exchange, splits, closing barriers. */
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

/* Writes this rank's flight recorder (its last ZRT_TRACE_DEPTH collectives and partition calls,
 * each posted, started, done or failed, with times) as the JSON-lines file
 * <dir>/zrt-trace-r<rank>-c<n>.jsonl, replacing an older one; `tools/zrt-trace <dir>` merges
 * the files of a job. dir NULL or "" = ZRT_TRACE_DIR. Local (the other ranks write theirs when
 * they call it, fail, or get SIGUSR1 with ZRT_TRACE_DIR set); works on a failed communicator;
 * thread-safe. Errors: ZRT_INVALID_ARGUMENT (no directory: dir empty and ZRT_TRACE_DIR unset),
 * ZRT_INVALID_USAGE (ZRT_TRACE_DEPTH=0), ZRT_SYSTEM_ERROR (the file cannot be written). */
ZRT_API zrt_status_t zrt_comm_dump_trace(zrt_comm_t comm, const char* dir);

/* ---------------------------------------------------------------------------------------------
 * Partition managers (ZeRO stages 0/1/2/3)
 *
 * A framework registers its parameters, grouped in units (its layers or modules) in forward
 * order, then finalizes; zrt then owns the sharded buffers (parameters, gradients, f32 master
 * weights, optimizer state) and all ZeRO communication, and calls the framework's optimizer on
 * the local shard. Per step: forward, fetch/release each unit; backward, fetch, write the
 * gradients, grad_ready, release; then zrt_partition_step. docs/API.md gives the layout, the
 * protocol and its windows. Every call fails with ZRT_INVALID_USAGE when made out of that order
 * (before finalize where a finalized manager is needed, after it where registration is meant).
 * ------------------------------------------------------------------------------------------- */

typedef struct zrt_partition* zrt_partition_t;

/* Parameter flags for zrt_partition_add_param. */
#define ZRT_PARAM_DEFAULT 0u
#define ZRT_PARAM_FROZEN 1u    /* no gradient: replicated, never reduced or updated */
#define ZRT_PARAM_UNSHARDED 2u /* stage 3: always gathered (its master/state stay sharded) */

/* The most dimensions a registered shape may have. */
#define ZRT_MAX_DIMS 8

/* zrt_partition_config_t.shard_group_size: shard among the ranks of one host (HSDP's usual
 * mesh), replicate across hosts; hpz_group_size: the secondary copy among them. */
#define ZRT_SHARD_GROUP_HOST (-1)

/* zrt_partition_config_t.step_backup: what zrt keeps so that a step whose optimizer callback
 * fails can be undone (zrt_partition_step states what each leaves). */
typedef enum zrt_step_backup ZRT_ENUM_TYPE {
  ZRT_STEP_BACKUP_NONE = 0,    /* nothing: a failing callback's writes stay; reload a checkpoint */
  ZRT_STEP_BACKUP_FULL = 1,    /* a copy of master + state: the whole step rolls back everywhere */
  ZRT_STEP_BACKUP_SEGMENT = 2, /* one segment's slice of master + state (constant size): the
                                  callback runs per segment and a failure leaves the step
                                  resumable; offload_optimizer keeps the full copy instead */
  ZRT_STEP_BACKUP_COUNT = 3
} zrt_step_backup_t;

typedef struct zrt_partition_config {
  size_t size;                  /* sizeof(zrt_partition_config_t) as the caller compiled it */
  uint32_t magic;               /* ZRT_CONFIG_MAGIC */
  uint32_t version;             /* ZRT_VERSION_CODE as the caller compiled it */
  int stage;                    /* 0, 1, 2, 3 */
  zrt_dtype_t param_dtype;      /* f32, f16 or bf16 */
  zrt_dtype_t reduce_dtype;     /* gradient buckets and reductions: f32, f16 or bf16 */
  zrt_dtype_t master_dtype;     /* must be f32 */
  int optimizer_slots;          /* f32 state arrays per element, 0..16 */
  size_t bucket_bytes;          /* stages 0-2 gradient bucket size; holds one element at least */
  int prefetch_depth;           /* stage 3 units gathered ahead, 0..64 */
  size_t prefetch_bytes;        /* stage 3 cap on prefetched bytes in flight; 0 = none */
  size_t max_live_bytes;        /* stage 3 cap on gathered bytes at once; 0 = depth + 1 units */
  size_t persistence_threshold; /* stage 3: parameters of fewer elements stay gathered */
  size_t alignment;             /* elements, 1..2^20; shard slices start on multiples of it */
  zrt_mem_kind_t mem_kind;      /* where the buffers live: ZRT_MEM_HOST or ZRT_MEM_CUDA */
  int no_sync_accumulation;     /* stages 2/3, 1: keep full local gradients so that micro-batches
                                   may skip the reduction (zrt_partition_set_sync(pm, 0)) */
  int step_backup;              /* what a step whose optimizer fails can undo, a
                                   zrt_step_backup_t (see zrt_partition_step) */
  int prefetch_next_step;       /* stage 3, 1: zrt_partition_step ends by gathering the first
                                   units of the next forward; 0 or 1 */
  int offload_optimizer;        /* stages 1-3, 1: master, optimizer state and the step backup
                                   live in host memory (pinned for ZRT_MEM_CUDA) and the step
                                   runs the optimizer per segment as its reduction ends (see
                                   zrt_partition_step); 0 or 1 */
  int grad_accumulate;          /* 1: zrt_partition_grad_data hands out zeroed windows that the
                                   framework accumulates into (+=); 0: it overwrites them */
  int shard_group_size;         /* stages 1-3, hybrid sharding (HSDP, MiCS): G ranks, dividing
                                   the world's N, shard among themselves (ranks [kG, kG+G)), the
                                   N/G groups hold replicas; 0 or N = flat;
                                   ZRT_SHARD_GROUP_HOST = the ranks of one host when every host
                                   has the same count dividing N, else flat. Stage 0: 0 only.
                                   With G < N, zrt_partition_finalize splits comm (collective),
                                   gradients are reduce-scattered in the group and their shard
                                   all-reduced across groups when the step (or grad_norm) waits
                                   for them; memory is the stage's with N -> G; mem_kind
                                   ZRT_MEM_HOST, no offload_optimizer, no checkpoints */
  int64_t hpz_group_size;       /* stage 3, hpZ (ZeRO++): the shard stays flat over the N ranks;
                                   each rank also keeps a secondary copy of every unit sharded
                                   among its H ranks ([kH, kH+H), H dividing N), taken from the
                                   step's first gather of the unit (over all N); every later
                                   gather until the next step or load runs inside the H ranks.
                                   Bit-equal to flat stage 3; costs param_secondary bytes.
                                   0 = off; ZRT_SHARD_GROUP_HOST = one host's ranks when the
                                   world spans hosts of equal counts, else off. Finalize splits
                                   comm (collective). ZRT_MEM_HOST; shard_group_size flat.
                                   Structs of 120 bytes (older) read it as 0 */
  int grad_windows;             /* gradient staging windows, each of the largest unit: 2 lets the
                                   framework write a unit's gradients while the last unit's
                                   are still read by their reduction, 1 makes grad_data wait for
                                   it and saves a window; 0 = 2 on host memory where the
                                   reductions read the windows after grad_ready, else 1 */
} zrt_partition_config_t;

/* The defaults; docs/API.md says why each is what it is. */
#define ZRT_PARTITION_CONFIG_INIT                                          \
  {                                                                        \
    sizeof(zrt_partition_config_t), /* size */                             \
        ZRT_CONFIG_MAGIC,           /* magic */                            \
        ZRT_VERSION_CODE,           /* version */                          \
        2,                          /* stage */                            \
        ZRT_F32,                    /* param_dtype */                      \
        ZRT_F32,                    /* reduce_dtype */                     \
        ZRT_F32,                    /* master_dtype */                     \
        2,                          /* optimizer_slots: Adam's two */      \
        (size_t)25 << 20,           /* bucket_bytes: 25 MiB */             \
        1,                          /* prefetch_depth */                   \
        0,                          /* prefetch_bytes: no cap */           \
        0,                          /* max_live_bytes: depth + 1 units */  \
        100000,                     /* persistence_threshold (elements) */ \
        128,                        /* alignment (elements) */             \
        ZRT_MEM_HOST,               /* mem_kind */                         \
        0,                          /* no_sync_accumulation */             \
        ZRT_STEP_BACKUP_SEGMENT,    /* step_backup */                      \
        0,                          /* prefetch_next_step */               \
        0,                          /* offload_optimizer */                \
        0,                          /* grad_accumulate */                  \
        0,                          /* shard_group_size: flat */           \
        0,                          /* hpz_group_size: off */              \
        0                           /* grad_windows: by the memory */      \
  }

/* Writes the defaults of ZRT_PARTITION_CONFIG_INIT into the first `size` bytes of *config,
 * `size` being sizeof(zrt_partition_config_t) as the caller compiled it (for bindings that
 * cannot use the macro). Local; thread-safe. Errors: ZRT_INVALID_ARGUMENT (size below the
 * header). */
ZRT_API zrt_status_t zrt_partition_config_init(zrt_partition_config_t* config, size_t size);

/* Applies the keys of the JSON object in file `path` over *config, which must hold a valid
 * config (absent keys keep their value): the field names above, dtypes and mem_kind as strings
 * ("bf16", "host"). Writes only the fields config->size covers. Local. Errors:
 * ZRT_INVALID_ARGUMENT (bad config, unknown key, wrong type, value out of range: the key is
 * named), ZRT_SYSTEM_ERROR (file unreadable). */
ZRT_API zrt_status_t zrt_partition_config_load(const char* path, zrt_partition_config_t* config);

/* Creates a partition manager on comm, which must outlive it. config (NULL = defaults) is
 * copied. Local, except that mem_kind ZRT_MEM_CUDA initialises comm's NCCL side (collective).
 * Errors: ZRT_INVALID_ARGUMENT (bad config: the field is named), ZRT_UNSUPPORTED (mem_kind not
 * available in this build or on this machine: the reason is given). */
ZRT_API zrt_status_t zrt_partition_create(zrt_comm_t comm, const zrt_partition_config_t* config,
                                          zrt_partition_t* pm);

/* Waits for pending communication (after a failure, until zrt no longer touches the buffers),
 * then frees every buffer; every pointer handed out becomes invalid. NULL is accepted. Returns
 * the first error of the pending work. */
ZRT_API zrt_status_t zrt_partition_destroy(zrt_partition_t pm);

/* Registration, before zrt_partition_finalize and identical on every rank. Units are added in
 * forward order and numbered from 0, parameters numbered from 0 in the order added; name is
 * copied (NULL = ""). A parameter added with zrt_partition_add_param has shape [numel] and
 * the config's param_dtype. A parameter, and all of them together, hold at most 2^50 elements.
 * Local. Errors: ZRT_INVALID_ARGUMENT (unknown unit, numel 0 or over the limit, unknown flags),
 * ZRT_INVALID_USAGE (after finalize). */
ZRT_API zrt_status_t zrt_partition_add_unit(zrt_partition_t pm, const char* name, int* unit);
ZRT_API zrt_status_t zrt_partition_add_param(zrt_partition_t pm, int unit, const char* name,
                                             size_t numel, uint32_t flags, int* param);

/* zrt_partition_add_param with a shape: ndim (0..ZRT_MAX_DIMS) dimensions dims[0..ndim) (dims
 * may be NULL when ndim is 0, a scalar), numel their product; dtype is the framework's dtype of
 * the tensor (ZRT_F32, ZRT_F16 or ZRT_BF16; zrt stores it in param_dtype). The shape and dtype
 * are returned by zrt_partition_param_info, compared across ranks at finalize, and carried by
 * checkpoints and zrt_partition_export_full. Errors: ZRT_INVALID_ARGUMENT (as add_param; ndim
 * out of range, a dimension < 1, a product that overflows size_t, ZRT_F64 (convert the tensor
 * to float32 first) or another dtype: the parameter is named). */
ZRT_API zrt_status_t zrt_partition_add_param_shaped(zrt_partition_t pm, int unit, const char* name,
                                                    int ndim, const int64_t* dims,
                                                    zrt_dtype_t dtype, uint32_t flags, int* param);

/* Lays out the shards, allocates every long-lived buffer, and checks that every rank registered
 * the same model with the same configuration; with hybrid sharding first forms the shard group
 * and replica communicators, with hpZ the secondary copy's group communicator. Parameters start at
 * zero (zrt_partition_load_param sets them). Collective. Errors: ZRT_INVALID_ARGUMENT (the padded
 * model over 2^50 elements, or more than 2^22 buckets: raise bucket_bytes; shard_group_size not
 * dividing N, or with offload_optimizer; hpz_group_size not dividing N, or with hybrid sharding),
 * ZRT_UNSUPPORTED (hybrid sharding or hpZ with ZRT_MEM_CUDA), ZRT_INVALID_USAGE (called twice, no
 * parameter, ranks disagree: the differing ranks are named), ZRT_OUT_OF_MEMORY. */
ZRT_API zrt_status_t zrt_partition_finalize(zrt_partition_t pm);

/* Sets a parameter's value from `values`: the full parameter, numel elements of dtype (f32, f16
 * or bf16), identical on every rank; device memory when mem_kind is ZRT_MEM_CUDA. Not kept.
 * Local; call it on every rank, after finalize and before the first fetch of a step. Errors:
 * ZRT_INVALID_ARGUMENT (unknown param, NULL values, dtype), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_load_param(zrt_partition_t pm, int param, const void* values,
                                              zrt_dtype_t dtype);

/* Replaces the optimizer state with `optimizer_slots` f32 arrays of shard size, all zero (and
 * their step backups), for a framework that builds its optimizer after sharding the model and
 * learns only then how many state tensors per element it keeps. The new arrays are allocated
 * before the old ones are freed; nothing else moves (master, parameters, gradients stay as they
 * are), and zrt_partition_memory reports the new figures. Collective, before the first step
 * (a loaded checkpoint's steps count) and not while zrt_partition_step_in_backward is armed.
 * Every rank changes or none does. Errors: ZRT_INVALID_ARGUMENT (optimizer_slots outside 0..16),
 * ZRT_INVALID_USAGE (not finalized, a step was taken, armed, ranks passing different counts:
 * each rank's is named), ZRT_OUT_OF_MEMORY (on any rank: the old arrays stay), ZRT_REMOTE_ERROR
 * (another rank failed). */
ZRT_API zrt_status_t zrt_partition_set_optimizer_slots(zrt_partition_t pm, int optimizer_slots);

typedef struct zrt_param_info {
  size_t size; /* sizeof(zrt_param_info_t) as the caller compiled it; set before the call */
  int unit;
  size_t numel;
  uint32_t flags; /* as registered */
  int resident;   /* 1: full data always available (stages 0-2, frozen, persistent) */
  int first_segment, last_segment; /* segments holding it (-1 when frozen) */
  size_t segment_offset;           /* element offset of its first element in first_segment */
  size_t view_offset;         /* element offset in its gathered buffer (the full buffer, a window
                                 slot, the persistent or the frozen store) */
  zrt_dtype_t dtype;          /* as registered (add_param: the config's param_dtype) */
  int ndim;                   /* as registered (add_param: 1) */
  int64_t dims[ZRT_MAX_DIMS]; /* dims[0..ndim) as registered, the rest 0 */
} zrt_param_info_t;

/* Where a parameter lives. Local. Errors: ZRT_INVALID_ARGUMENT (unknown param, info->size),
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_param_info(zrt_partition_t pm, int param,
                                              zrt_param_info_t* info);

/* Elements [param_offset, param_offset + count) of `param` are at elements [shard_offset,
 * shard_offset + count) of the local shard. Fixed layout (handed out in arrays). */
typedef struct zrt_shard_piece {
  int param;
  size_t param_offset;
  size_t shard_offset;
  size_t count;
} zrt_shard_piece_t;

/* The local shard's pieces in shard order (padding is not listed): *count pieces at *pieces,
 * owned by pm and valid until it is destroyed. Local. Errors: ZRT_INVALID_USAGE (not
 * finalized). */
ZRT_API zrt_status_t zrt_partition_shard_pieces(zrt_partition_t pm,
                                                const zrt_shard_piece_t** pieces, size_t* count);

/* Makes unit's parameters available and blocks until they are: stage 3 all-gathers the unit
 * unless it is gathered or in flight, and starts prefetching the next units; stages 0-2 wait
 * for the unit's post-step all-gather. A unit may be fetched again after its release. Errors:
 * ZRT_INVALID_ARGUMENT (unknown unit), ZRT_INVALID_USAGE (not finalized, unit already fetched,
 * gather window full of fetched units), and a failure of the last step's publishing. */
ZRT_API zrt_status_t zrt_partition_fetch(zrt_partition_t pm, int unit);

/* The framework is done with unit's parameters (stage 3 frees its window slot and unmaps the
 * unit's address: see zrt_partition_param_data). Local. Errors: ZRT_INVALID_ARGUMENT (unknown
 * unit), ZRT_INVALID_USAGE (unit not fetched). */
ZRT_API zrt_status_t zrt_partition_release(zrt_partition_t pm, int unit);

/* A parameter's full data: numel elements of param_dtype, read-only for the framework. The
 * pointer is fixed for the manager's life at every stage, so views of it may be kept across
 * release and fetch (autograd's saved tensors). Its values are valid while its unit is fetched
 * (always, for resident parameters); in stages 1/2 a step rewrites them in the background:
 * read them after a fetch of the unit or zrt_partition_wait_params. Stage 3 sharded
 * parameters: the address is reserved at finalize and backed by memory only while the unit is
 * fetched, so a read of a released unit never shows another unit's values: it faults (host
 * memory: SIGSEGV; ZRT_MEM_CUDA: the kernel fails with an illegal address). Local. Errors:
 * ZRT_INVALID_ARGUMENT (unknown param), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_param_data(zrt_partition_t pm, int param, void** data);

/* Blocks until the parameters the last step (or load) publishes have landed: afterwards every
 * resident parameter's data (param_data) holds the updated values until the next step, at any
 * stage, without fetching. Stage 3 waits for the persistent parameters; units gathered on
 * fetch are not affected. Local. Errors: ZRT_INVALID_USAGE (not finalized), and a failure of
 * the last step's publishing. */
ZRT_API zrt_status_t zrt_partition_wait_params(zrt_partition_t pm);

/* Where the framework writes a trainable parameter's gradient for this micro-batch: numel
 * elements of param_dtype. grad_accumulate 0: overwritten, not accumulated (zrt accumulates
 * across micro-batches); its content on entry is undefined. grad_accumulate 1: zeroed, and the
 * framework adds into it (several writes, in any order, until grad_ready). Valid from this call
 * until zrt_partition_grad_ready of its unit; take it again for every unit and micro-batch. One
 * unit's gradients are open at a time. May wait until zrt has read the window it hands out.
 * Errors: ZRT_INVALID_ARGUMENT (unknown or frozen param), ZRT_INVALID_USAGE (another unit's
 * gradients are open; its unit was already signalled with grad_ready in this micro-batch; its
 * unit is out of backward order as for zrt_partition_grad_ready). */
ZRT_API zrt_status_t zrt_partition_grad_data(zrt_partition_t pm, int param, void** grad);

/* Whether the coming micro-batch reduces its gradients (1, the default) or only accumulates
 * them locally (0: stages 0/1, or 2/3 with no_sync_accumulation). Between micro-batches. Local.
 * Errors: ZRT_INVALID_USAGE (in the middle of a backward, or no-sync unavailable, or 0 while
 * the step is armed by zrt_partition_step_in_backward). */
ZRT_API zrt_status_t zrt_partition_set_sync(zrt_partition_t pm, int sync);

/* The unit's gradients are written: zrt accumulates them and starts the reduction of every
 * bucket this completes. May wait for a bucket to come free; returns once the work is enqueued,
 * while zrt may still read the unit's gradient window: do not write those pointers again.
 * Parameters of the unit without a grad_data call contribute zeros. Errors:
 * ZRT_INVALID_ARGUMENT (unknown unit), ZRT_INVALID_USAGE (signalled twice in one micro-batch;
 * out of backward order where the buckets could then not complete the micro-batch: refused
 * before anything changed, naming the unit to signal next). */
ZRT_API zrt_status_t zrt_partition_grad_ready(zrt_partition_t pm, int unit);

/* The global L2 norm of the reduced gradients (sum of squares in f64) and whether any element
 * is inf or NaN, after waiting for all reductions. Either output may be NULL (not both).
 * Collective (one all-reduce). Errors: ZRT_INVALID_ARGUMENT (both NULL), ZRT_INVALID_USAGE
 * (gradients incomplete; the step armed by zrt_partition_step_in_backward). */
ZRT_API zrt_status_t zrt_partition_grad_norm(zrt_partition_t pm, double* norm, int* has_nonfinite);

/* Shard elements [shard_offset, shard_offset + count) are published from `count` param_dtype
 * elements at data. Fixed layout (handed out in arrays). */
typedef struct zrt_param_span {
  size_t shard_offset;
  size_t count;
  void* data;
} zrt_param_span_t;

/* What the optimizer callback receives: the local shard, `count` f32 elements in each array.
 * The optimizer updates master and state[0..num_state) in place; grad is read-only; padding
 * has zero gradient. pieces map the shard to parameters. zrt sets size to its sizeof: a
 * callback reads fields beyond what it knows only if size covers them. Valid during the call.
 * After the callback zrt converts master into the parameters (param_dtype, round to nearest
 * even) at param_spans, unless the callback wrote exactly that conversion of its updated master
 * into every span and set *params_written = 1 (the fused optimizers below do). */
typedef struct zrt_optimizer_args {
  size_t size; /* sizeof(zrt_optimizer_args_t) as zrt compiled it */
  float* master;
  const float* grad;
  float* const* state;
  int num_state;
  size_t count;
  const zrt_shard_piece_t* pieces;
  size_t num_pieces;
  int64_t step;                        /* 1 on the first step */
  zrt_mem_kind_t mem_kind;             /* where every array lives */
  zrt_dtype_t param_dtype;             /* the parameters' dtype */
  const zrt_param_span_t* param_spans; /* in shard order, covering [0, count) */
  size_t num_param_spans;
  int* params_written; /* 0 on entry; NULL when the spans may not be written */
} zrt_optimizer_args_t;

/* Returns ZRT_SUCCESS, or an error that zrt_partition_step passes on: preferably
 * zrt_callback_error("why"), whose message every rank then sees. With ZRT_MEM_CUDA the
 * pointers are device pointers, and the callback's kernels must be ordered before its return
 * (see docs/API.md). With step_backup = ZRT_STEP_BACKUP_SEGMENT (the default) or
 * offload_optimizer = 1 it is called once per segment, on the training thread, with that
 * segment's slice: the arrays and count are the slice's, pieces those within it (shard_offset
 * from the slice's start), step the same in every call of the step, segments in shard order.
 * param_spans is then one span, the slice's parameters (with offload: only where they are host
 * memory and step_backup can undo them, else NULL and params_written NULL; offloaded arrays are
 * host memory whatever mem_kind). The update must be element-wise or per piece; a norm over
 * the whole shard comes from zrt_partition_grad_norm before the step. */
typedef zrt_status_t (*zrt_optimizer_fn)(const zrt_optimizer_args_t* args, void* user_data);

/* Waits for all reductions, calls `optimizer` on the local shard (user_data passed through),
 * then starts publishing the updated parameters and returns without waiting for them; the
 * gradients are then clear for the next step. Success commits the step. Collective.
 * A failure before any optimizer ran (usage, a reduction, a peer) leaves master, optimizer
 * state, parameters, gradients and step count as they were on every rank, and every rank
 * returns an error. A callback failing on some rank is reported on every rank (the lowest
 * failing rank's status, naming all of them), none publishes, and what it leaves depends on
 * step_backup:
 *   ZRT_STEP_BACKUP_FULL: every rank restores master and state: nothing happened.
 *   ZRT_STEP_BACKUP_SEGMENT: the failing segment is restored; on each rank the segments before
 *     it hold the update and those after it do not (the message names the segment). The step
 *     is interrupted: calling zrt_partition_step again with the same optimizer resumes each
 *     rank at its restored segment (the gradients are kept), and gives the same bits as an
 *     uninterrupted step; zrt_partition_load discards it instead. Until then fetch,
 *     grad_data, set_sync, load_param and save fail with ZRT_INVALID_USAGE.
 *   ZRT_STEP_BACKUP_NONE: master and state are as the callbacks left them; reload a checkpoint.
 * Errors: ZRT_INVALID_ARGUMENT (NULL optimizer), ZRT_INVALID_USAGE (some unit's gradients
 * missing, no synchronised micro-batch, units still fetched), the optimizer's status
 * (ZRT_CALLBACK_ERROR with the message of zrt_callback_error, or naming a value outside
 * zrt_status_t, on every rank), ZRT_REMOTE_ERROR (naming the ranks that failed); after
 * zrt_partition_step_in_backward, ZRT_INVALID_ARGUMENT also for another optimizer or user_data
 * than it was given. With offload_optimizer = 1 each segment's optimizer runs as its reduction
 * finishes, before all reductions are known to have succeeded, so the backup is the full copy
 * (ZRT_STEP_BACKUP_SEGMENT included): any failure on any rank restores every rank.
 * docs/API.md details the transaction. */
ZRT_API zrt_status_t zrt_partition_step(zrt_partition_t pm, zrt_optimizer_fn optimizer,
                                        void* user_data);

/* With offload_optimizer = 1: registers the coming step's optimizer before its backward, so
 * that each segment's callback runs during the backward of the next micro-batch (which must
 * be the step's last and synchronised) on a thread of zrt's, as soon as that segment's
 * reduction is done, while the framework computes the rest; zrt_partition_step (with the same
 * optimizer and user_data, which must stay valid until it returns) then only waits for the
 * remaining segments, votes and publishes, with the same all-or-nothing guarantee (a failure
 * on any rank restores every rank from the backup). Called on another thread, the callback
 * must not use state the framework's training thread changes meanwhile; its arguments are as
 * with offload_optimizer. Between arming and the step: no grad_norm (clip without arming),
 * no set_sync(0), load_param or checkpoint, no fetch of a unit after its grad_ready, and no
 * micro-batch after the armed one. Local.
 * Errors: ZRT_INVALID_ARGUMENT (NULL optimizer), ZRT_INVALID_USAGE (offload_optimizer or
 * step_backup is 0 (NONE), already armed, in the middle of a backward, set_sync(0) pending),
 * ZRT_UNSUPPORTED (mem_kind ZRT_MEM_CUDA: zrt_partition_step alone overlaps there),
 * ZRT_SYSTEM_ERROR (zrt's thread could not start). */
ZRT_API zrt_status_t zrt_partition_step_in_backward(zrt_partition_t pm, zrt_optimizer_fn optimizer,
                                                    void* user_data);

/* Bytes this rank holds, per category (docs/API.md gives the ZeRO formula behind
 * theoretical_model_state). */
typedef struct zrt_partition_memory {
  size_t size;              /* sizeof(zrt_partition_memory_t) as the caller compiled it */
  uint64_t full_params;     /* gathered-for-good parameters (stages 0-2; stage 3 persistent) */
  uint64_t param_shard;     /* stage 3 parameter shard */
  uint64_t gradients;       /* full local gradients (stages 0/1; 2/3 with no-sync) */
  uint64_t grad_shard;      /* reduced gradient shard (stages 2/3) */
  uint64_t master;          /* f32 master shard */
  uint64_t optimizer_state; /* optimizer_slots f32 arrays of shard size */
  uint64_t buckets;         /* reduction buckets (constant size) */
  uint64_t gather_window;   /* stage 3 gather window slots (constant size) */
  uint64_t grad_staging;    /* the gradient window(s), and the f32 gradient handed to the
                               optimizer when it is needed (one segment's slice with the
                               segment backup, the whole shard otherwise) */
  uint64_t model_state;     /* full_params + param_shard + gradients + grad_shard + master +
                               optimizer_state + param_secondary */
  uint64_t total;           /* every category, step_backup included */
  double theoretical_model_state; /* the ZeRO formula for this configuration, unpadded */
  uint64_t parameters;            /* trainable elements (P), without padding */
  uint64_t padded_parameters;     /* trainable elements with segment padding */
  uint64_t step_backup;           /* the copy of master + optimizer state: one segment's slice
                                     (SEGMENT) or all of it (FULL); not model state, included
                                     in total */
  /* Where the bytes above live. Device: the parameters' memory (mem_kind); host: the offload
   * memory of offload_optimizer = 1 (master, optimizer state, step backup and the f32 gradient
   * copy the optimizer reads), all zero without offload. device + host = the totals above. */
  uint64_t device_model_state;           /* model_state - host_model_state */
  uint64_t device_total;                 /* total - host_total */
  uint64_t host_model_state;             /* master + optimizer_state when offloaded */
  uint64_t host_total;                   /* every byte in host offload memory */
  double theoretical_device_model_state; /* the formula's share of each side, unpadded */
  double theoretical_host_model_state;
  uint64_t param_secondary; /* stage 3 hpZ (hpz_group_size = H): the secondary copy, 1/H of
                               the padded parameters outside the persistent segment, in
                               param dtype; in model_state and total */
} zrt_partition_memory_t;

/* Measures the manager's buffers. Local. Errors: ZRT_INVALID_ARGUMENT (memory->size),
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_memory(zrt_partition_t pm, zrt_partition_memory_t* memory);

/* The manager's collective traffic, split by where it runs (hybrid sharding,
 * zrt_partition_config_t.shard_group_size): payload bytes this rank sent, as zrt_comm_stats
 * counts them. With G < N the manager's collectives run on communicators of its own, so the
 * two figures are exactly its traffic. With G = N (flat) intra is comm's own user counter,
 * which counts the caller's collectives on comm too, and inter is 0. With hpZ
 * (hpz_group_size = H; shard_group_size then reads H, replica_groups N/H) intra is the
 * secondary copy's gathers and inter comm's user counter (the first gathers, the
 * reduce-scatters and the caller's own collectives on comm). The expected figures per step:
 * docs/API.md, "Traffic figures". */
typedef struct zrt_partition_traffic {
  size_t size;                /* sizeof(zrt_partition_traffic_t) as the caller compiled it */
  int shard_group_size;       /* G as resolved */
  int replica_groups;         /* R = N / G */
  uint64_t intra_group_bytes; /* collectives inside the group: parameter gathers and gradient
                                 reduce-scatters (hpZ: the secondary copy's gathers) */
  uint64_t inter_group_bytes; /* collectives across the groups: the gradient shard's all-reduces
                                 (hpZ: everything over all N ranks) */
} zrt_partition_traffic_t;

/* Reads the traffic counters since creation. Local; thread-safe with the manager's other calls
 * only in the sense that in-flight collectives count once they complete. Errors:
 * ZRT_INVALID_ARGUMENT (traffic->size), ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_traffic(zrt_partition_t pm, zrt_partition_traffic_t* traffic);

/* Counters of the stage 3 gather window since finalize (in stages 0-2 all zero but fetches). */
typedef struct zrt_partition_stats {
  size_t size;                 /* sizeof(zrt_partition_stats_t) as the caller compiled it */
  uint64_t fetches;            /* zrt_partition_fetch calls */
  uint64_t gathers;            /* all-gathers issued on demand */
  uint64_t prefetches;         /* all-gathers issued ahead */
  uint64_t prefetch_hits;      /* fetches that found their unit gathered or in flight */
  uint64_t evictions;          /* prefetched units dropped unused (the fetch order changed) */
  int max_gathered_units;      /* peak of non-persistent units in the window at once */
  uint64_t max_gathered_bytes; /* peak of their bytes */
  int order_recorded;          /* 1 once the first step's fetch order is used for prefetching */
  int order_invalidated;       /* 1 if a later fetch departed from it (declared order since) */
} zrt_partition_stats_t;

/* Reads the window counters. Local. Errors: ZRT_INVALID_ARGUMENT (stats->size),
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_stats(zrt_partition_t pm, zrt_partition_stats_t* stats);

/* ---------------------------------------------------------------------------------------------
 * Fused optimizers (host memory)
 *
 * Ready-made zrt_optimizer_fn: pass one to zrt_partition_step with a zrt_optimizer_config_t* as
 * user_data. They update master and state and, where args has param_spans and params_written,
 * write the param_dtype copy into the spans too and set *params_written = 1. The f32
 * arithmetic is torch.optim 1.13's single-tensor formula in its order of operations (docs/API.md
 * lists it), so results agree with torch's CPU optimizers within 1 ulp; every SIMD variant and
 * thread count gives the same bits. Per step, in this order, the gradient is multiplied by
 * 1/grad_scale, then by clip_factor. The framework may change the config between steps (a
 * learning-rate schedule, the clip factor from zrt_partition_grad_norm), never during one.
 * ------------------------------------------------------------------------------------------- */

typedef enum zrt_optimizer_kind ZRT_ENUM_TYPE {
  ZRT_OPTIMIZER_ADAMW = 0, /* decoupled weight decay; state: exp_avg, exp_avg_sq */
  ZRT_OPTIMIZER_ADAM = 1,  /* L2 weight decay added to the gradient; state as AdamW */
  ZRT_OPTIMIZER_SGD = 2,   /* momentum, dampening, Nesterov; state: momentum buffer if momentum */
  ZRT_OPTIMIZER_LION = 3,  /* sign update, decoupled weight decay; state: exp_avg */
  ZRT_OPTIMIZER_KIND_COUNT = 4
} zrt_optimizer_kind_t;

/* Threads that a fused optimizer splits the shard across (the calling thread is one of them). */
typedef struct zrt_optimizer_pool* zrt_optimizer_pool_t;

typedef struct zrt_optimizer_config {
  size_t size;               /* sizeof(zrt_optimizer_config_t) as the caller compiled it */
  uint32_t magic;            /* ZRT_CONFIG_MAGIC */
  uint32_t version;          /* ZRT_VERSION_CODE as the caller compiled it */
  zrt_optimizer_kind_t kind; /* the function it is passed to must match */
  double lr;                 /* >= 0 */
  double beta1;              /* Adam, AdamW, Lion: [0, 1) */
  double beta2;              /* Adam, AdamW, Lion: [0, 1) */
  double eps;                /* Adam, AdamW: >= 0 */
  double weight_decay;       /* >= 0; applied to the parameters decay_mask selects */
  double momentum;           /* SGD: >= 0 (0: plain SGD, no state) */
  double dampening;          /* SGD */
  int nesterov;              /* SGD: 0 or 1 (needs momentum > 0 and dampening 0) */
  int bias_correction;       /* Adam, AdamW: 1 divides by 1 - beta^step (torch), 0 does not */
  double grad_scale;         /* the loss scale: gradients are multiplied by 1/grad_scale; > 0 */
  double clip_factor;        /* then by this, e.g. min(1, max_norm / (norm + 1e-6)); >= 0 */
  /* Per parameter (index of zrt_partition_add_param): nonzero = weight decay applies. NULL:
   * every parameter decays. Parameters with index >= decay_mask_count are refused. */
  const uint8_t* decay_mask;
  size_t decay_mask_count;
  zrt_optimizer_pool_t pool; /* NULL: on the calling thread only */
} zrt_optimizer_config_t;

/* torch.optim's defaults for `kind` (a constant): lr 1e-3 (Lion 1e-4), betas (0.9, 0.999)
 * (Lion (0.9, 0.99)), eps 1e-8, weight_decay 1e-2 for AdamW and 0 otherwise, momentum 0,
 * dampening 0, bias correction on, no scaling or clipping, every parameter decays. */
#define ZRT_OPTIMIZER_CONFIG_INIT(kind)                                         \
  {                                                                             \
    sizeof(zrt_optimizer_config_t), ZRT_CONFIG_MAGIC, ZRT_VERSION_CODE, (kind), \
        (kind) == ZRT_OPTIMIZER_LION ? 1e-4 : 1e-3,  /* lr */                   \
        0.9,                                         /* beta1 */                \
        (kind) == ZRT_OPTIMIZER_LION ? 0.99 : 0.999, /* beta2 */                \
        1e-8,                                        /* eps */                  \
        (kind) == ZRT_OPTIMIZER_ADAMW ? 1e-2 : 0.0,  /* weight_decay */         \
        0.0, 0.0, 0, 1, 1.0, 1.0, NULL, 0, NULL      /* momentum .. pool */     \
  }

/* Writes ZRT_OPTIMIZER_CONFIG_INIT(kind) into the first `size` bytes of *config (size: sizeof
 * as the caller compiled it). Local; thread-safe. Errors: ZRT_INVALID_ARGUMENT (size below the
 * header, unknown kind). */
ZRT_API zrt_status_t zrt_optimizer_config_init(zrt_optimizer_config_t* config, size_t size,
                                               zrt_optimizer_kind_t kind);

/* Creates a pool of `threads` threads (0: one per CPU in the calling thread's affinity mask,
 * which zrt-run --bind narrows). The SIMD variant is chosen here, as for the reduction kernels
 * (ZRT_SIMD). A pool serves one optimizer call at a time. Local. Errors: ZRT_INVALID_ARGUMENT
 * (threads outside 0..1024, a ZRT_SIMD this CPU cannot run), ZRT_SYSTEM_ERROR (no thread). */
ZRT_API zrt_status_t zrt_optimizer_pool_create(int threads, zrt_optimizer_pool_t* pool);
/* The pool's thread count, the calling thread included. Local. */
ZRT_API zrt_status_t zrt_optimizer_pool_threads(zrt_optimizer_pool_t pool, int* threads);
/* Stops and joins the threads. NULL is accepted. Not during an optimizer call on it. */
ZRT_API zrt_status_t zrt_optimizer_pool_destroy(zrt_optimizer_pool_t pool);

/* The fused optimizers; `config` is a zrt_optimizer_config_t* of the matching kind. They need
 * num_state >= 2 (Adam, AdamW), 1 (Lion; SGD with momentum), 0 (plain SGD); SGD's momentum
 * buffer starts as the gradient at step 1. A call that fails writes nothing. Errors:
 * ZRT_INVALID_ARGUMENT (config NULL, of another kind or size, a field out of range, too few
 * state slots, a piece outside the shard or beyond decay_mask_count: all named),
 * ZRT_INVALID_USAGE (the pool is busy), ZRT_UNSUPPORTED (mem_kind is not ZRT_MEM_HOST). */
ZRT_API zrt_status_t zrt_optimizer_adamw(const zrt_optimizer_args_t* args, void* config);
ZRT_API zrt_status_t zrt_optimizer_adam(const zrt_optimizer_args_t* args, void* config);
ZRT_API zrt_status_t zrt_optimizer_sgd(const zrt_optimizer_args_t* args, void* config);
ZRT_API zrt_status_t zrt_optimizer_lion(const zrt_optimizer_args_t* args, void* config);

/* ---------------------------------------------------------------------------------------------
 * CUDA (device memory through NCCL)
 *
 * Builds with CUDA and NCCL serve ZRT_MEM_CUDA: collectives on a CUDA stream are NCCL calls on
 * it, with the conventions above, on device memory of the communicator's device. Other builds
 * and machines without a usable GPU answer ZRT_UNSUPPORTED with the reason. A communicator's
 * first CUDA stream or event initialises its NCCL side, which is collective (ordered with the
 * default stream's collectives). docs/API.md says which device is used, how ordering stays on
 * the device and how failures surface.
 * ------------------------------------------------------------------------------------------- */

/* The number of usable CUDA devices (> 0). Needs no communicator; thread-safe. Errors:
 * ZRT_UNSUPPORTED (built without CUDA/NCCL, or no usable device: the CUDA runtime's reason). */
ZRT_API zrt_status_t zrt_cuda_device_count(int* count);

/* NCCL's version code (e.g. 22809 for 2.28.9). Needs no device; thread-safe. Errors:
 * ZRT_UNSUPPORTED (built without NCCL). */
ZRT_API zrt_status_t zrt_nccl_version(int* version);

/* Wraps the framework's CUDA stream (a cudaStream_t as void*; 0 = the legacy default stream)
 * as a zrt stream of kind ZRT_MEM_CUDA. zrt never destroys the CUDA stream, which must outlive
 * the zrt stream. Same ordering rule and first-use initialisation as zrt_stream_create. Errors:
 * ZRT_UNSUPPORTED, ZRT_REMOTE_ERROR (another rank could not initialise CUDA: it is named). */
ZRT_API zrt_status_t zrt_stream_from_cuda(zrt_comm_t comm, void* cuda_stream, zrt_stream_t* stream);

/* The cudaStream_t behind a CUDA zrt stream. Local. Errors: ZRT_INVALID_ARGUMENT (a host
 * stream). */
ZRT_API zrt_status_t zrt_stream_get_cuda(zrt_stream_t stream, void** cuda_stream);

/* Creates an event over a cudaEvent_t on the communicator's device, recordable on CUDA and host
 * streams; zrt_event_destroy frees it. Initialises the NCCL side if needed. Errors:
 * ZRT_UNSUPPORTED. */
ZRT_API zrt_status_t zrt_event_create_cuda(zrt_comm_t comm, zrt_event_t* event);

/* ---------------------------------------------------------------------------------------------
 * Checkpoints of partition managers (sharded, atomic, loadable at another N)
 *
 * A checkpoint is a folder of per-rank shard files and a manifest, loadable at any rank count,
 * stage and bucket size; a crash at any point leaves the previous checkpoint loadable (format
 * and guarantees: docs/API.md). Save, load and export are collective, made between steps
 * (after finalize or a step; no unit fetched, no gradients pending: else ZRT_INVALID_USAGE), and
 * every rank returns the same status and message.
 * ------------------------------------------------------------------------------------------- */

/* Saves the manager's state into folder `dir` (created if needed), replacing a checkpoint there
 * atomically; each rank writes its own shard. The first save takes the folder for this process
 * (a lock file, kept until exit): another job's save there is refused. Errors: ZRT_SYSTEM_ERROR
 * (a file could not be written: file and errno are named), ZRT_INVALID_USAGE (the folder belongs
 * to another live job: its host, pid and job are named). On error the folder holds the previous
 * checkpoint. */
ZRT_API zrt_status_t zrt_partition_save(zrt_partition_t pm, const char* dir);

/* Loads the checkpoint in `dir`, saved by a manager with the same parameters (names, sizes,
 * frozen flags, in order) and optimizer_slots, at any N, stage and bucket size. On success the
 * manager continues from the saved step (parameters republished); on any error no rank's state
 * changed. Errors: ZRT_INVALID_ARGUMENT (no manifest; a missing, truncated or corrupted file, the
 * manifest included; a shard that is not what the manifest says; a FIFO or device instead of a
 * file; a manifest for another model or of an unknown format: file and parameter are named),
 * ZRT_SYSTEM_ERROR. */
ZRT_API zrt_status_t zrt_partition_load(zrt_partition_t pm, const char* dir);

/* Writes the full parameters into one safetensors file at `path` for inference, in dtype
 * ZRT_F32, ZRT_F16 or ZRT_BF16 (converted from the f32 master). No rank ever holds the whole
 * model; rank 0 writes the file atomically. Errors: ZRT_INVALID_ARGUMENT (dtype),
 * ZRT_SYSTEM_ERROR (the file is named). */
ZRT_API zrt_status_t zrt_partition_export_full(zrt_partition_t pm, const char* path,
                                               zrt_dtype_t dtype);

/* The number of optimizer steps taken, or loaded from a checkpoint. Local. Errors:
 * ZRT_INVALID_USAGE (not finalized). */
ZRT_API zrt_status_t zrt_partition_get_step(zrt_partition_t pm, int64_t* step);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZRT_ZRT_H_ */
