// Tests that need a second process (tests/cache/support/cache_test_helper_main.cc):
// - a restart: the DB is closed and reopened by a new process, which serves identical scores with
//   zero encodes;
// - crashes: a writer SIGKILLed at 50 deterministic random points while writing tasks never leaves
//   a task that is ready but incomplete.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "cache/context_cache.h"
#include "engine/prompting/icl_cache_key.h"
#include "engine/task/cache_key.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

std::string RunHelper(const std::string& args, int* exit_code) {
  std::string command = std::string(MANYSHOT_CACHE_TEST_HELPER) + " " + args;
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  if (!pipe) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  *exit_code = pclose(pipe);
  return out;
}

class RestartTest : public ::testing::TestWithParam<DType> {};

TEST_P(RestartTest, NewProcessServesIdenticalScoresWithZeroEncodes) {
  const DType dtype = GetParam();
  const auto dir = FreshTempDir("restart");
  std::ostringstream expected;
  {
    ContextCacheOptions options;
    options.kv_dtype = dtype;
    auto cache = ContextCache::Open(dir, options, TestBackend());
    ASSERT_TRUE(cache.ok()) << cache.status();
    for (uint64_t seed : {0, 7}) {  // two tasks: given order and shuffled
      auto task = Sst2Task(seed);
      TaskRecord record;
      record.task_id = "sst2-" + std::to_string(seed);
      record.spec = "sst2:" + std::to_string(seed);
      record.kv_key = CacheKeyForTask(GoldenModel("gpt2"), Gpt2Tokenizer(), *task, dtype);
      auto pinned = (*cache)->CreateTask(record, [&] { return task->EncodeContext(); });
      ASSERT_TRUE(pinned.ok()) << pinned.status();
      expected << "task " << record.task_id << "\n";
      char line[64];
      for (double s : ScoreSst2(*task, **pinned)) {
        std::snprintf(line, sizeof(line), "%a\n", s);
        expected << line;
      }
    }
    EXPECT_EQ((*cache)->Stats().encodes, 2u);
  }  // closed: the new process opens the DB from disk
  int code = -1;
  const std::string out =
      RunHelper("score " + dir.string() + (dtype == DType::kBF16 ? " bf16" : " f32"), &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out, expected.str() + "encodes 0\ndisk_hits 2\ncorruptions 0\n");
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RestartTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& p) { return std::string(DTypeName(p.param)); });

// Starts `cache_test_helper write DB SEED`, waits until it has opened the DB, lets it write for
// `delay`, then SIGKILLs it.
void WriteAndKill(const std::filesystem::path& db, uint64_t seed, std::chrono::microseconds delay) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string seed_text = std::to_string(seed);
  const std::string db_text = db.string();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl(MANYSHOT_CACHE_TEST_HELPER, MANYSHOT_CACHE_TEST_HELPER, "write", db_text.c_str(),
          seed_text.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  char ready[6] = {};
  const ssize_t n = read(fds[0], ready, sizeof(ready));
  close(fds[0]);
  EXPECT_EQ(n, 6) << "writer " << seed << " did not start";
  std::this_thread::sleep_for(delay);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "writer " << seed << " exited on its own, status " << status;
}

TEST(CrashTest, SigkillWhileWritingNeverLeavesAReadyTaskIncomplete) {
  constexpr int kRuns = 50, kRunsPerDb = 10;
  std::filesystem::path db;
  int total_tasks = 0, recovered = 0;
  uint64_t rng = 0x5eed;
  for (int run = 0; run < kRuns; ++run) {
    if (run % kRunsPerDb == 0) {
      if (!db.empty()) std::filesystem::remove_all(db);
      db = FreshTempDir("crash");  // each DB takes 10 crashes, so recovery runs on top of recovery
    }
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    const auto delay = std::chrono::microseconds((rng >> 33) % 50001);  // 0-50 ms, deterministic
    WriteAndKill(db, static_cast<uint64_t>(run + 1), delay);

    ContextCacheOptions options = CrashTestOptions();
    std::vector<std::string> log;
    options.log = [&](LogLevel, const std::string& m) { log.push_back(m); };
    auto cache = ContextCache::Open(db, options, TestBackend());
    ASSERT_TRUE(cache.ok()) << "run " << run << ": " << cache.status();
    recovered += static_cast<int>((*cache)->disk().stats().staged_writes_recovered);
    for (const TaskRecord& record : (*cache)->ListTasks()) {
      SyntheticSpec spec;
      ASSERT_TRUE(DecodeSyntheticSpec(record.spec, &spec)) << record.spec;
      // Every ready task's KV must load complete and verified: no encoder is given.
      auto pinned = (*cache)->Acquire(record.kv_key, nullptr);
      ASSERT_TRUE(pinned.ok()) << "run " << run << " task " << record.task_id << ": "
                               << pinned.status();
      ASSERT_EQ(CompareContexts(**pinned,
                                SyntheticContext(TestBackend(), spec.seed, spec.layers, spec.tokens,
                                                 spec.kv_heads, spec.head_dim),
                                TestBackend()),
                "")
          << "run " << run << " task " << record.task_id;
    }
    const CacheStats stats = (*cache)->Stats();
    EXPECT_EQ(stats.corruptions_detected, 0u) << "run " << run;
    EXPECT_EQ(stats.encodes, 0u);
    total_tasks += static_cast<int>(stats.tasks);
  }
  std::filesystem::remove_all(db);
  std::printf(
      "[ info ] %d SIGKILLed writers; %d ready tasks verified after them (cumulative per "
      "DB); %d uncommitted staged writes discarded by recovery\n",
      kRuns, total_tasks, recovered);
  EXPECT_GT(total_tasks, kRuns);  // the kills did land mid-stream, after real writes
}

}  // namespace
}  // namespace manyshot::testing
