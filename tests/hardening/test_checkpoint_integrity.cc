// Checkpoints whose every byte is checked, and folders one job owns: single-bit flips of the
// manifest, swapped piece entries, a shard of another save, two jobs saving into one folder
// (and a stale lock), FIFOs where files are expected. One rank; the lock test forks a second
// "job" before anything starts threads.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "zero/checkpoint/checksum.h"
#include "zero/checkpoint/manifest.h"
#include "zrt/zrt.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::string temp_dir(const char* tag) {
  std::string pattern = std::string("/tmp/zrt-integrity-") + tag + "-XXXXXX";
  return mkdtemp(pattern.data());
}

zrt_status_t sgd(const zrt_optimizer_args_t* a, void*) {
  for (size_t i = 0; i < a->count; ++i) a->master[i] -= 0.25f * a->grad[i];
  return ZRT_SUCCESS;
}

// A one-rank manager with four parameters, two of them the same size (so that their piece
// entries can be swapped without breaking the manifest's structure), after `steps` steps.
struct Job {
  zrt_comm_t comm = nullptr;
  zrt_partition_t pm = nullptr;
  std::vector<int> params;
  std::vector<size_t> numel = {64, 64, 40, 24};

  void start(int steps) {
    ASSERT_EQ(zrt_comm_init_env(nullptr, &comm), ZRT_SUCCESS) << zrt_last_error();
    zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
    config.stage = 2;
    config.optimizer_slots = 0;
    config.bucket_bytes = 4096;
    ASSERT_EQ(zrt_partition_create(comm, &config, &pm), ZRT_SUCCESS) << zrt_last_error();
    int unit = 0;
    ASSERT_EQ(zrt_partition_add_unit(pm, "layer", &unit), ZRT_SUCCESS);
    const char* names[] = {"a.weight", "b.weight", "c.weight", "d.bias"};
    for (size_t p = 0; p < numel.size(); ++p) {
      int param = 0;
      ASSERT_EQ(zrt_partition_add_param(pm, unit, names[p], numel[p], 0, &param), ZRT_SUCCESS);
      params.push_back(param);
    }
    ASSERT_EQ(zrt_partition_finalize(pm), ZRT_SUCCESS) << zrt_last_error();
    for (size_t p = 0; p < numel.size(); ++p) {
      std::vector<float> values(numel[p]);
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(p * 1000 + i);
      ASSERT_EQ(zrt_partition_load_param(pm, params[p], values.data(), ZRT_F32), ZRT_SUCCESS)
          << zrt_last_error();
    }
    for (int s = 0; s < steps; ++s) {
      ASSERT_EQ(zrt_partition_fetch(pm, 0), ZRT_SUCCESS);
      for (size_t p = 0; p < numel.size(); ++p) {
        void* grad = nullptr;
        ASSERT_EQ(zrt_partition_grad_data(pm, params[p], &grad), ZRT_SUCCESS);
        for (size_t i = 0; i < numel[p]; ++i) static_cast<float*>(grad)[i] = 1.0f;
      }
      ASSERT_EQ(zrt_partition_grad_ready(pm, 0), ZRT_SUCCESS);
      ASSERT_EQ(zrt_partition_release(pm, 0), ZRT_SUCCESS);
      ASSERT_EQ(zrt_partition_step(pm, sgd, nullptr), ZRT_SUCCESS) << zrt_last_error();
    }
  }
  void stop() {
    if (pm != nullptr) {
      EXPECT_EQ(zrt_partition_destroy(pm), ZRT_SUCCESS);
    }
    if (comm != nullptr) {
      EXPECT_EQ(zrt_comm_destroy(comm), ZRT_SUCCESS);
    }
    pm = nullptr;
    comm = nullptr;
  }
};

// The manifest's checksum recomputed after an edit, as a tool that rewrites it would.
std::string reseal(nlohmann::json j) {
  j.erase("manifest_checksum");
  const std::string canonical = j.dump();
  j["manifest_checksum"] =
      zrt::checksum_to_hex(zrt::checksum_of(canonical.data(), canonical.size()));
  return j.dump(1) + "\n";
}

std::string shard_name(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) == 0) return name;
  }
  return "";
}

// Another job (a process forked before anything here started threads: this test runs first) saves
// into a folder and keeps running: this job's save there is refused up front, naming the owner;
// once the owner is killed, its lock is stale and the save goes through.
TEST(CheckpointIntegrity, TwoJobsInOneFolderTheSecondIsRefused) {
  const std::string dir = temp_dir("lock");
  const std::string ready = dir + ".ready";
  const pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    Job job;
    job.start(1);
    if (zrt_partition_save(job.pm, dir.c_str()) != ZRT_SUCCESS) _exit(3);
    spit(ready, "saved");
    sleep(60);
    _exit(0);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(ready) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(ready)) << "the other job did not save";
  Job job;
  job.start(1);
  EXPECT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_INVALID_USAGE);
  const std::string message = zrt_last_error();
  EXPECT_TRUE(contains(message, "belongs to another job")) << message;
  EXPECT_TRUE(contains(message, "pid " + std::to_string(other))) << message;
  EXPECT_TRUE(contains(message, "zrt-checkpoint.lock")) << message;
  // Its checkpoint is intact: it still loads here (loading takes no lock).
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
  EXPECT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  // Saving again into its own folder is fine; a garbled lock is refused with what to do.
  EXPECT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  const std::string other_dir = temp_dir("garbled");
  spit(other_dir + "/zrt-checkpoint.lock", "{not json");
  EXPECT_EQ(zrt_partition_save(job.pm, other_dir.c_str()), ZRT_INVALID_USAGE);
  EXPECT_TRUE(contains(zrt_last_error(), "remove the file")) << zrt_last_error();
  job.stop();
  fs::remove_all(dir);
  fs::remove_all(other_dir);
  fs::remove(ready);
}

TEST(CheckpointIntegrity, EverySingleBitFlipOfTheManifestIsRefused) {
  const std::string dir = temp_dir("flip");
  Job job;
  job.start(3);
  ASSERT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  const std::string good = slurp(dir + "/manifest.json");
  zrt::Manifest reference;
  ASSERT_TRUE(zrt::parse_manifest(good, "good", &reference).is_ok());
  const std::string reference_text = zrt::serialize_manifest(reference);
  EXPECT_EQ(reference.step, 3);
  // Every bit of the file, through the parser (a pure function): a flip is refused, or (in
  // whitespace that stays whitespace) changes nothing.
  size_t flips = 0, refused = 0, harmless = 0;
  for (size_t byte = 0; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      zrt::Manifest m;
      const zrt::Status status = zrt::parse_manifest(bad, "flipped", &m);
      ++flips;
      if (!status.is_ok()) {
        ++refused;
        continue;
      }
      ASSERT_EQ(zrt::serialize_manifest(m), reference_text)
          << "a flip of bit " << bit << " of byte " << byte << " loaded a different manifest";
      // JSON's whitespace (space, tab, newline, carriage return) is the only place a flip may
      // leave the manifest as it was.
      const auto json_space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
      };
      EXPECT_TRUE(json_space(good[byte]) && json_space(bad[byte]))
          << "a flip of bit " << bit << " of byte " << byte << " ('" << good[byte]
          << "') was accepted outside whitespace";
      ++harmless;
    }
  }
  std::fprintf(stderr, "manifest bit flips: %zu, refused %zu, harmless (whitespace) %zu\n", flips,
               refused, harmless);
  // A sample of them through zrt_partition_load: refused, naming the manifest, nothing changed.
  for (size_t k = 0; k < 40; ++k) {
    std::string bad = good;
    const size_t byte = (k * 7919) % good.size();
    bad[byte] = static_cast<char>(bad[byte] ^ (1 << (k % 8)));
    zrt::Manifest m;
    if (zrt::parse_manifest(bad, "flipped", &m).is_ok()) continue;
    spit(dir + "/manifest.json", bad);
    EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(zrt_last_error(), "manifest.json")) << zrt_last_error();
  }
  int64_t step = -1;
  EXPECT_EQ(zrt_partition_get_step(job.pm, &step), ZRT_SUCCESS);
  EXPECT_EQ(step, 3);
  job.stop();
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, SwappedPieceEntriesAreRefused) {
  const std::string dir = temp_dir("swap");
  Job job;
  job.start(1);
  ASSERT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  const std::string good = slurp(dir + "/manifest.json");
  nlohmann::json j = nlohmann::json::parse(good);
  auto& pieces = j["files"][0]["trainable"];
  ASSERT_GE(pieces.size(), 2u);
  // a.weight and b.weight have 64 elements each: swapping their entries keeps every count.
  size_t ia = pieces.size(), ib = pieces.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i][0] == 0) ia = i;
    if (pieces[i][0] == 1) ib = i;
  }
  ASSERT_LT(ia, pieces.size());
  ASSERT_LT(ib, pieces.size());
  std::swap(pieces[ia], pieces[ib]);
  // As edited (the manifest's own checksum no longer matches).
  spit(dir + "/manifest.json", j.dump(1) + "\n");
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "manifest_checksum")) << zrt_last_error();
  // Resealed, as a tool rewriting manifests would: the shard's identity record refuses it.
  spit(dir + "/manifest.json", reseal(j));
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "does not hold what the manifest says"))
      << zrt_last_error();
  EXPECT_TRUE(contains(zrt_last_error(), shard_name(dir))) << zrt_last_error();
  // The intact manifest still loads.
  spit(dir + "/manifest.json", good);
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  job.stop();
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, AShardOfAnotherSaveIsRefused) {
  const std::string early = temp_dir("early"), late = temp_dir("late");
  Job job;
  job.start(1);
  ASSERT_EQ(zrt_partition_save(job.pm, early.c_str()), ZRT_SUCCESS) << zrt_last_error();
  ASSERT_EQ(zrt_partition_fetch(job.pm, 0), ZRT_SUCCESS);
  for (size_t p = 0; p < job.numel.size(); ++p) {
    void* grad = nullptr;
    ASSERT_EQ(zrt_partition_grad_data(job.pm, job.params[p], &grad), ZRT_SUCCESS);
    for (size_t i = 0; i < job.numel[p]; ++i) static_cast<float*>(grad)[i] = 2.0f;
  }
  ASSERT_EQ(zrt_partition_grad_ready(job.pm, 0), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_release(job.pm, 0), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_step(job.pm, sgd, nullptr), ZRT_SUCCESS);
  ASSERT_EQ(zrt_partition_save(job.pm, late.c_str()), ZRT_SUCCESS) << zrt_last_error();
  // The late shard under the early name, with the early manifest updated to its size and
  // checksum and resealed: only the identity record (step 2, not 1) tells them apart.
  const std::string early_name = shard_name(early), late_name = shard_name(late);
  const std::string late_shard = slurp(late + "/" + late_name);
  spit(early + "/" + early_name, late_shard);
  nlohmann::json j = nlohmann::json::parse(slurp(early + "/manifest.json"));
  j["files"][0]["checksum"] =
      zrt::checksum_to_hex(zrt::checksum_of(late_shard.data(), late_shard.size()));
  spit(early + "/manifest.json", reseal(j));
  EXPECT_EQ(zrt_partition_load(job.pm, early.c_str()), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "written at step 2, the manifest is of step 1"))
      << zrt_last_error();
  job.stop();
  fs::remove_all(early);
  fs::remove_all(late);
}

TEST(CheckpointIntegrity, FifosAreRefusedNotWaitedOn) {
  alarm(60);  // a regression would block in open() forever: fail loudly instead
  const std::string dir = temp_dir("fifo");
  Job job;
  job.start(1);
  ASSERT_EQ(mkfifo((dir + "/manifest.json").c_str(), 0600), 0);
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "FIFO")) << zrt_last_error();
  zrt_partition_config_t config = ZRT_PARTITION_CONFIG_INIT;
  ASSERT_EQ(mkfifo((dir + "/config.json").c_str(), 0600), 0);
  EXPECT_EQ(zrt_partition_config_load((dir + "/config.json").c_str(), &config),
            ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "FIFO")) << zrt_last_error();
  EXPECT_EQ(zrt_partition_config_load("/dev/zero", &config), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "character device")) << zrt_last_error();
  // A shard that became a FIFO.
  fs::remove(dir + "/manifest.json");
  ASSERT_EQ(zrt_partition_save(job.pm, dir.c_str()), ZRT_SUCCESS) << zrt_last_error();
  const std::string shard = dir + "/" + shard_name(dir);
  fs::remove(shard);
  ASSERT_EQ(mkfifo(shard.c_str(), 0600), 0);
  EXPECT_EQ(zrt_partition_load(job.pm, dir.c_str()), ZRT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(zrt_last_error(), "FIFO")) << zrt_last_error();
  alarm(0);
  job.stop();
  fs::remove_all(dir);
}

}  // namespace
