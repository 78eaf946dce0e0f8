#include "lib/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace zrt {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

Status open_regular_file(const std::string& path, const std::string& what, int* fd, size_t* size) {
  // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
  const int opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (opened < 0) {
    const int err = errno;
    return Status::system_error(fmt::format("opening {} {}", what, path), err);
  }
  struct stat st {};
  if (::fstat(opened, &st) != 0) {
    const int err = errno;
    ::close(opened);
    return Status::system_error(fmt::format("stat of {} {}", what, path), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(opened);
    return Status::invalid_argument("{} {} is {}, not a regular file; give the path of a file",
                                    what, path, kind_of(st.st_mode));
  }
  const int flags = ::fcntl(opened, F_GETFL);
  if (flags >= 0) ::fcntl(opened, F_SETFL, flags & ~O_NONBLOCK);
  *fd = opened;
  if (size != nullptr) *size = static_cast<size_t>(st.st_size);
  return Status::ok();
}

Status read_regular_file(const std::string& path, const std::string& what, size_t max_bytes,
                         std::string* out) {
  int fd = -1;
  size_t size = 0;
  ZRT_RETURN_IF_ERROR(open_regular_file(path, what, &fd, &size));
  if (size > max_bytes) {
    ::close(fd);
    return Status::invalid_argument("{} {} is {} bytes, more than the {} allowed", what, path, size,
                                    max_bytes);
  }
  std::string text(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, text.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Status::system_error(fmt::format("reading {} {}", what, path), err);
    }
    if (n == 0) break;  // shrank while read: what is there
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  *out = std::move(text);
  return Status::ok();
}

}  // namespace zrt
