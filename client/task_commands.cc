// create, get, list, delete.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/dry_run.h"
#include "client/example_reader.h"
#include "client/flags.h"
#include "client/progress.h"
#include "client/request_builder.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {
namespace {

const char* StateName(v1::TaskState state) {
  switch (state) {
    case v1::TASK_STATE_ENCODING:
      return "ENCODING";
    case v1::TASK_STATE_READY:
      return "READY";
    case v1::TASK_STATE_FAILED:
      return "FAILED";
    default:
      return "UNSPECIFIED";
  }
}

void PrintTask(const v1::Task& task) {
  const v1::TaskStats& s = task.stats();
  std::printf("task          %s (%s)\n", task.task_id().c_str(), StateName(task.state()));
  if (!task.error().empty()) std::printf("error         %s\n", task.error().c_str());
  if (task.replacing()) {
    std::printf("replacing     a new version is being encoded; this one is served until then\n");
  }
  std::printf("template      %s\n", OneLine(task.spec().input_template()).c_str());
  if (task.spec().labels_size() > 0) {
    std::printf("labels        %s\n", absl::StrJoin(task.spec().labels(), ", ").c_str());
  }
  // An encoder-decoder (T5) task has segments instead of groups and nothing in the KV cache.
  const bool encoder_decoder = !s.cache_holds().empty();
  if (encoder_decoder) {
    const v1::Mode mode =
        task.spec().mode() == v1::MODE_UNSPECIFIED ? v1::MODE_CONVENTIONAL : task.spec().mode();
    std::printf("mode          %s", v1::Mode_Name(mode).substr(5).c_str());  // without MODE_
    if (task.spec().groups() > 0) std::printf(", %u groups", task.spec().groups());
    std::printf("\n");
    std::printf("demos         %llu in segments of at most %u tokens (%llu tokens",
                static_cast<unsigned long long>(s.demonstrations()), s.segment_length(),
                static_cast<unsigned long long>(s.context_tokens()));
  } else {
    std::printf("demos         %llu in %llu groups of %u tokens (%llu context tokens",
                static_cast<unsigned long long>(s.demonstrations()),
                static_cast<unsigned long long>(s.groups()), s.group_length(),
                static_cast<unsigned long long>(s.context_tokens()));
  }
  if (s.truncated_demonstrations() > 0) {
    std::printf(", %llu truncated", static_cast<unsigned long long>(s.truncated_demonstrations()));
  }
  std::printf(")\n");
  if (encoder_decoder) {
    std::printf("cache         %s; prepared in %.2f s\n", s.cache_holds().c_str(),
                s.encode_seconds());
  } else {
    std::printf("cache         %llu bytes, rescale factor %g, encoded in %.2f s\n",
                static_cast<unsigned long long>(s.cache_bytes()), s.effective_rescale_factor(),
                s.encode_seconds());
  }
  if (!task.content_hash().empty()) {
    std::printf("content hash  %s\n", task.content_hash().c_str());
  }
}

// The single positional TASK_ID; a usage error otherwise.
bool TaskIdArg(const CliContext& cli, const std::string& command, std::string* task_id) {
  if (cli.args.size() != 1) {
    ReportUsageError(command, cli.args.empty() ? "expected TASK_ID"
                                               : absl::StrCat("expected one TASK_ID, got ",
                                                              cli.args.size(), " arguments"));
    return false;
  }
  *task_id = cli.args[0];
  return true;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The demonstrations file's format: --format, else the file's extension; a plain text file has
// no label field, so it cannot hold demonstrations.
absl::StatusOr<ExampleFormat> DemonstrationsFormat(const std::string& path) {
  std::optional<ExampleFormat> format;
  if (!absl::GetFlag(FLAGS_format).empty()) {
    auto parsed = ParseExampleFormat(absl::GetFlag(FLAGS_format));
    if (!parsed.ok()) return parsed.status();
    format = *parsed;
  } else {
    format = ExampleFormatFromPath(path);
  }
  if (!format.has_value() || *format == ExampleFormat::kText) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--file=", path,
        ": give --format=jsonl|csv|tsv (demonstrations need a text and a label field)"));
  }
  return *format;
}

// Which columns of the file feed the text, the label and the template's placeholders.
absl::StatusOr<FieldOptions> FieldOptionsFromFlags(const CliContext& cli,
                                                   const std::string& input_template) {
  FieldOptions options;
  options.text_field = absl::GetFlag(FLAGS_text_field);
  options.label_field = absl::GetFlag(FLAGS_label_field);
  options.labels = absl::GetFlag(FLAGS_labels);
  auto fields = ParseFieldMappings(cli.Repeated("field"));
  if (!fields.ok()) return fields.status();
  options.fields = *fields;
  // With several placeholders, a placeholder without --field reads the field of its own name.
  std::vector<std::string> placeholders = TemplatePlaceholders(input_template);
  if (placeholders.size() > 1) {
    for (const std::string& name : placeholders) options.fields.emplace(name, name);
  }
  auto label_map = ParseKeyValueList(absl::GetFlag(FLAGS_label_map), "label_map");
  if (!label_map.ok()) return label_map.status();
  options.label_map = *label_map;
  return options;
}

absl::StatusOr<v1::TaskSpec> TaskSpecFromFlags(const std::string& input_template,
                                               const std::vector<std::string>& labels) {
  v1::TaskSpec spec;
  spec.set_input_template(input_template);
  if (auto v = absl::GetFlag(FLAGS_answer_template))
    spec.set_answer_template(UnescapeFlagValue(*v));
  if (auto v = absl::GetFlag(FLAGS_separator)) spec.set_separator(UnescapeFlagValue(*v));
  if (auto v = absl::GetFlag(FLAGS_calibration_text)) {
    spec.set_calibration_text(UnescapeFlagValue(*v));
  }
  for (const std::string& label : labels) spec.add_labels(label);
  spec.set_shuffle_seed(absl::GetFlag(FLAGS_shuffle_seed));
  spec.set_group_length(absl::GetFlag(FLAGS_group_length));
  auto alignment = ParseAlignment(absl::GetFlag(FLAGS_alignment));
  if (!alignment.ok()) return alignment.status();
  spec.set_alignment(*alignment);
  auto mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  spec.set_mode(*mode);
  spec.set_groups(absl::GetFlag(FLAGS_groups));
  spec.set_segment_length(absl::GetFlag(FLAGS_segment_length));
  double rescale = absl::GetFlag(FLAGS_rescale_factor);
  if (rescale < 0) return absl::InvalidArgumentError("--rescale_factor must be >= 0");
  spec.set_rescale_factor(rescale);
  std::string long_policy = absl::GetFlag(FLAGS_long_demonstrations);
  if (long_policy == "reject") {
    spec.set_long_demonstrations(v1::LONG_DEMONSTRATION_POLICY_REJECT);
  } else if (long_policy == "truncate") {
    spec.set_long_demonstrations(v1::LONG_DEMONSTRATION_POLICY_TRUNCATE);
  } else if (!long_policy.empty()) {
    return absl::InvalidArgumentError("--long_demonstrations: expected reject or truncate");
  }
  auto truncation = ParseTruncation(absl::GetFlag(FLAGS_truncate));
  if (!truncation.ok()) return truncation.status();
  spec.set_input_truncation(*truncation);
  spec.set_calibrate(absl::GetFlag(FLAGS_calibrate));
  spec.set_max_query_tokens(absl::GetFlag(FLAGS_max_query_tokens));
  spec.set_max_answer_tokens(absl::GetFlag(FLAGS_max_answer_tokens));
  return spec;
}

absl::StatusOr<std::vector<v1::Demonstration>> LoadDemonstrations(const std::string& path,
                                                                  ExampleFormat format,
                                                                  const std::string& input_template,
                                                                  const FieldOptions& options) {
  auto records = ReadExamples(path, format);
  if (!records.ok()) return records.status();
  if (!records->empty()) {
    if (absl::Status s = CheckTemplateColumns(input_template, options, records->front(), path);
        !s.ok()) {
      return s;
    }
  }
  return BuildDemonstrations(*records, options, path);
}

// Streams the requests and shows the server's progress: 0 with `*result` set, or the exit status
// after reporting the error.
int Upload(const CliContext& cli, const std::string& task_id,
           const std::vector<v1::CreateTaskRequest>& requests, v1::CreateTaskResult* result) {
  auto stub = v1::ManyShot::NewStub(cli.channel);
  auto call = cli.NewStreamingCall(task_id);
  auto stream = stub->CreateTask(call.get());
  // Writes on their own thread, so that progress is read while the upload is still going.
  std::thread writer([&stream, &requests] {
    for (const v1::CreateTaskRequest& request : requests) {
      if (!stream->Write(request)) return;  // the server ended the call; Finish() says why
    }
    stream->WritesDone();
  });
  ProgressDisplay progress(stderr, isatty(fileno(stderr)) != 0);
  v1::CreateTaskResponse response;
  bool has_result = false;
  while (stream->Read(&response)) {
    if (response.has_progress()) progress.Update(response.progress(), Now());
    if (response.has_result()) {
      *result = response.result();
      has_result = true;
    }
  }
  progress.Finish();
  writer.join();
  grpc::Status status = stream->Finish();
  if (!status.ok()) return ReportRpcError("create", status);
  if (!has_result) {
    return ReportRpcError(
        "create", grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without a result"));
  }
  return 0;
}

}  // namespace

int RunCreate(const CliContext& cli) {
  const std::string cmd = "create";
  std::string task_id;
  if (!TaskIdArg(cli, cmd, &task_id)) return 2;
  std::string path = absl::GetFlag(FLAGS_file);
  if (path.empty()) return ReportUsageError(cmd, "--file=PATH is required");
  std::string input_template = UnescapeFlagValue(absl::GetFlag(FLAGS_template));
  if (input_template.empty()) return ReportUsageError(cmd, "--template is required");
  auto format = DemonstrationsFormat(path);
  if (!format.ok()) return ReportUsageError(cmd, std::string(format.status().message()));
  auto options = FieldOptionsFromFlags(cli, input_template);
  if (!options.ok()) return ReportUsageError(cmd, std::string(options.status().message()));
  auto spec = TaskSpecFromFlags(input_template, options->labels);
  if (!spec.ok()) return ReportUsageError(cmd, std::string(spec.status().message()));
  int chunk = absl::GetFlag(FLAGS_chunk);
  if (chunk < 1) return ReportUsageError(cmd, "--chunk must be >= 1");
  auto demonstrations = LoadDemonstrations(path, *format, input_template, *options);
  if (!demonstrations.ok()) {
    return ReportUsageError(cmd, std::string(demonstrations.status().message()));
  }
  if (absl::GetFlag(FLAGS_dry_run)) {
    if (absl::Status s = PrintDryRun(*spec, *demonstrations, stdout); !s.ok()) {
      return ReportUsageError(cmd, std::string(s.message()));
    }
    return 0;
  }
  std::vector<v1::CreateTaskRequest> requests = ChunkCreateTaskRequests(
      task_id, *spec, absl::GetFlag(FLAGS_replace), *demonstrations, static_cast<size_t>(chunk));
  v1::CreateTaskResult result;
  if (int failed = Upload(cli, task_id, requests, &result); failed != 0) return failed;
  if (cli.json) {
    std::printf("%s\n", ToJson(result).c_str());
    return 0;
  }
  std::printf("%s %s (%zu demonstrations in %zu messages)\n",
              result.replaced()  ? "replaced"
              : result.created() ? "created"
                                 : "unchanged (identical content already registered):",
              task_id.c_str(), demonstrations->size(), requests.size());
  PrintTask(result.task());
  return 0;
}

int RunGet(const CliContext& cli) {
  std::string task_id;
  if (!TaskIdArg(cli, "get", &task_id)) return 2;
  auto stub = v1::ManyShot::NewStub(cli.channel);
  v1::GetTaskRequest request;
  request.set_task_id(task_id);
  v1::Task task;
  auto call = cli.NewCall(task_id);
  grpc::Status status = stub->GetTask(call.get(), request, &task);
  if (!status.ok()) return ReportRpcError("get", status);
  if (cli.json) {
    std::printf("%s\n", ToJson(task).c_str());
  } else {
    PrintTask(task);
  }
  return 0;
}

int RunList(const CliContext& cli) {
  if (!cli.args.empty()) return ReportUsageError("list", "takes no arguments");
  auto stub = v1::ManyShot::NewStub(cli.channel);
  v1::ListTasksRequest request;
  request.set_page_size(absl::GetFlag(FLAGS_page_size));
  v1::ListTasksResponse all;
  do {
    v1::ListTasksResponse page;
    auto call = cli.NewCall();
    grpc::Status status = stub->ListTasks(call.get(), request, &page);
    if (!status.ok()) return ReportRpcError("list", status);
    for (v1::Task& task : *page.mutable_tasks()) *all.add_tasks() = std::move(task);
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  if (cli.json) {
    std::printf("%s\n", ToJson(all).c_str());
    return 0;
  }
  std::printf("%-32s %-9s %8s %7s %6s %14s\n", "TASK", "STATE", "DEMOS", "GROUPS", "L",
              "CACHE_BYTES");
  for (const v1::Task& task : all.tasks()) {
    std::printf("%-32s %-9s %8llu %7llu %6u %14llu\n", task.task_id().c_str(),
                StateName(task.state()),
                static_cast<unsigned long long>(task.stats().demonstrations()),
                static_cast<unsigned long long>(task.stats().groups()), task.stats().group_length(),
                static_cast<unsigned long long>(task.stats().cache_bytes()));
  }
  return 0;
}

int RunDelete(const CliContext& cli) {
  std::string task_id;
  if (!TaskIdArg(cli, "delete", &task_id)) return 2;
  auto stub = v1::ManyShot::NewStub(cli.channel);
  v1::DeleteTaskRequest request;
  request.set_task_id(task_id);
  v1::DeleteTaskResponse response;
  auto call = cli.NewCall(task_id);
  grpc::Status status = stub->DeleteTask(call.get(), request, &response);
  if (!status.ok()) return ReportRpcError("delete", status);
  if (cli.json) {
    std::printf("%s\n", ToJson(response).c_str());
  } else {
    std::printf("deleted %s (%llu bytes freed)\n", task_id.c_str(),
                static_cast<unsigned long long>(response.freed_bytes()));
  }
  return 0;
}

}  // namespace manyshot::client
