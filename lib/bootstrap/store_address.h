// Where rank 0 listens for the store, and what a rank that cannot reach it is told.
//
// Rank 0 listens on the address MASTER_ADDR (or ZRT_STORE_ADDR) resolves to on its host: that is
// the interface its peers route to. Debian maps a host's own name to 127.0.1.1 in /etc/hosts, so
// on rank 0's host that name is loopback, which remote ranks cannot reach: when the name resolves
// only to loopback and the world may span hosts, rank 0 listens on every interface instead.
#pragma once

#include <string>
#include <vector>

namespace zrt {

struct ListenChoice {
  std::string host;    // passed to listen_tcp; "" = every interface
  std::string reason;  // for the log and for messages
};

// 127.0.0.0/8, ::1 and IPv4-mapped loopback, as numeric text.
bool is_loopback_address(const std::string& numeric);

// The numeric addresses `host` resolves to on this host (empty when it does not resolve).
std::vector<std::string> resolve_addresses(const std::string& host);

// Pure: `resolved` = resolve_addresses(host); `world_on_one_host` = every rank shares this host
// (the launcher's local world is the whole world).
ListenChoice choose_listen_host(const std::string& host, const std::vector<std::string>& resolved,
                                bool world_on_one_host);

// Pure: what a rank other than 0 that cannot connect to host:port is told, given what host
// resolves to on its own host and whether the world spans hosts (false when unknown).
std::string unreachable_store_hint(const std::string& host, int port,
                                   const std::vector<std::string>& resolved,
                                   bool world_on_one_host);

}  // namespace zrt
