// The training data of train_lm: the words of /usr/share/dict/words (Debian's wamerican), each
// followed by a newline, as one byte stream. A sample is `context` bytes and the byte after them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train_lm {

class Corpus {
 public:
  // Loads the file; returns false and sets *error when it cannot be read or is too small.
  bool load(const std::string& path, int context, std::string* error);

  int vocab_size() const { return static_cast<int>(vocab_.size()); }
  int context() const { return context_; }
  size_t bytes() const { return tokens_.size(); }

  // Fills `inputs` (count x context token ids) and `targets` (count) with the samples numbered
  // [first, first + count) of the batch drawn for `step`: the draw depends only on (seed, step),
  // so every rank and every world size sees the same global batch and takes its own slice.
  void batch(uint64_t seed, int step, int global_batch, int first, int count,
             std::vector<int32_t>* inputs, std::vector<int32_t>* targets) const;

 private:
  int context_ = 0;
  std::vector<int32_t> tokens_;  // the file as token ids
  std::vector<uint8_t> vocab_;   // token id -> byte
};

}  // namespace train_lm
