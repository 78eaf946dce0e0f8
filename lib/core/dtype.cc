#include "lib/core/dtype.h"

#include <strings.h>

namespace zrt {

size_t dtype_size(zrt_dtype_t dtype) {
  switch (dtype) {
    case ZRT_F32: return 4;
    case ZRT_F64: return 8;
    case ZRT_F16: return 2;
    case ZRT_BF16: return 2;
    case ZRT_I8: return 1;
    case ZRT_U8: return 1;
    case ZRT_I32: return 4;
    case ZRT_I64: return 8;
    default: return 0;
  }
}

bool dtype_valid(zrt_dtype_t dtype) { return dtype_size(dtype) != 0; }

bool dtype_is_floating(zrt_dtype_t dtype) {
  return dtype == ZRT_F32 || dtype == ZRT_F64 || dtype == ZRT_F16 || dtype == ZRT_BF16;
}

const char* dtype_name(zrt_dtype_t dtype) {
  switch (dtype) {
    case ZRT_F32: return "f32";
    case ZRT_F64: return "f64";
    case ZRT_F16: return "f16";
    case ZRT_BF16: return "bf16";
    case ZRT_I8: return "i8";
    case ZRT_U8: return "u8";
    case ZRT_I32: return "i32";
    case ZRT_I64: return "i64";
    default: return "?";
  }
}

const char* op_name(zrt_op_t op) {
  switch (op) {
    case ZRT_SUM: return "sum";
    case ZRT_AVG: return "avg";
    case ZRT_MIN: return "min";
    case ZRT_MAX: return "max";
    case ZRT_PROD: return "prod";
    default: return static_cast<int>(op) >= ZRT_OP_COUNT ? "premul_sum" : "?";
  }
}

const char* mem_kind_name(zrt_mem_kind_t kind) {
  switch (kind) {
    case ZRT_MEM_HOST: return "host";
    case ZRT_MEM_CUDA: return "cuda";
    default: return "?";
  }
}

const char* coll_kind_name(zrt_coll_kind_t kind) {
  switch (kind) {
    case ZRT_COLL_ALL_REDUCE: return "all_reduce";
    case ZRT_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case ZRT_COLL_ALL_GATHER: return "all_gather";
    case ZRT_COLL_BROADCAST: return "broadcast";
    case ZRT_COLL_REDUCE: return "reduce";
    case ZRT_COLL_BARRIER: return "barrier";
    case ZRT_COLL_SEND: return "send";
    case ZRT_COLL_RECV: return "recv";
    default: return "?";
  }
}

bool dtype_from_name(const char* name, zrt_dtype_t* dtype) {
  struct Alias {
    const char* name;
    zrt_dtype_t dtype;
  };
  static const Alias kAliases[] = {
      {"f32", ZRT_F32},     {"float", ZRT_F32},    {"float32", ZRT_F32},  {"f64", ZRT_F64},
      {"double", ZRT_F64},  {"float64", ZRT_F64},  {"f16", ZRT_F16},      {"half", ZRT_F16},
      {"float16", ZRT_F16}, {"bf16", ZRT_BF16},    {"bfloat16", ZRT_BF16}, {"i8", ZRT_I8},
      {"int8", ZRT_I8},     {"u8", ZRT_U8},        {"uint8", ZRT_U8},     {"i32", ZRT_I32},
      {"int32", ZRT_I32},   {"int", ZRT_I32},      {"i64", ZRT_I64},      {"int64", ZRT_I64},
  };
  if (name == nullptr) return false;
  for (const Alias& alias : kAliases) {
    if (strcasecmp(alias.name, name) == 0) {
      *dtype = alias.dtype;
      return true;
    }
  }
  return false;
}

bool op_from_name(const char* name, zrt_op_t* op) {
  if (name == nullptr) return false;
  for (int i = 0; i < ZRT_OP_COUNT; ++i) {
    if (strcasecmp(op_name(static_cast<zrt_op_t>(i)), name) == 0) {
      *op = static_cast<zrt_op_t>(i);
      return true;
    }
  }
  return false;
}

Status check_dtype(zrt_dtype_t dtype, const char* arg_name) {
  if (!dtype_valid(dtype)) {
    return Status::invalid_argument("{} = {} is not a zrt_dtype_t (0..{})", arg_name,
                                    static_cast<int>(dtype), ZRT_DTYPE_COUNT - 1);
  }
  return Status::ok();
}

}  // namespace zrt
