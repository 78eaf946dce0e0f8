#include "collectives/algorithm.h"

namespace zrt {

const char* algorithm_name(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kDirect:
      return "direct";
    case AllReduceAlgorithm::kRecursiveDoubling:
      return "rd";
  }
  return "?";
}

}  // namespace zrt
