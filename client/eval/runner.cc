#include "client/eval/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/classify_stream.h"
#include "client/request_builder.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {
namespace {

absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

// Cancels the calls in flight once `*cancelled` turns true (Ctrl-C): a blocked Read() returns.
class CancelWatch {
 public:
  explicit CancelWatch(const std::atomic<bool>* cancelled) : cancelled_(cancelled) {
    if (cancelled_ == nullptr) return;
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!done_) {
        if (cancelled_->load() && call_ != nullptr) call_->TryCancel();
        wake_.wait_for(lock, std::chrono::milliseconds(50));
      }
    });
  }
  ~CancelWatch() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  bool Cancelled() const { return cancelled_ != nullptr && cancelled_->load(); }
  // The call to cancel (nullptr: none). The caller keeps it alive until it sets another.
  void Watch(grpc::ClientContext* call) {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    if (Cancelled() && call_ != nullptr) call_->TryCancel();
  }

 private:
  const std::atomic<bool>* cancelled_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  grpc::ClientContext* call_ = nullptr;
  std::thread thread_;
};

absl::Status CancelledError() {
  return absl::CancelledError("interrupted; the evaluation's tasks were deleted");
}

// A task of the evaluation: created by Create(), deleted by the destructor whatever happened.
class EvalTask {
 public:
  EvalTask(const CliContext& cli, std::string task_id) : cli_(cli), task_id_(std::move(task_id)) {}
  ~EvalTask() {
    if (!created_) return;
    auto stub = v1::ManyShot::NewStub(cli_.channel);
    v1::DeleteTaskRequest request;
    request.set_task_id(task_id_);
    v1::DeleteTaskResponse response;
    auto call = cli_.NewCall(task_id_);  // a fresh call: not cancelled by Ctrl-C
    grpc::Status status = stub->DeleteTask(call.get(), request, &response);
    if (!status.ok() && status.error_code() != grpc::StatusCode::NOT_FOUND) {
      std::fprintf(stderr, "manyshot: eval: could not delete task %s: %s (delete it by hand)\n",
                   task_id_.c_str(), status.error_message().c_str());
    }
  }

  absl::StatusOr<v1::Task> Create(const v1::TaskSpec& spec,
                                  const std::vector<v1::Demonstration>& demonstrations,
                                  const CancelWatch* watch) {
    std::vector<v1::CreateTaskRequest> requests =
        ChunkCreateTaskRequests(task_id_, spec, /*replace=*/false, demonstrations, 1000);
    auto stub = v1::ManyShot::NewStub(cli_.channel);
    // Not cancelled on Ctrl-C: once the upload is complete the server encodes and stores the task
    // whatever the client does, so the call runs to its end and the destructor then deletes it.
    auto call = cli_.NewStreamingCall(task_id_);
    auto stream = stub->CreateTask(call.get());
    created_ = true;  // from here on the server may hold it: always try to delete
    std::thread writer([&stream, &requests] {
      for (const v1::CreateTaskRequest& request : requests) {
        if (!stream->Write(request)) return;
      }
      stream->WritesDone();
    });
    v1::CreateTaskResponse response;
    std::optional<v1::Task> task;
    while (stream->Read(&response)) {
      if (response.has_result()) task = response.result().task();
    }
    writer.join();
    grpc::Status status = stream->Finish();
    if (watch->Cancelled()) return CancelledError();
    if (!status.ok()) return FromGrpc(status, absl::StrCat("CreateTask ", task_id_));
    if (!task.has_value()) {
      return absl::InternalError(absl::StrCat("CreateTask ", task_id_, ": no result"));
    }
    return *task;
  }

  const std::string& id() const { return task_id_; }

 private:
  const CliContext& cli_;
  std::string task_id_;
  bool created_ = false;
};

// Every input through StreamClassify in `mode`; the predicted label index per input.
absl::StatusOr<std::vector<uint32_t>> ClassifyAll(const CliContext& cli, const std::string& task_id,
                                                  const std::vector<v1::Input>& inputs,
                                                  v1::Mode mode, size_t batch_size,
                                                  CancelWatch* watch) {
  std::vector<std::vector<v1::Input>> batches = Batches(inputs, batch_size);
  auto stub = v1::ManyShot::NewStub(cli.channel);
  auto call = cli.NewStreamingCall(task_id);
  watch->Watch(call.get());
  std::vector<uint32_t> predicted(inputs.size(), 0);
  std::set<size_t> seen;
  absl::Status error = absl::OkStatus();
  auto make_request = [&](size_t b) {
    v1::ClassifyRequest request;
    request.set_task_id(task_id);
    request.set_request_id(std::to_string(b));
    request.mutable_options()->set_mode(mode);
    for (const v1::Input& input : batches[b]) *request.add_inputs() = input;
    return request;
  };
  auto on_response = [&](v1::ClassifyResponse& response) {
    size_t b = batches.size();
    if (!absl::SimpleAtoi(response.request_id(), &b) || b >= batches.size()) {
      error = absl::InternalError(
          absl::StrCat("unexpected request_id '", response.request_id(), "' from StreamClassify"));
      return;
    }
    if (response.error().code() != 0) {
      if (error.ok()) {
        const std::string& message = response.error().message();
        error = absl::Status(
            static_cast<absl::StatusCode>(response.error().code()),
            absl::StrCat("StreamClassify ", task_id, ": ", message,
                         message.find("max_query_tokens") != std::string::npos
                             ? " (give --max_query_tokens=N: the room for a test input, taken "
                               "from the group length)"
                             : ""));
      }
      return;
    }
    if (response.results_size() != static_cast<int>(batches[b].size())) {
      error = absl::InternalError(absl::StrCat("StreamClassify: ", response.results_size(),
                                               " results for ", batches[b].size(), " inputs"));
      return;
    }
    for (int i = 0; i < response.results_size(); ++i) {
      predicted[b * batch_size + static_cast<size_t>(i)] = response.results(i).label_index();
    }
    seen.insert(b);
  };
  grpc::Status status =
      StreamClassifyRequests(*stub, call.get(), batches.size(), make_request, on_response);
  watch->Watch(nullptr);
  if (watch->Cancelled()) return CancelledError();
  if (!status.ok()) return FromGrpc(status, absl::StrCat("StreamClassify ", task_id));
  if (!error.ok()) return error;
  if (seen.size() != batches.size()) {
    return absl::InternalError(absl::StrCat("StreamClassify ended with answers for ", seen.size(),
                                            " of ", batches.size(), " requests"));
  }
  return predicted;
}

// Generation tasks: greedy decoding up to the first line break; exact match after trimming.
absl::StatusOr<std::vector<std::string>> GenerateAll(const CliContext& cli,
                                                     const std::string& task_id,
                                                     const std::vector<v1::Input>& inputs,
                                                     v1::Mode mode, CancelWatch* watch) {
  auto stub = v1::ManyShot::NewStub(cli.channel);
  std::vector<std::string> out;
  for (const v1::Input& input : inputs) {
    v1::GenerateRequest request;
    request.set_task_id(task_id);
    *request.mutable_input() = input;
    request.mutable_options()->set_strategy(v1::DECODING_STRATEGY_GREEDY);
    request.mutable_options()->add_stop("\n");
    request.mutable_options()->mutable_query()->set_mode(mode);
    auto call = cli.NewStreamingCall(task_id);
    watch->Watch(call.get());
    auto stream = stub->Generate(call.get(), request);
    v1::GenerateResponse response;
    std::string text;
    while (stream->Read(&response)) {
      if (response.has_result()) text = response.result().text();
    }
    grpc::Status status = stream->Finish();
    watch->Watch(nullptr);
    if (watch->Cancelled()) return CancelledError();
    if (!status.ok()) return FromGrpc(status, absl::StrCat("Generate ", task_id));
    out.push_back(std::string(absl::StripAsciiWhitespace(text)));
  }
  return out;
}

std::string UniquePrefix() {
  std::random_device device;
  return absl::StrFormat("eval-%d-%08x", static_cast<int>(getpid()), device());
}

v1::Input AsInput(const v1::Demonstration& example) {
  v1::Input input;
  input.set_text(example.text());
  input.mutable_fields()->insert(example.fields().begin(), example.fields().end());
  return input;
}

}  // namespace

std::string ModeName(v1::Mode mode) {
  switch (mode) {
    case v1::MODE_CONVENTIONAL:
      return "conventional";
    case v1::MODE_PARALLEL:
      return "parallel";
    case v1::MODE_SAICL:
      return "saicl";
    case v1::MODE_FID:
      return "fid";
    case v1::MODE_ENSEMBLE:
      return "ensemble";
    case v1::MODE_GROUP_FID:
      return "group_fid";
    default:
      return "structured";
  }
}

absl::Status CheckModesFitModel(const EvalPlan& plan, bool encoder_decoder,
                                const std::string& model_type) {
  for (v1::Mode mode : plan.modes) {
    const bool t5_mode = mode == v1::MODE_SAICL || mode == v1::MODE_FID ||
                         mode == v1::MODE_ENSEMBLE || mode == v1::MODE_GROUP_FID;
    const bool decoder_only_mode = mode == v1::MODE_STRUCTURED || mode == v1::MODE_PARALLEL;
    if (encoder_decoder && decoder_only_mode) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--modes: ", ModeName(mode),
          " is structured prompting, which is decoder-only; the "
          "server's model is ",
          model_type,
          " (encoder-decoder): use "
          "--modes=conventional,saicl,fid,ensemble,group_fid (group_fid with --groups=G)"));
    }
    if (!encoder_decoder && t5_mode) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--modes: ", ModeName(mode), " is an encoder-decoder (T5) mode; the server's model is ",
          model_type, " (decoder-only): use --modes=structured,parallel,conventional"));
    }
    if (mode == v1::MODE_GROUP_FID && plan.groups == 0) {
      return absl::InvalidArgumentError(
          "--modes: group_fid needs --groups=G (demonstration groups, capped at the shot count)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ResolveShots(const EvalPlan& plan, size_t train_size,
                                                  const std::string& dataset) {
  std::vector<int64_t> shots;
  for (int64_t n : plan.shots) {
    if (n < 1) return absl::InvalidArgumentError(absl::StrCat("--shots: ", n, " is not >= 1"));
    if (static_cast<size_t>(n) > train_size) {
      if (plan.shots_explicit) {
        return absl::InvalidArgumentError(
            absl::StrCat("--shots: ", n, " demonstrations, but the training split of ", dataset,
                         " has ", train_size, " examples"));
      }
      n = static_cast<int64_t>(train_size);
    }
    if (std::find(shots.begin(), shots.end(), n) == shots.end()) shots.push_back(n);
  }
  if (shots.empty()) return absl::InvalidArgumentError("--shots: no shot counts");
  return shots;
}

std::vector<size_t> SampleIndices(size_t n, size_t count, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (size_t i = n; i > 1; --i) {
    size_t j = static_cast<size_t>(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  order.resize(std::min(count, n));
  return order;
}

void Summarize(const std::vector<double>& values, double* mean, double* std) {
  *mean = 0;
  *std = 0;
  if (values.empty()) return;
  for (double v : values) *mean += v;
  *mean /= static_cast<double>(values.size());
  if (values.size() < 2) return;
  double squares = 0;
  for (double v : values) squares += (v - *mean) * (v - *mean);
  *std = std::sqrt(squares / static_cast<double>(values.size() - 1));
}

namespace {

absl::Status CheckPlan(const EvalPlan& plan, const EvalDataset& dataset) {
  if (plan.samples < 1) return absl::InvalidArgumentError("--samples must be >= 1");
  if (plan.modes.empty()) return absl::InvalidArgumentError("--modes: no modes");
  if (plan.batch < 1) return absl::InvalidArgumentError("--batch must be >= 1");
  if (dataset.test.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dataset.name, ": the test split is empty"));
  }
  return absl::OkStatus();
}

// The report's description of the run, with one empty cell per mode and shot count.
EvalReport NewReport(const EvalDataset& dataset, const EvalPlan& plan, std::vector<int64_t> shots) {
  EvalReport report;
  report.dataset = dataset.name;
  report.input_template = dataset.input_template;
  report.labels = dataset.labels;
  report.generation = dataset.labels.empty();
  report.train_examples = dataset.train.size();
  report.test_available = dataset.test.size();
  report.shots = std::move(shots);
  report.modes = plan.modes;
  for (int s = 0; s < plan.samples; ++s) report.seeds.push_back(plan.first_seed + s);
  for (v1::Mode mode : plan.modes) {
    for (int64_t n : report.shots) {
      EvalCell cell;
      cell.mode = mode;
      cell.shots = n;
      report.cells.push_back(cell);
    }
  }
  return report;
}

// The test inputs every cell answers, with their gold answers.
struct TestSet {
  std::vector<v1::Input> inputs;
  std::vector<int> gold;               // label indices (classification)
  std::vector<std::string> gold_text;  // expected answers (generation)
};

// The same inputs, in the same order, for every cell, so that cells compare.
TestSet SelectTestSet(const EvalDataset& dataset, const EvalPlan& plan, bool generation) {
  TestSet test;
  const size_t count = plan.test_limit == 0 ? dataset.test.size() : plan.test_limit;
  for (size_t index : SampleIndices(dataset.test.size(), count, plan.first_seed)) {
    const v1::Demonstration& example = dataset.test[index];
    test.inputs.push_back(AsInput(example));
    if (generation) {
      test.gold_text.push_back(std::string(absl::StripAsciiWhitespace(example.label())));
    } else {
      test.gold.push_back(GoldLabelIndex(example, dataset.labels));
    }
  }
  return test;
}

// The share of the most frequent gold label among `gold` (indices below `label_count`).
double MajorityRate(const std::vector<int>& gold, size_t label_count) {
  std::vector<size_t> counts(label_count + 1, 0);
  for (int g : gold) ++counts[g < 0 ? label_count : static_cast<size_t>(g)];
  counts.back() = 0;  // an input without a gold label is no class
  return static_cast<double>(*std::max_element(counts.begin(), counts.end())) /
         static_cast<double>(gold.size());
}

// Records the server's model in the report and checks that it runs every planned mode; returns
// whether the model is an encoder-decoder (its modes are task-level).
absl::StatusOr<bool> DescribeServerModel(const CliContext& cli, const EvalPlan& plan,
                                         EvalReport* report) {
  auto stub = v1::ManyShot::NewStub(cli.channel);
  v1::ServerInfo info;
  auto call = cli.NewCall();
  grpc::Status status = stub->GetServerInfo(call.get(), v1::GetServerInfoRequest(), &info);
  if (!status.ok()) return FromGrpc(status, "GetServerInfo");
  report->model = absl::StrCat(info.model().model_type(), " ",
                               std::filesystem::path(info.model().path()).filename().string());
  report->random_weights = info.model().random_weights();
  report->context_length = info.model().context_length();
  const bool encoder_decoder = info.model().encoder_decoder();
  if (absl::Status fits = CheckModesFitModel(plan, encoder_decoder, info.model().model_type());
      !fits.ok()) {
    return fits;
  }
  return encoder_decoder;
}

// The spec every task of the evaluation shares.
v1::TaskSpec BaseTaskSpec(const EvalDataset& dataset, const EvalPlan& plan, bool encoder_decoder) {
  v1::TaskSpec spec;
  spec.set_input_template(dataset.input_template);
  for (const std::string& label : dataset.labels) spec.add_labels(label);
  if (plan.answer_template.has_value()) spec.set_answer_template(*plan.answer_template);
  if (plan.separator.has_value()) spec.set_separator(*plan.separator);
  // A fixed room unless the plan or the preset says otherwise: the room comes out of the group
  // length, so a server's defaults (derived from its model's context) would change the results.
  const uint32_t query_room = plan.max_query_tokens != 0      ? plan.max_query_tokens
                              : dataset.max_query_tokens != 0 ? dataset.max_query_tokens
                                                              : kEvalQueryRoom;
  spec.set_max_query_tokens(query_room);
  spec.set_max_answer_tokens(kEvalAnswerRoom);
  // A demonstration longer than a group (T5: a segment) keeps its end rather than failing the task.
  spec.set_long_demonstrations(v1::LONG_DEMONSTRATION_POLICY_TRUNCATE);
  if (!encoder_decoder) {
    spec.set_group_length(plan.group_length);
    // Whole demonstrations per group, so that the first group holds exactly the demonstrations
    // CONVENTIONAL's single window takes (docs/structured_prompting.md, "Groups", "CONVENTIONAL").
    spec.set_alignment(v1::ALIGNMENT_ATTENTION_MASK);
    spec.set_mode(v1::MODE_STRUCTURED);
  }
  return spec;
}

// Fills the report's cells: for each sample (seed) and shot count, the tasks it needs, each queried
// on the whole test set in every planned mode.
class CellRunner {
 public:
  CellRunner(const CliContext& cli, const EvalDataset& dataset, const EvalPlan& plan,
             const EvalProgress& progress, const TestSet& test, bool encoder_decoder,
             const std::atomic<bool>* cancelled, EvalReport* report)
      : cli_(cli),
        dataset_(dataset),
        plan_(plan),
        progress_(progress),
        test_(test),
        encoder_decoder_(encoder_decoder),
        spec_(BaseTaskSpec(dataset, plan, encoder_decoder)),
        report_(*report),
        watch_(cancelled),
        prefix_(plan.task_prefix.empty() ? UniquePrefix() : plan.task_prefix) {}

  absl::Status RunSample(size_t s) {
    const int64_t largest = *std::max_element(report_.shots.begin(), report_.shots.end());
    const std::vector<size_t> sample =
        SampleIndices(dataset_.train.size(), static_cast<size_t>(largest), report_.seeds[s]);
    for (size_t k = 0; k < report_.shots.size(); ++k) {
      if (watch_.Cancelled()) return CancelledError();
      if (absl::Status done = RunShotCount(s, k, sample); !done.ok()) return done;
    }
    return absl::OkStatus();
  }

 private:
  // Decoder-only: one STRUCTURED task, the mode chosen per request. T5: the modes are task-level,
  // so each mode gets its own task (created and deleted in turn).
  absl::Status RunShotCount(size_t s, size_t k, const std::vector<size_t>& sample) {
    const uint64_t seed = report_.seeds[s];
    const int64_t n = report_.shots[k];
    std::vector<v1::Demonstration> demonstrations;
    for (int64_t i = 0; i < n; ++i) demonstrations.push_back(dataset_.train[sample[i]]);
    const std::string task_id = absl::StrCat(prefix_, "-n", n, "-seed", seed);
    const std::string step = absl::StrCat("sample ", s + 1, "/", report_.seeds.size(), " (seed ",
                                          seed, "), ", n, " shots");
    std::optional<EvalTask> shared;
    int64_t conventional_used = n;  // the demonstrations of the first group
    if (!encoder_decoder_) {
      shared.emplace(cli_, task_id);
      auto stats = CreateTask(*shared, spec_, demonstrations, step);
      if (!stats.ok()) return stats.status();
      if (stats->demonstrations_per_group_size() > 0) {
        conventional_used = stats->demonstrations_per_group(0);
      }
    }
    for (size_t m = 0; m < plan_.modes.size(); ++m) {
      const v1::Mode mode = plan_.modes[m];
      std::optional<EvalTask> own;
      if (encoder_decoder_) {
        own.emplace(cli_, absl::StrCat(task_id, "-", ModeName(mode)));
        auto stats = CreateTask(*own, EncoderDecoderSpec(mode, n), demonstrations, step);
        if (!stats.ok()) return stats.status();
      }
      const EvalTask& task = encoder_decoder_ ? *own : *shared;
      // A T5 task answers in its own mode; the request names none.
      auto correct = CountCorrect(task.id(), encoder_decoder_ ? v1::MODE_UNSPECIFIED : mode);
      if (!correct.ok()) return correct.status();
      EvalCell& cell = report_.cells[m * report_.shots.size() + k];
      cell.accuracy.push_back(static_cast<double>(*correct) /
                              static_cast<double>(test_.inputs.size()));
      // Decoder-only CONVENTIONAL reads the first group (one window); every other mode, and every
      // T5 mode, reads all n.
      cell.used.push_back(!encoder_decoder_ && mode == v1::MODE_CONVENTIONAL ? conventional_used
                                                                             : n);
      progress_(absl::StrFormat("sample %d/%d (seed %d), %d shots, %s: accuracy %.4f (%d/%d)",
                                s + 1, report_.seeds.size(), seed, n, ModeName(mode),
                                cell.accuracy.back(), *correct, test_.inputs.size()));
    }
    return absl::OkStatus();
  }

  // A T5 task's spec: the mode is the task's, FiD groups capped at the demonstrations.
  v1::TaskSpec EncoderDecoderSpec(v1::Mode mode, int64_t n) const {
    v1::TaskSpec spec = spec_;
    spec.set_mode(mode);
    if (mode == v1::MODE_GROUP_FID) {
      spec.set_groups(static_cast<uint32_t>(std::min<int64_t>(plan_.groups, n)));
    }
    return spec;
  }

  absl::StatusOr<v1::TaskStats> CreateTask(EvalTask& task, const v1::TaskSpec& spec,
                                           const std::vector<v1::Demonstration>& demonstrations,
                                           const std::string& step) {
    progress_(absl::StrCat(step, ": encoding task ", task.id()));
    auto created = task.Create(spec, demonstrations, &watch_);
    if (!created.ok()) return created.status();
    if (created->state() != v1::TASK_STATE_READY) {
      return absl::InternalError(
          absl::StrCat("task ", task.id(), " is not ready: ", created->error()));
    }
    report_.group_length = created->stats().group_length();
    return created->stats();
  }

  // How many test inputs the task answers right in `mode`.
  absl::StatusOr<size_t> CountCorrect(const std::string& task_id, v1::Mode mode) {
    size_t correct = 0;
    if (report_.generation) {
      auto answers = GenerateAll(cli_, task_id, test_.inputs, mode, &watch_);
      if (!answers.ok()) return answers.status();
      for (size_t i = 0; i < test_.inputs.size(); ++i) {
        correct += (*answers)[i] == test_.gold_text[i];
      }
    } else {
      auto predicted = ClassifyAll(cli_, task_id, test_.inputs, mode, plan_.batch, &watch_);
      if (!predicted.ok()) return predicted.status();
      for (size_t i = 0; i < test_.inputs.size(); ++i) {
        correct += static_cast<int>((*predicted)[i]) == test_.gold[i];
      }
    }
    return correct;
  }

  const CliContext& cli_;
  const EvalDataset& dataset_;
  const EvalPlan& plan_;
  const EvalProgress& progress_;
  const TestSet& test_;
  const bool encoder_decoder_;
  const v1::TaskSpec spec_;
  EvalReport& report_;
  CancelWatch watch_;
  const std::string prefix_;
};

}  // namespace

absl::StatusOr<EvalReport> RunEvaluation(const CliContext& cli, const EvalDataset& dataset,
                                         const EvalPlan& plan, const EvalProgress& progress,
                                         const std::atomic<bool>* cancelled) {
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status valid = CheckPlan(plan, dataset); !valid.ok()) return valid;
  auto shots = ResolveShots(plan, dataset.train.size(), dataset.name);
  if (!shots.ok()) return shots.status();
  EvalReport report = NewReport(dataset, plan, *std::move(shots));
  const TestSet test = SelectTestSet(dataset, plan, report.generation);
  report.test_examples = test.inputs.size();
  if (!report.generation) report.majority_rate = MajorityRate(test.gold, dataset.labels.size());
  auto encoder_decoder = DescribeServerModel(cli, plan, &report);
  if (!encoder_decoder.ok()) return encoder_decoder.status();
  {
    CellRunner cells(cli, dataset, plan, progress, test, *encoder_decoder, cancelled, &report);
    for (size_t s = 0; s < report.seeds.size(); ++s) {
      if (absl::Status done = cells.RunSample(s); !done.ok()) return done;
    }
  }
  for (EvalCell& cell : report.cells) Summarize(cell.accuracy, &cell.mean, &cell.std);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace manyshot::client
