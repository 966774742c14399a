// manyshot eval: the structured-prompting paper's protocol against a running server (see
// runner.h for the protocol, presets.h for the datasets).
#include <unistd.h>
#include <cstdlib>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/eval/command.h"
#include "client/eval/plot.h"
#include "client/eval/report.h"
#include "client/eval/runner.h"
#include "client/flags.h"

ABSL_FLAG(std::string, preset, "",
          "eval: dataset preset (files, template, label words), e.g. sst2_cbu; 'list' lists them");
ABSL_FLAG(std::string, dataset, "",
          "eval: a dataset folder such as ../shared/datasets/sst2_cbu (its name is the preset)");
ABSL_FLAG(std::string, datasets_dir, "",
          "eval: the directory holding the preset dataset folders (default: $MANYSHOT_DATASETS, "
          "else ../shared/datasets)");
ABSL_FLAG(std::string, train_file, "",
          "eval: without a preset, the labelled jsonl/csv/tsv file demonstrations are drawn from "
          "(with --template, --labels or --label_map, --text_field, --label_field, --field)");
ABSL_FLAG(std::string, test_file, "",
          "eval: the labelled test file (default: every tenth example of --train_file)");
ABSL_FLAG(std::string, shots, "",
          "eval: comma-separated demonstration counts (default 1,4,16,64,256,1000, capped at the "
          "training split)");
ABSL_FLAG(std::string, modes, "structured,parallel,conventional",
          "eval: comma-separated modes; decoder-only models: structured, parallel (rescale factor "
          "1), conventional (as many demonstrations as fit one window); encoder-decoder (T5) "
          "models: conventional, saicl, fid, ensemble, group_fid (with --groups=G)");
ABSL_FLAG(int, samples, 3, "eval: demonstration samples (seeds --seed, --seed+1, ...)");
ABSL_FLAG(uint64_t, seed, 1, "eval: first sample's seed; also orders the test split");
ABSL_FLAG(int, test_limit, 200, "eval: most test inputs (0: the whole test split)");
ABSL_FLAG(std::string, plot, "", "eval: write accuracy vs shots as a PNG to this path");

namespace manyshot::client {
namespace {

std::atomic<bool> interrupted{false};

extern "C" void OnInterrupt(int) { interrupted.store(true); }

// --datasets_dir, else $MANYSHOT_DATASETS, else ../shared/datasets (beside a checkout).
std::string DatasetsDir() {
  std::string dir = absl::GetFlag(FLAGS_datasets_dir);
  if (dir.empty()) {
    const char* env = std::getenv("MANYSHOT_DATASETS");
    dir = env != nullptr && *env != '\0' ? env : "../shared/datasets";
  }
  return dir;
}

void ListPresets(const std::string& datasets_dir) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(datasets_dir, error);
  std::printf("datasets directory: %s (--datasets_dir or $MANYSHOT_DATASETS)\n",
              (error ? std::filesystem::path(datasets_dir) : absolute).c_str());
  std::printf("%-16s %-5s %-16s %-26s %-27s %s\n", "PRESET", "DATA", "FOLDER", "TRAIN", "TEST",
              "LABELS");
  int with_data = 0;
  for (const DatasetPreset& p : DatasetPresets()) {
    std::string labels;
    for (const std::string& label : p.labels)
      absl::StrAppend(&labels, labels.empty() ? "" : "/", label);
    const bool present = std::filesystem::is_regular_file(
        std::filesystem::path(datasets_dir) / p.folder / p.train_file, error);
    with_data += present;
    std::printf("%-16s %-5s %-16s %-26s %-27s %s\n", p.name.c_str(), present ? "yes" : "no",
                p.folder.c_str(), p.train_file.c_str(),
                p.test_file.empty() ? "(every 10th held out)" : p.test_file.c_str(),
                labels.c_str());
  }
  if (with_data == 0) {
    std::printf(
        "no preset has its files here: the presets read public datasets, which are not part of "
        "the repository; point --datasets_dir at a copy, or evaluate your own labelled file with "
        "--train_file=PATH --template=T --labels=...\n");
  }
}

absl::StatusOr<std::vector<int64_t>> ParseShots(const std::string& value) {
  std::vector<int64_t> shots;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shots: '", std::string(part), "' is not a positive integer"));
    }
    shots.push_back(n);
  }
  if (shots.empty()) return absl::InvalidArgumentError("--shots: no shot counts");
  return shots;
}

absl::StatusOr<std::vector<v1::Mode>> ParseModes(const std::string& value) {
  std::vector<v1::Mode> modes;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    auto mode = ParseMode(std::string(part));
    if (!mode.ok() || *mode == v1::MODE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--modes: '", std::string(part),
          "' is not structured, parallel or conventional (decoder-only models), or saicl, fid, "
          "ensemble or group_fid (encoder-decoder models)"));
    }
    modes.push_back(*mode);
  }
  if (modes.empty()) return absl::InvalidArgumentError("--modes: no modes");
  return modes;
}

absl::StatusOr<EvalDataset> LoadDataset(const CliContext& cli) {
  std::string preset_name = absl::GetFlag(FLAGS_preset);
  std::string datasets_dir = DatasetsDir();
  const std::string dataset_dir = absl::GetFlag(FLAGS_dataset);
  if (!dataset_dir.empty()) {
    std::filesystem::path folder = std::filesystem::path(dataset_dir).lexically_normal();
    if (folder.filename().empty()) folder = folder.parent_path();
    if (preset_name.empty()) preset_name = folder.filename().string();
    datasets_dir = folder.parent_path().empty() ? "." : folder.parent_path().string();
  }
  const std::string train_file = absl::GetFlag(FLAGS_train_file);
  if (!preset_name.empty()) {
    if (!train_file.empty()) {
      return absl::InvalidArgumentError(
          "give either a preset (--preset/--dataset) or --train_file");
    }
    auto preset = FindDatasetPreset(preset_name);
    if (!preset.ok()) return preset.status();
    return LoadPresetDataset(*preset, datasets_dir);
  }
  if (train_file.empty()) {
    return absl::InvalidArgumentError(
        "give --preset=NAME (manyshot eval --preset=list), --dataset=DIR or --train_file=PATH");
  }
  EvalFiles files;
  files.train_path = train_file;
  files.test_path = absl::GetFlag(FLAGS_test_file);
  if (!absl::GetFlag(FLAGS_format).empty()) {
    auto format = ParseExampleFormat(absl::GetFlag(FLAGS_format));
    if (!format.ok()) return format.status();
    files.format = *format;
  }
  files.input_template = UnescapeFlagValue(absl::GetFlag(FLAGS_template));
  files.fields.text_field = absl::GetFlag(FLAGS_text_field);
  files.fields.label_field = absl::GetFlag(FLAGS_label_field);
  files.fields.labels = absl::GetFlag(FLAGS_labels);
  auto fields = ParseFieldMappings(cli.Repeated("field"));
  if (!fields.ok()) return fields.status();
  files.fields.fields = *fields;
  std::vector<std::string> placeholders = TemplatePlaceholders(files.input_template);
  if (placeholders.size() > 1) {
    for (const std::string& name : placeholders) files.fields.fields.emplace(name, name);
  }
  auto label_map = ParseKeyValueList(absl::GetFlag(FLAGS_label_map), "label_map");
  if (!label_map.ok()) return label_map.status();
  files.fields.label_map = *label_map;
  return LoadFileDataset(files);
}

absl::StatusOr<EvalPlan> PlanFromFlags() {
  EvalPlan plan;
  if (!absl::GetFlag(FLAGS_shots).empty()) {
    auto shots = ParseShots(absl::GetFlag(FLAGS_shots));
    if (!shots.ok()) return shots.status();
    plan.shots = *shots;
    plan.shots_explicit = true;
  }
  auto modes = ParseModes(absl::GetFlag(FLAGS_modes));
  if (!modes.ok()) return modes.status();
  plan.modes = *modes;
  plan.samples = absl::GetFlag(FLAGS_samples);
  if (plan.samples < 1) return absl::InvalidArgumentError("--samples must be >= 1");
  plan.first_seed = absl::GetFlag(FLAGS_seed);
  if (absl::GetFlag(FLAGS_test_limit) < 0) {
    return absl::InvalidArgumentError("--test_limit must be >= 0");
  }
  plan.test_limit = static_cast<size_t>(absl::GetFlag(FLAGS_test_limit));
  plan.group_length = absl::GetFlag(FLAGS_group_length);
  plan.groups = absl::GetFlag(FLAGS_groups);
  plan.max_query_tokens = absl::GetFlag(FLAGS_max_query_tokens);
  if (auto v = absl::GetFlag(FLAGS_answer_template)) plan.answer_template = UnescapeFlagValue(*v);
  if (auto v = absl::GetFlag(FLAGS_separator)) plan.separator = UnescapeFlagValue(*v);
  if (absl::GetFlag(FLAGS_batch) < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  plan.batch = static_cast<size_t>(absl::GetFlag(FLAGS_batch));
  return plan;
}

// Ctrl-C / SIGTERM: cancel the call in flight, delete the tasks, exit 130. The handler is reset
// after it runs, so a second Ctrl-C ends the process at once (leaving tasks behind).
void CancelOnInterrupt() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  action.sa_flags = SA_RESETHAND;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// The runner's progress on stderr: one line rewritten in place on a terminal, else a log line
// per step.
class ProgressLine {
 public:
  ProgressLine() : interactive_(isatty(fileno(stderr)) != 0) {}
  void Show(const std::string& line) {
    if (interactive_) {
      std::fprintf(
          stderr, "\r%s%s", line.c_str(),
          std::string(last_width_ > line.size() ? last_width_ - line.size() : 0, ' ').c_str());
      last_width_ = line.size();
    } else {
      std::fprintf(stderr, "eval: %s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  // Ends the line being rewritten, so that what follows starts on its own.
  void Finish() {
    if (interactive_ && last_width_ > 0) std::fputs("\n", stderr);
  }

 private:
  const bool interactive_;
  size_t last_width_ = 0;
};

// The plot (--plot), then the table or the JSON on stdout.
int PrintReport(const CliContext& cli, const EvalReport& report) {
  const std::string plot = absl::GetFlag(FLAGS_plot);
  if (!plot.empty()) {
    absl::Status written = WriteEvalPlot(report, plot);
    if (!written.ok()) return ReportUsageError("eval", std::string(written.message()));
  }
  if (cli.json) {
    std::printf("%s\n", EvalReportJson(report).dump(2).c_str());
  } else {
    std::fputs(FormatEvalTable(report).c_str(), stdout);
    std::printf("\n%.1f s%s\n", report.seconds,
                plot.empty() ? "" : absl::StrCat(", plot in ", plot).c_str());
  }
  return 0;
}

}  // namespace

int RunEval(const CliContext& cli) {
  const std::string cmd = "eval";
  if (!cli.args.empty()) return ReportUsageError(cmd, "takes no positional arguments");
  if (absl::GetFlag(FLAGS_preset) == "list") {
    ListPresets(DatasetsDir());
    return 0;
  }
  auto plan = PlanFromFlags();
  if (!plan.ok()) return ReportUsageError(cmd, std::string(plan.status().message()));
  auto dataset = LoadDataset(cli);
  if (!dataset.ok()) return ReportUsageError(cmd, std::string(dataset.status().message()));
  auto shots = ResolveShots(*plan, dataset->train.size(), dataset->name);
  if (!shots.ok()) return ReportUsageError(cmd, std::string(shots.status().message()));
  CancelOnInterrupt();
  ProgressLine progress;
  auto report = RunEvaluation(
      cli, *dataset, *plan, [&](const std::string& line) { progress.Show(line); }, &interrupted);
  progress.Finish();
  if (!report.ok()) {
    std::fprintf(stderr, "manyshot: eval: %s: %s\n",
                 absl::StatusCodeToString(report.status().code()).c_str(),
                 std::string(report.status().message()).c_str());
    if (report.status().code() == absl::StatusCode::kCancelled && interrupted.load()) return 130;
    return 1;
  }
  return PrintReport(cli, *report);
}

}  // namespace manyshot::client
