// manyshot-bench accuracy: the structured-prompting paper's accuracy-vs-shots protocol
// (client/eval/runner.h, the same code as `manyshot eval`) on SST-2 (preset sst2_cbu), through
// gRPC against a manyshot-server this subcommand starts (the default model, random weights unless
// its data directory holds another) or an already running one (--target=HOST:PORT).
// The same-run reference is the majority-class rate of the test inputs used: a model that has not
// learnt the task scores about that much, so accuracy / majority is the figure to read.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/bench_server.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "client/eval/presets.h"
#include "client/eval/report.h"
#include "client/eval/runner.h"
#include "grpcpp/create_channel.h"

namespace manyshot::bench {
namespace {

namespace fs = std::filesystem;

int Fail(const std::string& message) {
  std::fprintf(stderr, "manyshot-bench accuracy: %s\n", message.c_str());
  return 1;
}

}  // namespace

int RunAccuracyBench(const BenchOptions& options) {
  Report report("accuracy", options.json);
  auto preset = client::FindDatasetPreset("sst2_cbu");
  if (!preset.ok()) return Fail(preset.status().ToString());
  const fs::path sst2 = Sst2Dir(options.data_dir);
  preset->folder = sst2.filename().string();
  auto dataset = client::LoadPresetDataset(*preset, sst2.parent_path().string());
  if (!dataset.ok()) return Fail(dataset.status().ToString());

  client::EvalPlan plan;
  if (options.quick) {
    plan.shots = {4, 64};
    plan.samples = 2;
    plan.test_limit = 50;
  }
  plan.batch = 16;

  std::optional<BenchServer> server;
  std::string address = options.target;
  if (address.empty()) {
    const fs::path binary =
        options.server_binary.empty() ? DefaultServerBinary() : options.server_binary;
    if (!fs::exists(binary)) return Fail("no server binary at " + binary.string());
    const fs::path tmp = options.work_dir / ("accuracy-" + std::to_string(getpid()));
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    auto started = StartBenchServer(binary, tmp, options.threads);
    if (!started.ok()) return Fail(started.status().ToString());
    server = *started;
    address = absl::StrCat("127.0.0.1:", started->grpc_port);
  }
  client::CliContext cli;
  cli.channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  cli.server = address;
  cli.timeout_seconds = 600;
  auto progress = [](const std::string& line) {
    std::fprintf(stderr, "accuracy: %s\n", line.c_str());
  };
  auto evaluation = client::RunEvaluation(cli, *dataset, plan, progress);
  if (server.has_value()) StopBenchServer(*server);
  if (!evaluation.ok()) return Fail(evaluation.status().ToString());

  const double majority = evaluation->majority_rate;
  report.AddText("model", evaluation->model);
  report.Add("random_weights", evaluation->random_weights ? 1 : 0);
  report.Add("test_inputs", static_cast<double>(evaluation->test_examples));
  report.Add("samples", static_cast<double>(evaluation->seeds.size()));
  report.Add("majority_rate", majority);
  for (const client::EvalCell& cell : evaluation->cells) {
    const std::string name = absl::StrCat(client::ModeName(cell.mode), "_", cell.shots);
    report.Add(name + "_accuracy", cell.mean);
    report.Add(name + "_std", cell.std);
    report.Add(name + "_vs_majority", majority > 0 ? cell.mean / majority : 0);
  }
  report.Add("seconds", evaluation->seconds, "s");
  report.AddJson("evaluation",
                 nlohmann::ordered_json::parse(client::EvalReportJson(*evaluation).dump()));
  if (!options.json) std::fputs(client::FormatEvalTable(*evaluation).c_str(), stdout);
  report.Print();
  return 0;
}

}  // namespace manyshot::bench
