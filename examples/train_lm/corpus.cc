#include "corpus.h"

#include <array>
#include <fstream>
#include <iterator>

namespace train_lm {
namespace {

// SplitMix64: a tiny, well-mixed generator whose output depends only on its input, so a sample
// index can be derived from (seed, step, i) without carrying generator state between ranks.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool Corpus::load(const std::string& path, int context, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    *error = "cannot read " + path + " (install Debian's wamerican package)";
    return false;
  }
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.size() < static_cast<size_t>(context) * 16) {
    *error = path + " is too small for a context of " + std::to_string(context);
    return false;
  }
  std::array<int32_t, 256> id_of{};
  id_of.fill(-1);
  for (unsigned char c : text) {
    if (id_of[c] < 0) id_of[c] = 0;
  }
  vocab_.clear();
  for (int byte = 0; byte < 256; ++byte) {
    if (id_of[byte] >= 0) {
      id_of[byte] = static_cast<int32_t>(vocab_.size());
      vocab_.push_back(static_cast<uint8_t>(byte));
    }
  }
  tokens_.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens_[i] = id_of[static_cast<unsigned char>(text[i])];
  context_ = context;
  return true;
}

void Corpus::batch(uint64_t seed, int step, int global_batch, int first, int count,
                   std::vector<int32_t>* inputs, std::vector<int32_t>* targets) const {
  inputs->resize(static_cast<size_t>(count) * context_);
  targets->resize(count);
  const uint64_t positions = tokens_.size() - context_;
  for (int i = 0; i < count; ++i) {
    const uint64_t sample = static_cast<uint64_t>(step) * global_batch + first + i;
    const uint64_t start = mix(seed ^ mix(sample)) % positions;
    for (int j = 0; j < context_; ++j) (*inputs)[i * context_ + j] = tokens_[start + j];
    (*targets)[i] = tokens_[start + context_];
  }
}

}  // namespace train_lm
