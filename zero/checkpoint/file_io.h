// Durable file I/O for checkpoints: every file is written under a temporary name, fsynced,
// renamed into place and its folder fsynced, so a crash leaves either the old file or the
// complete new one, never a torn one. Reads are positioned (pread) so a rank fetches just the
// byte ranges it owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zero/checkpoint/checksum.h"
#include "lib/core/status.h"

namespace zrt {

// Appends to "<path>.tmp.<pid>", hashing what it writes; commit() makes it `path` durably.
// Destroying an uncommitted writer removes the temporary.
class DurableWriter {
 public:
  DurableWriter() = default;
  ~DurableWriter();
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  Status open(const std::string& path);
  Status write(const void* data, size_t bytes);
  // Writes at an absolute position without hashing (the consolidated export fills a file of
  // known size out of order). Do not mix with write().
  Status write_at(uint64_t offset, const void* data, size_t bytes);
  Status commit();

  uint64_t bytes() const { return bytes_; }
  uint64_t checksum() const { return checksum_.digest(); }
  const std::string& path() const { return path_; }

 private:
  Status flush();

  int fd_ = -1;
  std::string path_;
  std::string temp_;
  uint64_t bytes_ = 0;
  Checksum checksum_;
  std::vector<char> buffer_;  // coalesces small pieces into large writes
  size_t used_ = 0;
};

// A file opened for positioned reads.
class ReadFile {
 public:
  ReadFile() = default;
  ~ReadFile();
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;

  // ZRT_INVALID_ARGUMENT naming the path when it does not exist, ZRT_SYSTEM_ERROR otherwise.
  Status open(const std::string& path);
  uint64_t size() const { return size_; }
  // Reads exactly `bytes` at `offset`; a short read is an error naming the path.
  Status read_at(uint64_t offset, void* data, size_t bytes) const;

 private:
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

// mkdir -p.
Status make_directories(const std::string& dir);
Status fsync_directory(const std::string& dir);
// The whole file, refusing one larger than max_bytes.
Status read_small_file(const std::string& path, size_t max_bytes, std::string* out);
// Names of the regular files in dir.
Status list_directory(const std::string& dir, std::vector<std::string>* names);
std::string parent_directory(const std::string& path);

}  // namespace zrt
