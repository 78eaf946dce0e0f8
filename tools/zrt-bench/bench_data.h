// Input patterns and result checking for zrt-bench -c 1 (the #wrong column).
//
// Every rank fills element j of its input with a small integer chosen from (rank, j), so that
// every reduction of up to a few dozen ranks is exact in every type (bf16 included) and the
// expected result of any element can be computed independently on each rank. Integer types
// wrap (C++20 conversions are modular), so the expectation is taken modulo 2^bits as well.
#pragma once

#include <cstdint>

#include "tools/zrt-bench/bench_options.h"

namespace zrt::bench {

// The value rank `rank` contributes at element `index` of its input for reduction `op`.
double input_value(zrt_dtype_t dtype, zrt_op_t op, int rank, uint64_t index);

// Writes input_value(rank, first_index + i) for i in [0, count) into dst (count elements).
void fill_input(zrt_dtype_t dtype, zrt_op_t op, int rank, uint64_t first_index, uint64_t count,
                void* dst);
// Writes a value no correct result contains, so a collective that skips an element is caught.
void fill_poison(zrt_dtype_t dtype, uint64_t count, void* dst);

// Element conversions (round to nearest even for half types).
void store_value(zrt_dtype_t dtype, double value, void* dst, uint64_t index);
double load_value(zrt_dtype_t dtype, const void* src, uint64_t index);

// Counts wrong elements of this rank's result. `result` is the receive buffer (host copy):
// recvcount elements for reduce_scatter, ranks × sendcount for all_gather, count otherwise.
// For reduce, non-root ranks have no result (returns 0).
int64_t count_wrong(Coll coll, zrt_dtype_t dtype, zrt_op_t op, int rank, int ranks, int root,
                    uint64_t count, const void* result);

}  // namespace zrt::bench
