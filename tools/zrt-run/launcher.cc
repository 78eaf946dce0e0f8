// How zrt-run supervises a job.
//
// The launcher serves the rendezvous store itself (ZRT_STORE_EXTERNAL=1), so a rank 0 that
// dies does not take the store with it and the other ranks fail with a clear error instead of
// a connection reset. Each rank runs in its own process group with stdout and stderr on two
// pipes; one poll() loop relays their lines, and a signalfd turns SIGCHLD, SIGINT and SIGTERM
// into events of the same loop, so there are no signal handlers and nothing spins.
//
// Failure policy: the first rank that exits non-zero or dies by a signal is reported by number;
// every other rank's process group gets SIGTERM (after a 300 ms settle in which ranks that fail
// alike end on their own), and SIGKILL after the grace period. SIGINT
// and SIGTERM sent to zrt-run are forwarded to every rank the same way. After the last rank
// exits, output still in the pipes is drained (bounded, in case a rank left children holding
// them).
//
// Launcher death: a zrt-run killed by SIGKILL cannot signal anyone, so the ranks watch it. Each
// inherits the read end of a lifeline pipe (ZRT_LAUNCHER_FD) whose write end only zrt-run holds;
// zrt's bootstrap starts a thread that ends the rank with a message on end-of-file
// (lib/bootstrap/launcher_watch.h). A rank that never reaches the bootstrap gets SIGTERM from
// the kernel (PR_SET_PDEATHSIG). Each rank also holds the read ends of its own output pipes, so
// that a rank printing when zrt-run dies blocks instead of dying of SIGPIPE.
#include "tools/zrt-run/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/job_identity.h"
#include "lib/bootstrap/socket_util.h"
#include "lib/bootstrap/store_server.h"
#include "lib/core/environment.h"
#include "tools/common/binding.h"
#include "tools/zrt-run/line_relay.h"
#include "tools/zrt-run/node_rendezvous.h"

namespace zrt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kDrainAfterExit = std::chrono::milliseconds(2000);
constexpr auto kSettle = std::chrono::milliseconds(300);  // see Job::term_at_
constexpr int kTorchrunDefaultPort = 29500;               // torchrun's --master-port default

// Variables the launcher sets, plus those that would outrank them in read_env_ranks.
const std::set<std::string> kReplacedVariables = {
    "RANK",           "WORLD_SIZE",      "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",    "MASTER_PORT",     "ZRT_JOB_TOKEN",   "ZRT_STORE_EXTERNAL",
    "ZRT_RANK",       "ZRT_WORLD_SIZE",  "ZRT_LOCAL_RANK",  "ZRT_LOCAL_WORLD_SIZE",
    "ZRT_STORE_ADDR", "ZRT_STORE_PORT",  "ZRT_LAUNCHER_FD", "GROUP_RANK",
    "NODE_RANK",      "GROUP_WORLD_SIZE"};

// Where one rank sits in the job, and where the job's store is: what its environment says.
struct RankPlace {
  int rank = 0;  // global
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  int node = 0;
  int nnodes = 1;
  std::string address;  // MASTER_ADDR and ZRT_STORE_ADDR
  int store_port = 0;
  int master_port = 0;
  std::string token;  // ZRT_JOB_TOKEN; "" = none (no job identity anywhere)
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  int out_fd = -1;
  int err_fd = -1;
  std::unique_ptr<LineRelay> out;
  std::unique_ptr<LineRelay> err;
};

void message(const std::string& text) {
  const std::string line = "zrt-run: " + text + "\n";
  if (write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // stderr is gone; there is nowhere left to report to.
  }
}

// 16 random bytes as hex: enough that a stray client of another job cannot guess it.
std::optional<std::string> random_token() {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  unsigned char bytes[16];
  const ssize_t n = read(fd, bytes, sizeof(bytes));
  close(fd);
  if (n != static_cast<ssize_t>(sizeof(bytes))) return std::nullopt;
  std::string token;
  for (unsigned char byte : bytes) token += fmt::format("{:02x}", byte);
  return token;
}

std::vector<std::string> rank_environment(const RankPlace& place, int lifeline_fd) {
  std::vector<std::string> env;
  for (const std::string& text : environment_entries()) {
    const std::string name = text.substr(0, text.find('='));
    if (kReplacedVariables.count(name) == 0) env.push_back(text);
  }
  env.push_back(fmt::format("RANK={}", place.rank));
  env.push_back(fmt::format("WORLD_SIZE={}", place.world));
  env.push_back(fmt::format("LOCAL_RANK={}", place.local_rank));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", place.local_world));
  // torchrun's names for the node's index and count.
  env.push_back(fmt::format("GROUP_RANK={}", place.node));
  env.push_back(fmt::format("NODE_RANK={}", place.node));
  env.push_back(fmt::format("GROUP_WORLD_SIZE={}", place.nnodes));
  env.push_back("MASTER_ADDR=" + place.address);
  env.push_back(fmt::format("MASTER_PORT={}", place.master_port));
  env.push_back("ZRT_STORE_ADDR=" + place.address);
  env.push_back(fmt::format("ZRT_STORE_PORT={}", place.store_port));
  if (!place.token.empty()) env.push_back("ZRT_JOB_TOKEN=" + place.token);
  env.push_back("ZRT_STORE_EXTERNAL=1");
  env.push_back(fmt::format("ZRT_LAUNCHER_FD={}", lifeline_fd));
  return env;
}

std::string describe_exit(int rank, int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return fmt::format("rank {} killed by signal {} ({})", rank, signal, strsignal(signal));
  }
  return fmt::format("rank {} exited with code {}", rank, WEXITSTATUS(status));
}

bool failed(int status) {
  return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

class Job {
 public:
  explicit Job(const LaunchOptions& options) : options_(options) {}
  int run();

 private:
  bool start_ranks(const RankPlace& job, const sigset_t& original_mask);
  bool form_nodes(const sigset_t& interrupting, int* store_port, int* master_port,
                  std::string* token);
  std::string node_name() const;  // "node 1 (host): " on several nodes, else ""
  void finish_nodes();
  bool open_lifeline();
  void signal_all(int signal);
  void begin_termination(const std::string& reason);
  void reap();
  void relay(RankProcess& process, bool error_stream);
  int running_count() const;

  const LaunchOptions& options_;
  std::vector<RankProcess> ranks_;
  bool terminating_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_;
  // A failed rank's peers get kSettle to end on their own before SIGTERM: when every rank fails
  // alike (a usage error that only rank 0 prints), rank 0 is not killed before it has spoken.
  Clock::time_point term_at_;
  bool term_sent_ = false;
  int exit_code_ = 0;  // the first failure decides
  // The lifeline: every rank inherits the read end, only this process holds the write end, so
  // the ranks see end-of-file the moment zrt-run dies, however it dies (launcher_watch.h).
  int lifeline_read_ = -1;
  int lifeline_write_ = -1;
  int interrupted_by_ = 0;
  std::unique_ptr<NodeRendezvous> nodes_;  // several nodes only
};

int Job::running_count() const {
  int count = 0;
  for (const RankProcess& process : ranks_) count += process.running ? 1 : 0;
  return count;
}

bool Job::open_lifeline() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    message(fmt::format("cannot create the ranks' lifeline pipe: {}", strerror(errno)));
    return false;
  }
  lifeline_read_ = fds[0];
  lifeline_write_ = fds[1];
  return true;
}

bool Job::start_ranks(const RankPlace& job, const sigset_t& original_mask) {
  std::fflush(stdout);
  std::fflush(stderr);
  ranks_.resize(static_cast<size_t>(options_.ranks));
  // --bind: every rank's CPUs and environment are planned here, before any fork.
  tools::LaunchBinding binding;
  if (options_.bind) {
    const Status planned = tools::prepare_launch_binding(options_.ranks, &binding);
    if (!planned.is_ok()) {
      message("--bind: " + planned.message());
      return false;
    }
  }
  for (int local = 0; local < options_.ranks; ++local) {
    RankProcess& process = ranks_[static_cast<size_t>(local)];
    RankPlace place = job;
    place.local_rank = local;
    place.rank = global_rank(JobShape{job.nnodes, options_.ranks}, job.node, local);
    const int rank = place.rank;
    process.rank = rank;
    // Everything the child needs is built before fork(): the store's thread is running, so the
    // child may only make async-signal-safe calls until exec.
    std::vector<std::string> env = rank_environment(place, lifeline_read_);
    if (options_.bind) {
      const auto& extra = binding.environment[static_cast<size_t>(local)];
      env.insert(env.end(), extra.begin(), extra.end());
    }
    const std::string bind_failed = fmt::format("zrt-run: rank {}: --bind failed: ", rank);
    std::vector<char*> envp;
    for (const std::string& entry : env) envp.push_back(const_cast<char*>(entry.c_str()));
    envp.push_back(nullptr);
    std::vector<char*> argv;
    for (const std::string& arg : options_.command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    const std::string exec_failed =
        fmt::format("zrt-run: rank {} cannot execute '{}': ", rank, options_.command[0]);
    int out_pipe[2];
    int err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
      message(fmt::format("cannot create pipes for rank {}: {}", rank, strerror(errno)));
      return false;
    }
    const pid_t launcher_pid = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      message(fmt::format("cannot fork rank {}: {}", rank, strerror(errno)));
      return false;
    }
    if (pid == 0) {
      setpgid(0, 0);  // its own group: signals reach the rank and anything it started
      const int null_fd = open("/dev/null", O_RDONLY);
      if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      // The rank keeps the read ends of its own output pipes: if zrt-run dies, a rank that
      // prints blocks on a full pipe (until its launcher watch or the signal below ends it)
      // instead of dying of SIGPIPE. The lifeline's read end survives exec (ZRT_LAUNCHER_FD).
      fcntl(out_pipe[0], F_SETFD, 0);
      fcntl(err_pipe[0], F_SETFD, 0);
      fcntl(lifeline_read_, F_SETFD, 0);
      // A rank that never reaches zrt's bootstrap (or is no zrt program) still ends with its
      // launcher; getppid() catches a launcher that died before the prctl.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      signal(SIGPIPE, SIG_DFL);
      sigprocmask(SIG_SETMASK, &original_mask, nullptr);
      if (options_.bind) {
        const int bind_errno = tools::apply_launch_binding(binding, local);
        if (bind_errno != 0) {
          ssize_t ignored = write(STDERR_FILENO, bind_failed.data(), bind_failed.size());
          const char* reason = strerror(bind_errno);
          ignored = write(STDERR_FILENO, reason, strlen(reason));
          ignored = write(STDERR_FILENO, "\n", 1);
          (void)ignored;
          _exit(126);
        }
      }
      execvpe(argv[0], argv.data(), envp.data());
      const int err = errno;
      ssize_t ignored = write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
      const char* reason = strerror(err);
      ignored = write(STDERR_FILENO, reason, strlen(reason));
      ignored = write(STDERR_FILENO, "\n", 1);
      (void)ignored;
      _exit(127);
    }
    setpgid(pid, pid);  // also here, so that a signal sent before the child ran still lands
    close(out_pipe[1]);
    close(err_pipe[1]);
    process.pid = pid;
    process.running = true;
    process.out_fd = out_pipe[0];
    process.err_fd = err_pipe[0];
    const std::string out_prefix = options_.tag_output ? fmt::format("[{}:stdout] ", rank)
                                   : options_.prefix   ? fmt::format("[{}] ", rank)
                                                       : "";
    const std::string err_prefix = options_.tag_output ? fmt::format("[{}:stderr] ", rank)
                                   : options_.prefix   ? fmt::format("[{}] ", rank)
                                                       : "";
    process.out = std::make_unique<LineRelay>(STDOUT_FILENO, out_prefix);
    process.err = std::make_unique<LineRelay>(STDERR_FILENO, err_prefix);
  }
  return true;
}

void Job::signal_all(int signal) {
  for (const RankProcess& process : ranks_) {
    if (process.running) kill(-process.pid, signal);
  }
}

void Job::begin_termination(const std::string& reason) {
  if (terminating_) return;
  terminating_ = true;
  term_at_ = Clock::now() + kSettle;
  kill_at_ = term_at_ + std::chrono::milliseconds(options_.grace_ms);
  std::string others;
  int count = 0;
  for (const RankProcess& process : ranks_) {
    if (!process.running) continue;
    others += (count++ == 0 ? "" : ", ") + std::to_string(process.rank);
  }
  if (count > 0) {
    message(fmt::format("{}; terminating {} {} (SIGKILL after {} ms)", reason,
                        count == 1 ? "rank" : "ranks", others, options_.grace_ms));
  }
}

void Job::reap() {
  for (RankProcess& process : ranks_) {
    if (!process.running) continue;
    int status = 0;
    const pid_t done = waitpid(process.pid, &status, WNOHANG);
    if (done != process.pid) continue;
    process.running = false;
    process.wait_status = status;
    if (!failed(status)) continue;
    // Once the job is being brought down, deaths are the consequence, not the cause.
    if (terminating_ || interrupted_by_ != 0) continue;
    message(node_name() + describe_exit(process.rank, status));
    if (nodes_) nodes_->report_failure(node_name() + describe_exit(process.rank, status));
    if (exit_code_ == 0) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    begin_termination(fmt::format("{}rank {} failed", node_name(), process.rank));
  }
}

void Job::relay(RankProcess& process, bool error_stream) {
  int& fd = error_stream ? process.err_fd : process.out_fd;
  LineRelay& relay = error_stream ? *process.err : *process.out;
  char buffer[65536];
  const ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    relay.feed(std::string_view(buffer, static_cast<size_t>(n)));
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  relay.finish();
  close(fd);
  fd = -1;
}

int Job::run() {
  // SIGCHLD, SIGINT and SIGTERM become readable events on a signalfd. They are blocked before
  // the store's thread starts so that no thread takes them the old way.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGHUP);
  sigset_t original_mask;
  pthread_sigmask(SIG_BLOCK, &handled, &original_mask);
  // A launcher started in the background by a script inherits SIGINT ignored; an ignored
  // signal never reaches the signalfd, and the ranks would inherit the ignoring too. Blocked
  // and read from the signalfd, the default action never runs here.
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) signal(signal_number, SIG_DFL);
  const int signal_fd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) {
    message(fmt::format("signalfd: {}", strerror(errno)));
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher mid-job

  RankPlace job;
  job.world = options_.ranks * options_.nnodes;
  job.local_world = options_.ranks;
  job.node = options_.node_rank;
  job.nnodes = options_.nnodes;
  std::unique_ptr<StoreServer> store;  // one node: served here, on loopback
  if (options_.nnodes > 1) {
    job.address = options_.master_addr;
    if (!form_nodes(handled, &job.store_port, &job.master_port, &job.token)) return 1;
  } else {
    const std::optional<std::string> token = random_token();
    if (!token) {
      message("cannot read a job token from /dev/urandom");
      return 1;
    }
    Status served = StoreServer::start("127.0.0.1", options_.port, *token, &store);
    if (!served.is_ok()) {
      message("cannot serve the rendezvous store: " + served.message());
      return 1;
    }
    // MASTER_PORT is for the framework's own store (torch.distributed's TCPStore binds it in
    // rank 0, as under torchrun); zrt's store has its own port, so the two never compete.
    int master_port = options_.master_port;
    Status picked = master_port == 0 ? pick_free_port(&master_port) : Status::ok();
    if (!picked.is_ok() || master_port == store->port()) {
      message(
          fmt::format("cannot find a free port for MASTER_PORT (zrt's store is on {}{}); "
                      "choose one with --master-port",
                      store->port(), picked.is_ok() ? "" : "; " + picked.message()));
      return 1;
    }
    job.address = "127.0.0.1";
    job.store_port = store->port();
    job.master_port = master_port;
    job.token = *token;
  }
  if (!open_lifeline() || !start_ranks(job, original_mask)) {
    exit_code_ = 1;
    if (nodes_) nodes_->report_failure(node_name() + "launch failed");
    begin_termination("launch failed");
  }

  // Deadlines as plain time points with flags (std::optional trips GCC's maybe-uninitialized).
  const bool has_job_deadline = options_.timeout_s > 0;
  const Clock::time_point job_deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options_.timeout_s * 1000));
  bool draining = false;
  Clock::time_point drain_until;
  std::vector<pollfd> entries;
  std::vector<std::pair<RankProcess*, bool>> owners;  // which pipe each entry is
  while (true) {
    reap();
    if (running_count() == 0 && !draining) {
      draining = true;
      drain_until = Clock::now() + kDrainAfterExit;
    }
    entries.assign(1, pollfd{signal_fd, POLLIN, 0});
    owners.assign(1, {nullptr, false});
    // Entry 1 on several nodes: the watcher's news of another node's failure.
    const size_t first_pipe = nodes_ ? 2 : 1;
    if (nodes_) {
      entries.push_back({nodes_->event_fd(), POLLIN, 0});
      owners.push_back({nullptr, false});
    }
    for (RankProcess& process : ranks_) {
      if (process.out_fd >= 0) {
        entries.push_back({process.out_fd, POLLIN, 0});
        owners.push_back({&process, false});
      }
      if (process.err_fd >= 0) {
        entries.push_back({process.err_fd, POLLIN, 0});
        owners.push_back({&process, true});
      }
    }
    if (draining && (entries.size() == first_pipe || Clock::now() >= drain_until)) break;

    bool has_wake = false;
    Clock::time_point wake = Clock::time_point::max();
    auto earliest = [&](Clock::time_point at) {
      has_wake = true;
      wake = std::min(wake, at);
    };
    if (terminating_ && !term_sent_) earliest(term_at_);
    if (terminating_ && !killed_) earliest(kill_at_);
    if (has_job_deadline && !terminating_) earliest(job_deadline);
    if (draining) earliest(drain_until);
    int timeout_ms = -1;
    if (has_wake) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left) + 1);
    }
    const int ready = poll(entries.data(), entries.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      message(fmt::format("poll: {}", strerror(errno)));
      signal_all(SIGKILL);
      return 1;
    }
    if (entries[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        const int signal = static_cast<int>(info.ssi_signo);
        if (signal == SIGCHLD) continue;  // reap() runs at the top of the loop
        if (interrupted_by_ == 0) {
          interrupted_by_ = signal;
          if (exit_code_ == 0) exit_code_ = 128 + signal;
          message(fmt::format("received {}; forwarding it to the ranks", strsignal(signal)));
        }
        signal_all(signal);
        term_sent_ = true;  // forwarded as it came
        if (!terminating_) {
          terminating_ = true;
          kill_at_ = Clock::now() + std::chrono::milliseconds(options_.grace_ms);
        }
      }
    }
    if (nodes_ && entries[1].revents != 0) {
      const std::string news = nodes_->take_event();
      if (!terminating_ && interrupted_by_ == 0) {
        if (exit_code_ == 0) exit_code_ = 1;
        if (running_count() == 0) message(news);
        begin_termination(news);
      }
    }
    for (size_t i = first_pipe; i < entries.size(); ++i) {
      if (entries[i].revents != 0) relay(*owners[i].first, owners[i].second);
    }
    const auto now = Clock::now();
    if (terminating_ && !term_sent_ && now >= term_at_) {
      term_sent_ = true;
      if (running_count() > 0) signal_all(SIGTERM);
    }
    if (terminating_ && !killed_ && now >= kill_at_ && running_count() > 0) {
      killed_ = true;
      message("grace period over; sending SIGKILL to the remaining ranks");
      signal_all(SIGKILL);
    }
    if (has_job_deadline && !terminating_ && now >= job_deadline) {
      message(fmt::format("job exceeded --timeout {} s", options_.timeout_s));
      if (exit_code_ == 0) exit_code_ = 124;
      begin_termination("timeout");
      if (nodes_) nodes_->report_failure(node_name() + "the job exceeded --timeout");
    }
  }
  for (RankProcess& process : ranks_) {
    // Pipes still open after the drain period belong to children the ranks left behind.
    if (process.out_fd >= 0) {
      process.out->finish();
      close(process.out_fd);
    }
    if (process.err_fd >= 0) {
      process.err->finish();
      close(process.err_fd);
    }
  }
  if (store) store->stop();
  if (nodes_) finish_nodes();
  close(signal_fd);
  for (int fd : {lifeline_read_, lifeline_write_}) {
    if (fd >= 0) close(fd);
  }
  return exit_code_;
}

std::string Job::node_name() const {
  if (!nodes_) return "";
  return fmt::format("node {} ({}): ", options_.node_rank, nodes_->host());
}

bool Job::form_nodes(const sigset_t& interrupting, int* store_port, int* master_port,
                     std::string* token) {
  NodeOptions node;
  node.shape = JobShape{options_.nnodes, options_.ranks};
  node.node_rank = options_.node_rank;
  node.master_addr = options_.master_addr;
  // Every node derives both ports from the same --master-port: torchrun's rule, MASTER_PORT is
  // the framework's and zrt's store takes the next port (lib/bootstrap/env_ranks.cc).
  *master_port = options_.master_port != 0 ? options_.master_port : kTorchrunDefaultPort;
  node.store_port = options_.port != 0 ? options_.port : torchrun_store_port(*master_port);
  *store_port = node.store_port;
  if (node.store_port == *master_port) {
    message(
        fmt::format("--port {} is --master-port: zrt's store and the framework's need two "
                    "ports",
                    node.store_port));
    return false;
  }
  const JobIdentity identity =
      options_.rdzv_id.empty()
          ? job_identity_from(read_environment)
          : JobIdentity{"zrt-run:" + options_.rdzv_id, "--rdzv-id " + options_.rdzv_id};
  if (identity.token.empty()) {
    // Nodes share nothing else that tells two jobs apart: without an identity, a node of
    // another job started on this port could take a node's place before the real one arrives.
    message(
        "several nodes need the job's identity, the same on every node and different from any "
        "other job's: pass --rdzv-id ID (e.g. a timestamp), or launch under Slurm (SLURM_JOB_ID) "
        "or with ZRT_JOB_TOKEN set");
    return false;
  }
  node.token = identity.token;
  node.token_source = identity.source;
  *token = identity.token;
  node.join_timeout_ms = static_cast<int64_t>(options_.join_timeout_s * 1000);
  Status formed = NodeRendezvous::form(node, interrupting, &nodes_);
  if (!formed.is_ok()) {
    message(formed.message());
    nodes_.reset();
    return false;
  }
  return true;
}

void Job::finish_nodes() {
  // A failed job's other nodes need the settle, the grace period and their drain to end.
  const int64_t wait_ms = exit_code_ != 0 ? options_.grace_ms + kSettle.count() + 10000
                                          : static_cast<int64_t>(options_.join_timeout_s * 1000);
  std::string failed_elsewhere;
  Status finished = nodes_->finish(wait_ms, &failed_elsewhere);
  if (exit_code_ == 0 && !failed_elsewhere.empty()) {
    message(failed_elsewhere);
    exit_code_ = 1;
  }
  if (!finished.is_ok()) {
    message(finished.message());
    if (exit_code_ == 0) exit_code_ = 1;
  }
}

}  // namespace

int run_job(const LaunchOptions& options) {
  Job job(options);
  return job.run();
}

}  // namespace zrt
