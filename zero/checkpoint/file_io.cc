#include "zero/checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lib/core/regular_file.h"

namespace zrt {
namespace {

// Pieces at least this large go straight to write(); smaller ones are coalesced.
constexpr size_t kBufferBytes = size_t{4} << 20;

Status write_fully(int fd, const char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::system_error("writing " + path, errno);
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

Status DurableWriter::open(const std::string& path) {
  path_ = path;
  temp_ = path + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::system_error("creating " + temp_, errno);
  bytes_ = 0;
  used_ = 0;
  checksum_.reset();
  return Status::ok();
}

Status DurableWriter::flush() {
  if (used_ == 0) return Status::ok();
  ZRT_RETURN_IF_ERROR(write_fully(fd_, buffer_.data(), used_, temp_));
  used_ = 0;
  return Status::ok();
}

Status DurableWriter::write(const void* data, size_t bytes) {
  if (fd_ < 0) return Status(ZRT_INTERNAL_ERROR, "DurableWriter::write before open");
  checksum_.update(data, bytes);
  bytes_ += bytes;
  const char* in = static_cast<const char*>(data);
  if (bytes >= kBufferBytes) {
    ZRT_RETURN_IF_ERROR(flush());
    return write_fully(fd_, in, bytes, temp_);
  }
  if (buffer_.empty()) buffer_.resize(kBufferBytes);
  if (used_ + bytes > buffer_.size()) ZRT_RETURN_IF_ERROR(flush());
  std::memcpy(buffer_.data() + used_, in, bytes);
  used_ += bytes;
  return Status::ok();
}

Status DurableWriter::write_at(uint64_t offset, const void* data, size_t bytes) {
  if (fd_ < 0) return Status(ZRT_INTERNAL_ERROR, "DurableWriter::write_at before open");
  const char* in = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, in, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::system_error("writing " + temp_, errno);
    }
    in += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
    bytes_ = std::max<uint64_t>(bytes_, offset);
  }
  return Status::ok();
}

Status DurableWriter::commit() {
  if (fd_ < 0) return Status(ZRT_INTERNAL_ERROR, "DurableWriter::commit before open");
  ZRT_RETURN_IF_ERROR(flush());
  // The data must be on disk before the rename makes it visible under its real name.
  if (::fsync(fd_) != 0) return Status::system_error("fsync of " + temp_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temp_.c_str());
    return Status::system_error("closing " + temp_, errno);
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    return Status::system_error("renaming " + temp_ + " to " + path_, err);
  }
  return fsync_directory(parent_directory(path_));
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status ReadFile::open(const std::string& path) {
  path_ = path;
  // A FIFO or device in place of a checkpoint file is refused instead of blocking the rank.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
    return Status::invalid_argument("{} is missing", path);
  }
  size_t size = 0;
  ZRT_RETURN_IF_ERROR(open_regular_file(path, "checkpoint file", &fd_, &size));
  size_ = size;
  return Status::ok();
}

Status ReadFile::read_at(uint64_t offset, void* data, size_t bytes) const {
  char* out = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::system_error("reading " + path_, errno);
    }
    if (n == 0) {
      return Status::invalid_argument("{} ends at byte {}, before the {} bytes wanted there", path_,
                                      offset, bytes);
    }
    out += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status make_directories(const std::string& dir) {
  if (dir.empty()) return Status::invalid_argument("the checkpoint folder name is empty");
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::system_error("creating folder " + prefix, errno);
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::system_error("stat of " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return Status::invalid_argument("{} exists and is not a folder", dir);
  return Status::ok();
}

Status fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::system_error("opening folder " + dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) return Status::system_error("fsync of folder " + dir, err);
  return Status::ok();
}

Status read_small_file(const std::string& path, size_t max_bytes, std::string* out) {
  ReadFile file;
  ZRT_RETURN_IF_ERROR(file.open(path));
  if (file.size() > max_bytes) {
    return Status::invalid_argument("{} is {} bytes, more than the {} allowed", path, file.size(),
                                    max_bytes);
  }
  std::string text(static_cast<size_t>(file.size()), '\0');
  ZRT_RETURN_IF_ERROR(file.read_at(0, text.data(), text.size()));
  *out = std::move(text);
  return Status::ok();
}

Status list_directory(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::system_error("listing " + dir, errno);
  names->clear();
  while (const dirent* entry = ::readdir(d)) {
    if (entry->d_type == DT_REG || entry->d_type == DT_UNKNOWN) names->push_back(entry->d_name);
  }
  ::closedir(d);
  return Status::ok();
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace zrt
