#include "tools/common/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace zrt::tools {
namespace {

struct Unit {
  const char* name;
  double factor;
};

// Checked case-insensitively; "B" alone is bytes for sizes.
constexpr Unit kSizeUnits[] = {
    {"", 1.0},
    {"b", 1.0},
    {"k", 1024.0},
    {"kib", 1024.0},
    {"kb", 1e3},
    {"m", 1048576.0},
    {"mib", 1048576.0},
    {"mb", 1e6},
    {"g", 1073741824.0},
    {"gib", 1073741824.0},
    {"gb", 1e9},
    {"t", 1099511627776.0},
    {"tib", 1099511627776.0},
    {"tb", 1e12},
};

constexpr Unit kCountUnits[] = {
    {"", 1.0}, {"k", 1e3}, {"m", 1e6}, {"b", 1e9}, {"g", 1e9}, {"t", 1e12},
};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "7.5e9" / "256MiB" / "1.3 B" into a number and a unit; strtod takes the longest
// numeric prefix, so the exponent form needs no special case.
template <size_t N>
Status parse_with_units(std::string_view text, const char* what, const Unit (&units)[N],
                        const char* unit_help, double* value) {
  std::string s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  s = s.substr(start);
  if (s.empty())
    return Status::invalid_argument("{}: empty value (expected e.g. {})", what, unit_help);
  if (s[0] == '-') {
    return Status::invalid_argument("{}: '{}' is negative (expected e.g. {})", what, s, unit_help);
  }
  // strtod would accept "inf", "nan" and hex; only decimal digits may start a number here.
  if (!std::isdigit(static_cast<unsigned char>(s[0])) && s[0] != '.' && s[0] != '+') {
    return Status::invalid_argument("{}: '{}' is not a number (expected e.g. {})", what, s,
                                    unit_help);
  }
  char* end = nullptr;
  double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) {
    return Status::invalid_argument("{}: '{}' is not a number (expected e.g. {})", what, s,
                                    unit_help);
  }
  std::string unit = lower(std::string_view(end));
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  for (const Unit& u : units) {
    if (unit == u.name) {
      double v = number * u.factor;
      if (!std::isfinite(v) || v > 1.8e19) {
        return Status::invalid_argument("{}: '{}' is too large", what, s);
      }
      *value = v;
      return Status::ok();
    }
  }
  return Status::invalid_argument("{}: '{}' has an unknown unit '{}' (expected e.g. {})", what, s,
                                  std::string_view(end), unit_help);
}

constexpr const char* kSizeHelp = "8, 1K, 256MiB, 64KB, 2G or 7.5e9";
constexpr const char* kCountHelp = "7.5e9, 7.5B, 125M or 1300000000";

Status to_whole(double value, std::string_view text, const char* what, uint64_t* out) {
  double rounded = std::floor(value);
  if (rounded != value) {
    return Status::invalid_argument("{}: '{}' is not a whole number ({})", what, text, value);
  }
  *out = static_cast<uint64_t>(rounded);
  return Status::ok();
}

}  // namespace

Status parse_size(std::string_view text, const char* what, uint64_t* bytes) {
  double value = 0;
  ZRT_RETURN_IF_ERROR(parse_with_units(text, what, kSizeUnits, kSizeHelp, &value));
  uint64_t whole = 0;
  ZRT_RETURN_IF_ERROR(to_whole(value, text, what, &whole));
  *bytes = whole;
  return Status::ok();
}

Status parse_count(std::string_view text, const char* what, uint64_t* count) {
  double value = 0;
  ZRT_RETURN_IF_ERROR(parse_with_units(text, what, kCountUnits, kCountHelp, &value));
  // "7.5B" is exact; "1.3e9" is too, but a count like 1.23456789e3 is a typo, not a count.
  uint64_t whole = 0;
  ZRT_RETURN_IF_ERROR(to_whole(std::round(value * 1e6) / 1e6, text, what, &whole));
  *count = whole;
  return Status::ok();
}

Status parse_real_size(std::string_view text, const char* what, double* bytes) {
  double value = 0;
  ZRT_RETURN_IF_ERROR(parse_with_units(text, what, kSizeUnits, kSizeHelp, &value));
  *bytes = value;
  return Status::ok();
}

std::string format_size(uint64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  if (v == std::floor(v)) return fmt::format("{} {}", static_cast<uint64_t>(v), kNames[unit]);
  return fmt::format("{:.1f} {}", v, kNames[unit]);
}

std::string format_gb(double bytes) {
  return fmt::format("{:.2f} GB", bytes / 1e9);
}

std::string format_count(double count) {
  if (count >= 1e12) return fmt::format("{:.2f} T", count / 1e12);
  if (count >= 1e9) return fmt::format("{:.2f} B", count / 1e9);
  if (count >= 1e6) return fmt::format("{:.2f} M", count / 1e6);
  if (count >= 1e3) return fmt::format("{:.2f} K", count / 1e3);
  return fmt::format("{:.0f}", count);
}

}  // namespace zrt::tools
