// The manyshot-server binary serving a T5 directory written by make-tiny-t5 (with a Unigram
// tokenizer.json): the startup log, GetServerInfo and /metrics say encoder-decoder, and the CLI
// creates, shows and queries a SAICL task and is refused a STRUCTURED one naming the mode and the
// model type; `manyshot eval` runs the SAICL paper's modes on it. (Scores against the engine:
// tests/server/t5_serving_test.cc.)
#include <signal.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "testing/harness/error_details.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"
#include "tests/integration/tiny_t5_model.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

TEST(T5ServerTest, ServesAT5DirectoryAsEncoderDecoderThroughTheCli) {
  TempDir dir;
  const fs::path model = dir.path() / "t5";
  ASSERT_NO_FATAL_FAILURE(MakeTinyT5(model));
  std::ofstream(dir.path() / "demos.tsv") << "text\tlabel\ngood movie\tpositive\ndull\tnegative\n"
                                             "fun\tpositive\nbad movie\tnegative\n";

  ServerUnderTest server(dir.path() / "data", {"--threads=1", "--model_dir=" + model.string()});
  ASSERT_TRUE(server.started()) << server.Stderr();
  EXPECT_NE(server.Stderr().find("(t5, encoder-decoder"), std::string::npos) << server.Stderr();

  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.model().model_type(), "t5");
  EXPECT_TRUE(info.model().encoder_decoder());
  // T5 holds its weights in the compute dtype; the on-disk dtype is not reported for it.
  EXPECT_EQ(info.model().held_weight_dtype(), info.backend().compute_dtype());
  EXPECT_EQ(info.model().held_weight_dtype(), "f32");
  EXPECT_EQ(info.model().weight_dtype(), "");
  const HttpResponse metrics = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_NE(
      metrics.body.find(R"(manyshot_model_info{architecture="encoder-decoder",model_type="t5"} 1)"),
      std::string::npos)
      << metrics.body;

  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {CliBinary(), "--server=" + server.address()});
    return RunCommand(args, dir.path());
  };
  // Absolute paths: the CLI runs in its own working directory.
  const std::vector<std::string> create = {"create",
                                           "--file=" + (dir.path() / "demos.tsv").string(),
                                           "--template={text}:", "--labels=negative,positive"};
  auto with = [&](const std::string& id, const std::string& mode) {
    std::vector<std::string> args = create;
    args.insert(args.begin() + 1, id);
    args.push_back("--mode=" + mode);
    return cli(args);
  };
  CommandResult refused = with("structured", "structured");
  EXPECT_NE(refused.exit_status, 0);
  EXPECT_NE(refused.err.find("FAILED_PRECONDITION"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("STRUCTURED"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("t5"), std::string::npos) << refused.err;

  CommandResult created = with("saicl", "saicl");
  ASSERT_EQ(created.exit_status, 0) << created.err;
  CommandResult shown = cli({"get", "saicl"});
  ASSERT_EQ(shown.exit_status, 0) << shown.err;
  EXPECT_NE(shown.out.find("mode          SAICL"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("first encoder layer"), std::string::npos) << shown.out;

  std::ofstream(dir.path() / "inputs.txt") << "good\nbad movie\n";
  CommandResult classified =
      cli({"classify", "saicl", "--file=" + (dir.path() / "inputs.txt").string()});
  ASSERT_EQ(classified.exit_status, 0) << classified.err;
  // One line per input: LABEL<TAB>probability<TAB>input.
  EXPECT_NE(classified.out.find("\tgood\n"), std::string::npos) << classified.out;
  EXPECT_NE(classified.out.find("\tbad movie\n"), std::string::npos) << classified.out;

  ASSERT_TRUE(server.process().Signal(SIGTERM));
  auto exit_status = server.process().Wait(kExitLimit);
  ASSERT_TRUE(exit_status.has_value());
  EXPECT_EQ(*exit_status, 0) << server.Stderr();
}

// The gauge manyshot_memory_reserved_bytes from the server's /metrics (-1 when absent).
double ReservedBytes(const ServerUnderTest& server) {
  const std::string body = HttpGet(server.metrics_port(), "/metrics").body;
  std::smatch m;
  static const std::regex re(R"(\nmanyshot_memory_reserved_bytes ([0-9.e+]+)\n)");
  return std::regex_search(body, m, re) ? std::stod(m[1].str()) : -1;
}

// What a T5 task keeps between queries (its demonstrations' first-layer q|k|v: tokens x 3 x inner
// f32 values) is counted against --memory_budget_bytes: the metric shows it, a task that does not
// fit beside the others (or a replace that needs room for both versions) is RESOURCE_EXHAUSTED
// naming the flag, and deleting a task gives its bytes back. After a restart a task's bytes are
// counted again once it is prepared (first query).
TEST(T5ServerTest, FirstLayerStatesCountAgainstTheMemoryBudget) {
  TempDir dir;
  const fs::path model = dir.path() / "t5";
  ASSERT_NO_FATAL_FAILURE(MakeTinyT5(model));
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model / "config.json"));
  const int64_t inner = config["num_heads"].get<int64_t>() * config["d_kv"].get<int64_t>();
  std::ofstream(dir.path() / "demos.tsv") << "text\tlabel\ngood movie\tpositive\ndull\tnegative\n"
                                             "fun\tpositive\nbad movie\tnegative\n";
  std::ofstream(dir.path() / "inputs.txt") << "good\n";
  auto cli_of = [&](const ServerUnderTest& server) {
    return [&](std::vector<std::string> args) {
      args.insert(args.begin(), {CliBinary(), "--server=" + server.address()});
      return RunCommand(args, dir.path());
    };
  };
  auto create = [&](auto& cli, const std::string& id) {
    return cli({"create", id, "--file=" + (dir.path() / "demos.tsv").string(),
                "--template={text}:", "--labels=negative,positive", "--mode=saicl"});
  };

  // Learn one task's bytes on a server with the default budget.
  double one_task = 0;
  {
    ServerUnderTest server(dir.path() / "sizing", {"--threads=1", "--model_dir=" + model.string()});
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto cli = cli_of(server);
    EXPECT_EQ(ReservedBytes(server), 0);
    CommandResult created = create(cli, "a");
    ASSERT_EQ(created.exit_status, 0) << created.err;
    auto stub = v1::ManyShot::NewStub(server.Channel());
    grpc::ClientContext context;
    v1::GetTaskRequest get;
    get.set_task_id("a");
    v1::Task task;
    ASSERT_TRUE(stub->GetTask(&context, get, &task).ok());
    one_task = ReservedBytes(server);
    EXPECT_EQ(one_task,
              static_cast<double>(task.stats().context_tokens()) * 3 * inner * sizeof(float));
    ASSERT_GT(one_task, 0);
  }

  // Room for one task and a half.
  const fs::path data = dir.path() / "data";
  const std::vector<std::string> flags = {
      "--threads=1", "--model_dir=" + model.string(),
      "--memory_budget_bytes=" + std::to_string(static_cast<uint64_t>(one_task * 1.5))};
  {
    ServerUnderTest server(data, flags);
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto cli = cli_of(server);
    ASSERT_EQ(create(cli, "a").exit_status, 0);
    EXPECT_EQ(ReservedBytes(server), one_task);
    CommandResult refused = create(cli, "b");
    EXPECT_NE(refused.exit_status, 0);
    EXPECT_NE(refused.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("first-layer q|k|v"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("--memory_budget_bytes"), std::string::npos) << refused.err;
    EXPECT_EQ(ReservedBytes(server), one_task);
    // A replace holds both versions until the old one is gone: refused here, saying so, and the
    // old version stays served.
    std::ofstream(dir.path() / "other.tsv") << "text\tlabel\nfun movie\tpositive\nbad\tnegative\n"
                                               "good\tpositive\ndull movie\tnegative\n";
    CommandResult replace =
        cli({"create", "a", "--file=" + (dir.path() / "other.tsv").string(),
             "--template={text}:", "--labels=negative,positive", "--mode=saicl", "--replace"});
    EXPECT_NE(replace.exit_status, 0);
    EXPECT_NE(replace.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << replace.err;
    EXPECT_NE(replace.err.find("delete the task first"), std::string::npos) << replace.err;
    EXPECT_EQ(cli({"classify", "a", "--file=" + (dir.path() / "inputs.txt").string()}).exit_status,
              0);
    EXPECT_EQ(ReservedBytes(server), one_task);
    CommandResult deleted = cli({"delete", "a"});
    ASSERT_EQ(deleted.exit_status, 0) << deleted.err;
    EXPECT_EQ(ReservedBytes(server), 0);
    CommandResult created = create(cli, "b");
    ASSERT_EQ(created.exit_status, 0) << created.err;
    EXPECT_EQ(ReservedBytes(server), one_task);
  }
  {
    ServerUnderTest server(data, flags);
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto cli = cli_of(server);
    EXPECT_EQ(ReservedBytes(server), 0);  // not prepared yet
    CommandResult classified =
        cli({"classify", "b", "--file=" + (dir.path() / "inputs.txt").string()});
    ASSERT_EQ(classified.exit_status, 0) << classified.err;
    EXPECT_EQ(ReservedBytes(server), one_task);
  }
}

// A SAICL task on --backend=cuda without a GPU (the CUDA plugin built on the SIMT emulator,
// testing/simt; GpuServerTest does the same for a decoder-only model): its scores equal the
// CPU server's, and its first-layer states count against --gpu_memory_budget_bytes.
TEST(T5ServerTest, ASaiclTaskOnTheEmulatedCudaBackendScoresAsOnTheCpu) {
#if !MANYSHOT_CUDA_ENABLED
  GTEST_SKIP() << "this build has no CUDA backend (no nvcc at configure time): nothing loads a "
                  "CUDA plugin";
#endif
  TempDir dir;
  const fs::path model = dir.path() / "t5";
  ASSERT_NO_FATAL_FAILURE(MakeTinyT5(model));
  v1::TaskSpec spec;
  spec.set_input_template("{text}:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_mode(v1::MODE_SAICL);
  std::vector<v1::Demonstration> demos;
  for (auto [text, label] : {std::pair{"good movie", "positive"},
                             {"dull", "negative"},
                             {"fun", "positive"},
                             {"bad movie", "negative"}}) {
    v1::Demonstration d;
    d.set_text(text);
    d.set_label(label);
    demos.push_back(d);
  }
  auto scores = [&](const std::vector<std::string>& flags, double* reserved) {
    ServerUnderTest server(dir.path() / ("data" + std::to_string(flags.size())), flags);
    EXPECT_TRUE(server.started()) << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());
    auto created = CreateTask(*stub, "saicl", spec, demos);
    EXPECT_TRUE(created.status.ok()) << created.status.error_message();
    grpc::ClientContext context;
    v1::ClassifyResponse response;
    EXPECT_TRUE(
        stub->Classify(&context, ClassifyRequestFor("saicl", {"good", "bad movie"}), &response)
            .ok());
    std::vector<double> out;
    for (const auto& r : response.results()) {
      for (const auto& sc : r.scores()) out.push_back(sc.sum_logprob());
    }
    *reserved = ReservedBytes(server);
    return out;
  };
  const std::vector<std::string> common = {"--threads=1", "--model_dir=" + model.string(),
                                           "--compute_dtype=f32", "--kv_dtype=f32"};
  double cpu_reserved = 0, gpu_reserved = 0;
  const std::vector<double> cpu = scores(common, &cpu_reserved);
  std::vector<double> gpu;
  {
    ScopedEmulatedCudaPlugin emulation(MANYSHOT_CUDA_SIMT_PLUGIN);
    std::vector<std::string> cuda_flags = common;
    cuda_flags.push_back("--backend=cuda");
    gpu = scores(cuda_flags, &gpu_reserved);
  }
  ASSERT_EQ(cpu.size(), 4u);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-3 * std::max(1.0, std::abs(cpu[i]))) << i;
  }
  EXPECT_GT(cpu_reserved, 0);
  EXPECT_EQ(gpu_reserved, cpu_reserved);  // the same f32 states, on the GPU's budget
}

// `manyshot eval` on a T5 server: SAICL and GROUP_FID (one task per mode) at 2 and 4 shots over 2
// samples. A random model's accuracies are checked for shape, range and determinism only; every
// task the run creates is gone afterwards; decoder-only modes are refused before any task.
TEST(T5ServerTest, EvalRunsTheSaiclPaperModes) {
  TempDir dir;
  const fs::path model = dir.path() / "t5";
  ASSERT_NO_FATAL_FAILURE(MakeTinyT5(model));
  std::ofstream(dir.path() / "train.tsv")
      << "text\tlabel\ngood movie\tpositive\ndull\tnegative\nfun\tpositive\nbad movie\tnegative\n"
         "good fun\tpositive\ndull movie\tnegative\nfun movie\tpositive\nbad\tnegative\n";
  std::ofstream(dir.path() / "test.tsv")
      << "text\tlabel\ngood\tpositive\nbad dull\tnegative\nmovie fun\tpositive\ndull "
         "bad\tnegative\n";

  ServerUnderTest server(dir.path() / "data", {"--threads=1", "--model_dir=" + model.string()});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {CliBinary(), "--server=" + server.address()});
    return RunCommand(args, dir.path(), std::chrono::seconds(120));
  };
  const std::vector<std::string> eval = {"--json",
                                         "eval",
                                         "--train_file=" + (dir.path() / "train.tsv").string(),
                                         "--test_file=" + (dir.path() / "test.tsv").string(),
                                         "--template={text}:",
                                         "--labels=negative,positive",
                                         "--shots=2,4",
                                         "--samples=2"};
  auto with_modes = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = eval;
    args.insert(args.end(), extra.begin(), extra.end());
    return cli(args);
  };

  CommandResult first = with_modes({"--modes=saicl,group_fid", "--groups=3"});
  ASSERT_EQ(first.exit_status, 0) << first.err;
  const nlohmann::json report = nlohmann::json::parse(first.out);
  EXPECT_EQ(report["modes"], (nlohmann::json{"saicl", "group_fid"}));
  EXPECT_EQ(report["shots"], (nlohmann::json{2, 4}));
  EXPECT_EQ(report["seeds"], (nlohmann::json{1, 2}));
  EXPECT_EQ(report["dataset"]["test_examples"], 4);
  ASSERT_EQ(report["results"].size(), 4u);
  const std::vector<std::pair<std::string, int>> cells = {
      {"saicl", 2}, {"saicl", 4}, {"group_fid", 2}, {"group_fid", 4}};
  for (size_t i = 0; i < cells.size(); ++i) {
    const nlohmann::json& cell = report["results"][i];
    EXPECT_EQ(cell["mode"], cells[i].first);
    EXPECT_EQ(cell["shots"], cells[i].second);
    // Every T5 mode reads all of the task's demonstrations.
    EXPECT_EQ(cell["demonstrations_used"], (nlohmann::json{cells[i].second, cells[i].second}));
    ASSERT_EQ(cell["accuracy"].size(), 2u);
    for (const nlohmann::json& a : cell["accuracy"]) {
      // Four test inputs: a multiple of 1/4 in [0, 1].
      EXPECT_GE(a.get<double>(), 0.0);
      EXPECT_LE(a.get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(a.get<double>() * 4, std::round(a.get<double>() * 4));
    }
    EXPECT_GE(cell["mean"].get<double>(), 0.0);
    EXPECT_LE(cell["mean"].get<double>(), 1.0);
  }
  // One task per (sample, shots, mode), each named in the progress and deleted afterwards.
  std::set<std::string> ids;
  const std::regex task("encoding task (eval-[A-Za-z0-9_-]+)");
  for (auto it = std::sregex_iterator(first.err.begin(), first.err.end(), task);
       it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[1]);
  }
  EXPECT_EQ(ids.size(), 8u) << first.err;
  CommandResult list = cli({"--json", "list"});
  ASSERT_EQ(list.exit_status, 0) << list.err;
  const nlohmann::json tasks = nlohmann::json::parse(list.out);
  EXPECT_TRUE(!tasks.contains("tasks") || tasks["tasks"].empty()) << list.out;

  // The same seeds give the same report.
  CommandResult second = with_modes({"--modes=saicl,group_fid", "--groups=3"});
  ASSERT_EQ(second.exit_status, 0) << second.err;
  EXPECT_EQ(nlohmann::json::parse(second.out), report);

  // Decoder-only modes, and GROUP_FID without G, are refused before any task is created.
  CommandResult structured = with_modes({"--modes=saicl,structured"});
  EXPECT_EQ(structured.exit_status, 1);
  EXPECT_NE(structured.err.find("FAILED_PRECONDITION"), std::string::npos) << structured.err;
  EXPECT_NE(structured.err.find("structured"), std::string::npos) << structured.err;
  EXPECT_NE(structured.err.find("t5"), std::string::npos) << structured.err;
  EXPECT_EQ(structured.err.find("encoding task"), std::string::npos) << structured.err;
  CommandResult no_groups = with_modes({"--modes=group_fid"});
  EXPECT_EQ(no_groups.exit_status, 1);
  EXPECT_NE(no_groups.err.find("--groups"), std::string::npos) << no_groups.err;
  EXPECT_EQ(no_groups.err.find("encoding task"), std::string::npos) << no_groups.err;

  ASSERT_TRUE(server.process().Signal(SIGTERM));
  auto exit_status = server.process().Wait(kExitLimit);
  ASSERT_TRUE(exit_status.has_value());
  EXPECT_EQ(*exit_status, 0) << server.Stderr();
}

TEST(T5ServerTest, AnEngineRefusalOfATaskOptionNamesTheSpecField) {
  TempDir dir;
  const fs::path model = dir.path() / "t5";
  ASSERT_NO_FATAL_FAILURE(MakeTinyT5(model));
  ServerUnderTest server(dir.path() / "data", {"--threads=1", "--model_dir=" + model.string()});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  v1::TaskSpec spec;
  spec.set_input_template("{text}:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_mode(v1::MODE_GROUP_FID);
  spec.set_groups(9);  // more groups than the 4 demonstrations
  auto refused = CreateTask(*stub, "grouped", spec, Sst2Demonstrations(4));
  ASSERT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.status.error_message().rfind("spec.groups 9", 0), 0u)
      << refused.status.error_message();
  EXPECT_EQ(DetailsOf(refused.status).fields, std::vector<std::string>{"spec.groups"});
}

}  // namespace
}  // namespace manyshot::testing
