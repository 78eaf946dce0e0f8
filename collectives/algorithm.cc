#include "collectives/algorithm.h"

#include <cstdlib>
#include <cstring>

namespace zrt {

Status algorithm_from_env(AllReduceAlgorithm* algorithm) {
  const char* value = std::getenv("ZRT_ALGO");
  if (value == nullptr || value[0] == '\0') {
    *algorithm = AllReduceAlgorithm::kAuto;
  } else if (std::strcmp(value, "ring") == 0) {
    *algorithm = AllReduceAlgorithm::kRing;
  } else if (std::strcmp(value, "direct") == 0) {
    *algorithm = AllReduceAlgorithm::kDirect;
  } else if (std::strcmp(value, "rd") == 0) {
    *algorithm = AllReduceAlgorithm::kRecursiveDoubling;
  } else {
    return Status::invalid_argument("ZRT_ALGO='{}' is not one of ring, rd, direct", value);
  }
  return Status::ok();
}

}  // namespace zrt
