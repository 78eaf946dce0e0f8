// The benches' out-of-band exchange: ranks forked by one bench process all-gather through files
// in a folder they share (zrt_oob_t's callbacks), so a bench needs no launcher or store.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "zrt/zrt.h"

namespace bench {

// An out-of-band all-gather over files in a folder shared by the forked ranks.
struct FileExchange {
  std::string dir;
  int rank = 0;
  int size = 1;
  int round = 0;
};

inline zrt_status_t file_allgather(const void* sendbuf, void* recvbuf, size_t bytes,
                                   void* user_data, void** request) {
  auto* exchange = static_cast<FileExchange*>(user_data);
  const int round = exchange->round++;
  auto path = [&](int rank) {
    return exchange->dir + "/" + std::to_string(round) + "." + std::to_string(rank);
  };
  {
    std::ofstream out(path(exchange->rank) + ".tmp", std::ios::binary);
    out.write(static_cast<const char*>(sendbuf), static_cast<std::streamsize>(bytes));
  }
  std::filesystem::rename(path(exchange->rank) + ".tmp", path(exchange->rank));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int rank = 0; rank < exchange->size; ++rank) {
    while (!std::filesystem::exists(path(rank))) {
      if (std::chrono::steady_clock::now() > deadline) return ZRT_TIMEOUT;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::ifstream in(path(rank), std::ios::binary);
    in.read(static_cast<char*>(recvbuf) + rank * bytes, static_cast<std::streamsize>(bytes));
  }
  *request = nullptr;
  return ZRT_SUCCESS;
}
inline zrt_status_t file_test(void*) {
  return ZRT_SUCCESS;
}
inline void file_free(void*) {}

}  // namespace bench
