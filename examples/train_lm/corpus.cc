#include "corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <array>

#include <cerrno>
#include <cstring>

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

bool read_regular_file(const std::string& path, std::string* text, std::string* error) {
  // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *error = "--corpus " + path + ": " + std::strerror(errno) +
             (errno == ENOENT ? " (the default is Debian's wamerican package)" : "");
    return false;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *error = "--corpus " + path + " is " +
             (S_ISDIR(st.st_mode)    ? "a directory"
              : S_ISFIFO(st.st_mode) ? "a FIFO"
                                     : "not a file") +
             ", not a text file; give the path of a text file";
    return false;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  text->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < text->size()) {
    const ssize_t n = read(fd, text->data() + done, text->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "--corpus " + path + ": reading: " + std::strerror(errno);
      close(fd);
      return false;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  text->resize(done);
  return true;
}

}  // namespace

bool Corpus::load(const std::string& path, int context, std::string* error) {
  // A directory, FIFO or unreadable path is an error message here, never an exception or a
  // hang (std::ifstream of a directory "opens" and then throws on the first read).
  std::string text;
  if (!read_regular_file(path, &text, error)) return false;
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
