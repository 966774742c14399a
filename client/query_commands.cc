// classify, score, generate.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/classify_stream.h"
#include "client/commands.h"
#include "client/example_reader.h"
#include "client/flags.h"
#include "client/request_builder.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace manyshot::client {
namespace {

// Mode and rescale factor overrides shared by classify, score and generate.
bool QueryOptionsFromFlags(const std::string& cmd, v1::QueryOptions* options) {
  auto mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) {
    ReportUsageError(cmd, std::string(mode.status().message()));
    return false;
  }
  options->set_mode(*mode);
  double rescale = absl::GetFlag(FLAGS_rescale_factor);
  if (rescale < 0) {
    ReportUsageError(cmd, "--rescale_factor must be > 0");
    return false;
  }
  if (rescale > 0) options->set_rescale_factor(rescale);
  auto truncation = ParseTruncation(absl::GetFlag(FLAGS_truncate));
  if (!truncation.ok()) {
    ReportUsageError(cmd, std::string(truncation.status().message()));
    return false;
  }
  options->set_truncation(*truncation);
  return true;
}

// The input as shown on a result line: its text, or its fields as "name=value | ...".
std::string DisplayInput(const v1::Input& input) {
  if (!input.text().empty() || input.fields().empty()) return OneLine(input.text());
  std::map<std::string, std::string> sorted(input.fields().begin(), input.fields().end());
  std::vector<std::string> parts;
  for (const auto& [name, value] : sorted) parts.push_back(absl::StrCat(name, "=", value));
  return OneLine(absl::StrJoin(parts, " | "));
}

nlohmann::json InputJson(const v1::Input& input) {
  if (input.fields().empty()) return input.text();
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& [name, value] : input.fields()) fields[name] = value;
  if (!input.text().empty()) fields["text"] = input.text();
  return fields;
}

// Reads --file (or stdin) as test inputs.
bool ReadInputs(const CliContext& cli, const std::string& cmd, std::vector<Record>* records,
                std::string* source, FieldOptions* options) {
  const std::string file_flag = absl::GetFlag(FLAGS_file);
  const std::vector<std::string>& texts = cli.Repeated("input");
  if (!texts.empty()) {
    // --input=TEXT (repeatable): these texts instead of a file.
    if (!file_flag.empty()) {
      ReportUsageError(cmd, "give inputs with --input or with --file, not both");
      return false;
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      records->push_back({static_cast<int>(i + 1), {{"text", UnescapeFlagValue(texts[i])}}});
    }
    *source = "--input";
    options->text_field = "text";
    return true;
  }
  const std::string path = file_flag.empty() ? std::string("-") : file_flag;
  if (path == "-" && ::isatty(STDIN_FILENO)) {
    // Waiting silently on a terminal looks like a hang.
    std::fprintf(stderr,
                 "manyshot: %s: reading inputs from the terminal, one per line; end with Ctrl-D "
                 "(or give --input=TEXT or --file=PATH)\n",
                 cmd.c_str());
  }
  ExampleFormat format = ExampleFormat::kText;
  if (!absl::GetFlag(FLAGS_format).empty()) {
    auto parsed = ParseExampleFormat(absl::GetFlag(FLAGS_format));
    if (!parsed.ok()) {
      ReportUsageError(cmd, std::string(parsed.status().message()));
      return false;
    }
    format = *parsed;
  } else if (path != "-") {
    format = ExampleFormatFromPath(path).value_or(ExampleFormat::kText);
  }
  auto read = ReadExamples(path, format);
  if (!read.ok()) {
    ReportUsageError(cmd, std::string(read.status().message()));
    return false;
  }
  *records = std::move(*read);
  *source = path == "-" ? "<stdin>" : path;
  options->text_field = format == ExampleFormat::kText ? "text" : absl::GetFlag(FLAGS_text_field);
  return true;
}

bool FieldMappings(const CliContext& cli, const std::string& cmd, FieldOptions* options) {
  auto fields = ParseFieldMappings(cli.Repeated("field"));
  if (!fields.ok()) {
    ReportUsageError(cmd, std::string(fields.status().message()));
    return false;
  }
  options->fields = *fields;
  return true;
}

bool BatchFlag(const std::string& cmd, size_t* batch) {
  int value = absl::GetFlag(FLAGS_batch);
  if (value < 1) {
    ReportUsageError(cmd, "--batch must be >= 1");
    return false;
  }
  *batch = static_cast<size_t>(value);
  return true;
}

void PrintThroughput(size_t count, std::chrono::steady_clock::time_point start) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%zu inputs in %.2f s: %.1f inputs/s\n", count, seconds,
               seconds > 0 ? static_cast<double>(count) / seconds : 0.0);
}

void PrintClassifyResult(const CliContext& cli, const v1::Input& input,
                         const v1::ClassifyResult& result) {
  if (cli.json) {
    nlohmann::json line = nlohmann::json::parse(ToJson(result));
    line["input"] = InputJson(input);
    std::printf("%s\n", line.dump().c_str());
    return;
  }
  double probability = 0;
  if (result.label_index() < static_cast<uint32_t>(result.scores_size())) {
    const v1::LabelScore& score = result.scores(static_cast<int>(result.label_index()));
    probability =
        score.calibrated_probability() > 0 ? score.calibrated_probability() : score.probability();
  }
  std::printf("%s\t%.4f\t%s\n", result.label().c_str(), probability, DisplayInput(input).c_str());
}

// A classify run's inputs in batches, one request per batch (request_id: the batch index).
struct ClassifyBatches {
  std::string task_id;
  std::vector<std::vector<v1::Input>> batches;
  size_t batch_size = 0;
  v1::QueryOptions query;

  v1::ClassifyRequest Request(size_t b) const {
    v1::ClassifyRequest request;
    request.set_task_id(task_id);
    for (const v1::Input& input : batches[b]) *request.add_inputs() = input;
    *request.mutable_options() = query;
    request.set_request_id(std::to_string(b));
    return request;
  }
};

// One Classify call per batch, printed as each returns.
int ClassifyUnary(const CliContext& cli, v1::ManyShot::Stub& stub, const ClassifyBatches& job) {
  const std::string cmd = "classify";
  const auto start = std::chrono::steady_clock::now();
  size_t done = 0;
  for (size_t b = 0; b < job.batches.size(); ++b) {
    v1::ClassifyResponse response;
    auto call = cli.NewCall(job.task_id);
    grpc::Status status = stub.Classify(call.get(), job.Request(b), &response);
    if (!status.ok()) return ReportRpcError(cmd, status);
    if (response.results_size() != static_cast<int>(job.batches[b].size())) {
      return ReportRpcError(
          cmd, grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat("expected ", job.batches[b].size(), " results, got ",
                                         response.results_size())));
    }
    for (int i = 0; i < response.results_size(); ++i) {
      PrintClassifyResult(cli, job.batches[b][static_cast<size_t>(i)], response.results(i));
    }
    std::fflush(stdout);
    done += job.batches[b].size();
  }
  PrintThroughput(done, start);
  return 0;
}

// Prints StreamClassify answers, which arrive in completion order, in input order.
class InOrderPrinter {
 public:
  InOrderPrinter(const CliContext& cli, const ClassifyBatches& job) : cli_(cli), job_(job) {}

  void OnResponse(v1::ClassifyResponse& response) {
    size_t b = 0;
    try {
      b = std::stoul(response.request_id());
    } catch (...) {
      b = job_.batches.size();
    }
    if (b >= job_.batches.size()) {
      std::fprintf(stderr, "manyshot: classify: unexpected request_id '%s'\n",
                   response.request_id().c_str());
      exit_code_ = 1;
      return;
    }
    pending_[b] = std::move(response);
    for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(next_)) {
      Print(it->second);
      pending_.erase(it);
      ++next_;
    }
  }

  size_t batches_printed() const { return next_; }
  size_t inputs_printed() const { return done_; }
  int exit_code() const { return exit_code_; }

 private:
  void Print(const v1::ClassifyResponse& r) {
    const std::vector<v1::Input>& batch = job_.batches[next_];
    if (r.error().code() != 0) {
      ReportErrorStatus(absl::StrCat("classify: inputs ", next_ * job_.batch_size + 1, "-",
                                     next_ * job_.batch_size + batch.size()),
                        r.error());
      exit_code_ = 1;
    } else {
      for (int i = 0; i < r.results_size() && i < static_cast<int>(batch.size()); ++i) {
        PrintClassifyResult(cli_, batch[static_cast<size_t>(i)], r.results(i));
      }
      done_ += batch.size();
    }
    std::fflush(stdout);
  }

  const CliContext& cli_;
  const ClassifyBatches& job_;
  std::map<size_t, v1::ClassifyResponse> pending_;
  size_t next_ = 0;
  size_t done_ = 0;
  int exit_code_ = 0;
};

// StreamClassify: every batch on one stream.
int ClassifyStreamed(const CliContext& cli, v1::ManyShot::Stub& stub, const ClassifyBatches& job) {
  const std::string cmd = "classify";
  const auto start = std::chrono::steady_clock::now();
  InOrderPrinter printer(cli, job);
  auto call = cli.NewStreamingCall(job.task_id);
  grpc::Status status = StreamClassifyRequests(
      stub, call.get(), job.batches.size(), [&job](size_t b) { return job.Request(b); },
      [&printer](v1::ClassifyResponse& response) { printer.OnResponse(response); });
  if (!status.ok()) return ReportRpcError(cmd, status);
  if (printer.batches_printed() < job.batches.size()) {
    return ReportRpcError(cmd, grpc::Status(grpc::StatusCode::INTERNAL,
                                            absl::StrCat("answers for ", printer.batches_printed(),
                                                         " of ", job.batches.size(), " batches")));
  }
  PrintThroughput(printer.inputs_printed(), start);
  return printer.exit_code();
}

// The score items of a JSONL file: each line's input and its "candidates" (a non-empty array of
// strings). INVALID_ARGUMENT names the file and line of a bad one.
absl::StatusOr<std::vector<v1::ScoreItem>> ReadScoreItems(const std::string& path,
                                                          FieldOptions options) {
  auto records = ReadExamples(path, ExampleFormat::kJsonl);
  if (!records.ok()) return records.status();
  const std::string source = path == "-" ? "<stdin>" : path;
  options.text_field = absl::GetFlag(FLAGS_text_field);
  auto inputs = BuildInputs(*records, options, source);
  if (!inputs.ok()) return inputs.status();
  std::vector<v1::ScoreItem> items;
  for (size_t i = 0; i < records->size(); ++i) {
    const Record& record = (*records)[i];
    const nlohmann::json* candidates = GetJsonField(record, "candidates");
    v1::ScoreItem item;
    *item.mutable_input() = (*inputs)[i];
    bool ok = candidates != nullptr && candidates->is_array() && !candidates->empty();
    for (size_t c = 0; ok && c < candidates->size(); ++c) {
      ok = (*candidates)[c].is_string();
      if (ok) item.add_candidates((*candidates)[c].get<std::string>());
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ":", record.line, ": \"candidates\" must be a non-empty array of strings"));
    }
    items.push_back(std::move(item));
  }
  return items;
}

// The one score item of --input and --candidate.
absl::StatusOr<v1::ScoreItem> ScoreItemFromFlags(const CliContext& cli) {
  if (cli.Repeated("input").empty()) return absl::InvalidArgumentError("--input is required");
  if (cli.Repeated("candidate").empty()) {
    return absl::InvalidArgumentError("give at least one --candidate");
  }
  v1::ScoreItem item;
  item.mutable_input()->set_text(UnescapeFlagValue(cli.Repeated("input").back()));
  for (const std::string& c : cli.Repeated("candidate")) item.add_candidates(UnescapeFlagValue(c));
  return item;
}

// The best candidate's line, then every candidate's figures (or one JSON line).
void PrintScoreResult(const CliContext& cli, const v1::ScoreItem& item,
                      const v1::ScoreResult& result) {
  if (cli.json) {
    nlohmann::json line = nlohmann::json::parse(ToJson(result));
    line["input"] = InputJson(item.input());
    std::printf("%s\n", line.dump().c_str());
    return;
  }
  if (result.candidates_size() == 0) return;
  const int best = static_cast<int>(result.best_index()) < result.candidates_size()
                       ? static_cast<int>(result.best_index())
                       : 0;
  std::printf("%s\t%.4f\t%s\n", OneLine(result.candidates(best).candidate()).c_str(),
              result.candidates(best).probability(), DisplayInput(item.input()).c_str());
  for (int c = 0; c < result.candidates_size(); ++c) {
    const v1::CandidateScore& s = result.candidates(c);
    std::printf("  %s %.4f  mean_logprob %.4f  %u tokens  %s\n", c == best ? "*" : " ",
                s.probability(), s.mean_logprob(), s.num_tokens(), OneLine(s.candidate()).c_str());
  }
}

}  // namespace

int RunClassify(const CliContext& cli) {
  const std::string cmd = "classify";
  if (cli.args.size() != 1) return ReportUsageError(cmd, "expected TASK_ID");
  ClassifyBatches job;
  job.task_id = cli.args[0];
  FieldOptions options;
  std::vector<Record> records;
  std::string source;
  if (!FieldMappings(cli, cmd, &options) || !BatchFlag(cmd, &job.batch_size) ||
      !QueryOptionsFromFlags(cmd, &job.query) ||
      !ReadInputs(cli, cmd, &records, &source, &options)) {
    return 2;
  }
  auto inputs = BuildInputs(records, options, source);
  if (!inputs.ok()) return ReportUsageError(cmd, std::string(inputs.status().message()));
  if (inputs->empty()) return ReportUsageError(cmd, absl::StrCat(source, ": no inputs"));
  job.batches = Batches(*inputs, job.batch_size);
  auto stub = v1::ManyShot::NewStub(cli.channel);
  return absl::GetFlag(FLAGS_stream) ? ClassifyStreamed(cli, *stub, job)
                                     : ClassifyUnary(cli, *stub, job);
}

int RunScore(const CliContext& cli) {
  const std::string cmd = "score";
  if (cli.args.size() != 1) return ReportUsageError(cmd, "expected TASK_ID");
  const std::string& task_id = cli.args[0];
  FieldOptions options;
  size_t batch_size = 0;
  v1::QueryOptions query;
  if (!FieldMappings(cli, cmd, &options) || !BatchFlag(cmd, &batch_size) ||
      !QueryOptionsFromFlags(cmd, &query)) {
    return 2;
  }
  std::vector<v1::ScoreItem> items;
  const std::string path = absl::GetFlag(FLAGS_file);
  if (!path.empty() && (!cli.Repeated("input").empty() || !cli.Repeated("candidate").empty())) {
    return ReportUsageError(cmd, "give either --file or --input with --candidate, not both");
  }
  if (!path.empty()) {
    auto read = ReadScoreItems(path, options);
    if (!read.ok()) return ReportUsageError(cmd, std::string(read.status().message()));
    items = *std::move(read);
  } else {
    auto item = ScoreItemFromFlags(cli);
    if (!item.ok()) return ReportUsageError(cmd, std::string(item.status().message()));
    items.push_back(*std::move(item));
  }
  if (items.empty()) return ReportUsageError(cmd, "no items to score");

  auto stub = v1::ManyShot::NewStub(cli.channel);
  for (const std::vector<v1::ScoreItem>& batch : Batches(items, batch_size)) {
    v1::ScoreRequest request;
    request.set_task_id(task_id);
    for (const v1::ScoreItem& item : batch) *request.add_items() = item;
    *request.mutable_options() = query;
    v1::ScoreResponse response;
    auto call = cli.NewCall(task_id);
    grpc::Status status = stub->Score(call.get(), request, &response);
    if (!status.ok()) return ReportRpcError(cmd, status);
    for (int i = 0; i < response.results_size() && i < static_cast<int>(batch.size()); ++i) {
      PrintScoreResult(cli, batch[static_cast<size_t>(i)], response.results(i));
    }
  }
  return 0;
}

int RunGenerate(const CliContext& cli) {
  const std::string cmd = "generate";
  if (cli.args.size() != 1) return ReportUsageError(cmd, "expected TASK_ID");
  if (cli.Repeated("input").empty()) return ReportUsageError(cmd, "--input is required");
  v1::GenerateRequest request;
  request.set_task_id(cli.args[0]);
  request.mutable_input()->set_text(UnescapeFlagValue(cli.Repeated("input").back()));
  v1::GenerationOptions* options = request.mutable_options();
  if (!QueryOptionsFromFlags(cmd, options->mutable_query())) return 2;
  uint32_t beam_width = absl::GetFlag(FLAGS_beam_width);
  if (beam_width > 1) {
    options->set_strategy(v1::DECODING_STRATEGY_BEAM);
    options->set_beam_width(beam_width);
  }
  if (auto penalty = absl::GetFlag(FLAGS_length_penalty)) options->set_length_penalty(*penalty);
  options->set_max_new_tokens(absl::GetFlag(FLAGS_max_new_tokens));
  for (const std::string& stop : cli.Repeated("stop")) options->add_stop(UnescapeFlagValue(stop));
  if (absl::GetFlag(FLAGS_no_stop_at_eos)) options->set_stop_at_eos(false);

  auto stub = v1::ManyShot::NewStub(cli.channel);
  auto call = cli.NewStreamingCall(request.task_id());
  auto stream = stub->Generate(call.get(), request);
  v1::GenerateResponse response;
  std::optional<v1::GenerationResult> result;
  bool printed = false;
  while (stream->Read(&response)) {
    if (response.has_token() && !cli.json) {
      std::fputs(response.token().text().c_str(), stdout);
      std::fflush(stdout);
      printed = true;
    }
    if (response.has_result()) result = response.result();
  }
  grpc::Status status = stream->Finish();
  if (printed) std::fputs("\n", stdout);
  if (!status.ok()) return ReportRpcError(cmd, status);
  if (!result.has_value()) {
    return ReportRpcError(
        cmd, grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without a result"));
  }
  if (cli.json) {
    std::printf("%s\n", ToJson(*result).c_str());
  } else if (!printed) {
    std::printf("%s\n", result->text().c_str());  // no token events: print the final text
  }
  return 0;
}

}  // namespace manyshot::client
