// Parsing and printing of the quantities users type and read on the tools' command lines:
// byte sizes ("1M", "256MiB", "64KB", "7.5e9") and counts ("7.5e9", "1.3B", "125M").
//
// Sizes follow nccl-tests: a bare K/M/G/T is binary (1M = 2^20), so `-b 8 -e 128M` means what
// it means there; KiB/MiB/GiB/TiB are binary too, KB/MB/GB/TB decimal. Counts (parameters,
// tokens) are decimal: K thousand, M million, B or G billion, T trillion.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lib/core/status.h"

namespace zrt::tools {

// A whole number of bytes. `what` names the flag in the message ("-b").
Status parse_size(std::string_view text, const char* what, uint64_t* bytes);

// A whole, non-negative count (fractions allowed before a unit: "7.5B", "7.5e9").
Status parse_count(std::string_view text, const char* what, uint64_t* count);

// A non-negative real number with an optional decimal unit, for memory caps ("80GB", "24GiB")
// that may be fractional. Same units as parse_size.
Status parse_real_size(std::string_view text, const char* what, double* bytes);

// "64 MiB", "1 KiB", "8 B", "1.5 GiB": compact binary form for size columns and plot ticks.
std::string format_size(uint64_t bytes);
// "120.00 GB" decimal (the unit the ZeRO paper and GPU data sheets use).
std::string format_gb(double bytes);
// "7.50 B", "125.00 M": a count in decimal units.
std::string format_count(double count);

}  // namespace zrt::tools
