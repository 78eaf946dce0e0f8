// Opening input files that a user names (manifest.json, shard files, --config, a corpus)
// without hanging on what is not a file: open() of a FIFO with no writer blocks forever, a
// device may never end. Such paths are refused with a message naming them.
#pragma once

#include <cstddef>
#include <string>

#include "lib/core/status.h"

namespace zrt {

// Opens `path` read-only (close-on-exec) and refuses it unless it is a regular file (symbolic
// links are followed). `what` names the file's role in messages ("partition config").
// Errors: ZRT_INVALID_ARGUMENT for a path that is not a regular file, ZRT_SYSTEM_ERROR (with
// the errno text) for one that cannot be opened, missing ones included. *fd is set only on success;
// *size gets its size.
Status open_regular_file(const std::string& path, const std::string& what, int* fd,
                         size_t* size = nullptr);

// The whole of a regular file, refusing one larger than max_bytes.
Status read_regular_file(const std::string& path, const std::string& what, size_t max_bytes,
                         std::string* out);

}  // namespace zrt
