#include "lib/bootstrap/store_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include <fmt/format.h>

namespace zrt {
namespace {

std::string joined(const std::vector<std::string>& addresses) {
  std::string text;
  for (const std::string& address : addresses) text += (text.empty() ? "" : ", ") + address;
  return text;
}

bool all_loopback(const std::vector<std::string>& addresses) {
  return !addresses.empty() && std::all_of(addresses.begin(), addresses.end(), is_loopback_address);
}

}  // namespace

bool is_loopback_address(const std::string& numeric) {
  in_addr v4{};
  if (inet_pton(AF_INET, numeric.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, numeric.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

std::vector<std::string> resolve_addresses(const std::string& host) {
  std::vector<std::string> addresses;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return addresses;
  for (addrinfo* entry = result; entry != nullptr; entry = entry->ai_next) {
    char text[NI_MAXHOST];
    if (getnameinfo(entry->ai_addr, entry->ai_addrlen, text, sizeof(text), nullptr, 0,
                    NI_NUMERICHOST) != 0) {
      continue;
    }
    if (std::find(addresses.begin(), addresses.end(), text) == addresses.end()) {
      addresses.emplace_back(text);
    }
  }
  freeaddrinfo(result);
  return addresses;
}

ListenChoice choose_listen_host(const std::string& host, const std::vector<std::string>& resolved,
                                bool world_on_one_host) {
  if (resolved.empty()) {
    return {"", fmt::format("'{}' does not resolve on rank 0's host: every interface", host)};
  }
  if (!all_loopback(resolved)) {
    return {host, fmt::format("the address '{}' resolves to here ({})", host, joined(resolved))};
  }
  if (world_on_one_host) {
    return {host, fmt::format("'{}' is loopback ({}) and every rank is on this host", host,
                              joined(resolved))};
  }
  return {"", fmt::format("every interface: '{}' resolves to loopback ({}) on rank 0's host, "
                          "which other hosts cannot reach, and the world may span hosts",
                          host, joined(resolved))};
}

std::string unreachable_store_hint(const std::string& host, int port,
                                   const std::vector<std::string>& resolved,
                                   bool world_on_one_host) {
  const std::string here = resolved.empty() ? "nothing" : joined(resolved);
  if (all_loopback(resolved) && !world_on_one_host) {
    return fmt::format(
        "'{}' resolves to loopback ({}) on this host, so this rank knocks on its own host; "
        "if rank 0 runs elsewhere, set MASTER_ADDR (or ZRT_STORE_ADDR) to rank 0's network "
        "address",
        host, here);
  }
  return fmt::format(
      "'{}' resolves to {} here; rank 0 listens on port {} at the address '{}' resolves to on "
      "its host (every interface when that is loopback and the world spans hosts): is rank 0 "
      "running, with the same MASTER_ADDR and port, and is the port open between the hosts?",
      host, here, port, host);
}

}  // namespace zrt
