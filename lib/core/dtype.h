// Element types and reduction ops: sizes, names and validation shared by every layer.
#pragma once

#include <cstddef>

#include "lib/core/status.h"
#include "zrt/zrt.h"

namespace zrt {

// 0 for an unknown dtype.
size_t dtype_size(zrt_dtype_t dtype);
bool dtype_valid(zrt_dtype_t dtype);
bool dtype_is_floating(zrt_dtype_t dtype);
const char* dtype_name(zrt_dtype_t dtype);  // "f32", "bf16", ... or "?"
const char* op_name(zrt_op_t op);           // "sum", ... ; "premul_sum" for created ops
const char* mem_kind_name(zrt_mem_kind_t kind);
const char* coll_kind_name(zrt_coll_kind_t kind);  // "all_reduce", "reduce_scatter", ...

// Parses "f32", "float32", "bf16", ... (case-insensitive); false if unknown.
bool dtype_from_name(const char* name, zrt_dtype_t* dtype);
bool op_from_name(const char* name, zrt_op_t* op);

// Checks that `dtype` is known; the message names `arg_name`.
Status check_dtype(zrt_dtype_t dtype, const char* arg_name);

}  // namespace zrt
