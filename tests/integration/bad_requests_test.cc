// Bad requests against one real server: every case must fail with the documented gRPC status code
// and an actionable message (one naming the field, the offset, the index or the limit), and the
// server must answer a valid request afterwards.
#include <cmath>
#include <functional>
#include <limits>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/error_details.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

using grpc::StatusCode;

constexpr char kTask[] = "sst2";
constexpr char kNoLabels[] = "nolabels";

// A CreateTask stream of arbitrary messages; returns the final status.
grpc::Status CreateRaw(v1::ManyShot::Stub& stub, const std::vector<v1::CreateTaskRequest>& msgs) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub.CreateTask(&context);
  for (const auto& m : msgs) {
    if (!stream->Write(m)) break;
  }
  stream->WritesDone();
  v1::CreateTaskResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

// CreateTask with the SST-2 demonstrations and a spec changed by `edit`.
grpc::Status CreateWith(v1::ManyShot::Stub& stub, const std::string& task_id,
                        const std::function<void(v1::TaskSpec&)>& edit,
                        std::vector<v1::Demonstration> demos = Sst2Demonstrations(4)) {
  v1::TaskSpec spec = Sst2Spec(32);
  edit(spec);
  return CreateTask(stub, task_id, spec, demos).status;
}

grpc::Status CreateWithDemos(v1::ManyShot::Stub& stub,
                             const std::function<void(std::vector<v1::Demonstration>&)>& edit) {
  auto demos = Sst2Demonstrations(4);
  edit(demos);
  return CreateTask(stub, "bad-demos", Sst2Spec(32), demos).status;
}

grpc::Status Classify(v1::ManyShot::Stub& stub, const v1::ClassifyRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ClassifyResponse response;
  return stub.Classify(&context, request, &response);
}

grpc::Status ClassifyWith(v1::ManyShot::Stub& stub,
                          const std::function<void(v1::ClassifyRequest&)>& edit) {
  v1::ClassifyRequest request = ClassifyRequestFor(kTask, {"a delightful film"});
  edit(request);
  return Classify(stub, request);
}

grpc::Status ScoreWith(v1::ManyShot::Stub& stub,
                       const std::function<void(v1::ScoreRequest&)>& edit) {
  v1::ScoreRequest request;
  request.set_task_id(kTask);
  auto* item = request.add_items();
  item->mutable_input()->set_text("the cast");
  item->add_candidates(" weak");
  item->add_candidates(" strong");
  edit(request);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ScoreResponse response;
  return stub.Score(&context, request, &response);
}

grpc::Status GenerateWith(v1::ManyShot::Stub& stub,
                          const std::function<void(v1::GenerateRequest&)>& edit) {
  v1::GenerateRequest request;
  request.set_task_id(kTask);
  request.mutable_input()->set_text("a delightful film");
  request.mutable_options()->set_max_new_tokens(2);
  edit(request);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  return reader->Finish();
}

// The demonstrations with their answers as label text (for tasks without labels).
std::vector<v1::Demonstration> TextLabelled(std::vector<v1::Demonstration> demos) {
  for (auto& d : demos) d.set_label(d.label_index() == 1 ? " positive" : " negative");
  return demos;
}

// True while the server process has not exited.
bool Alive(ServerUnderTest& server) {
  return !server.process().Wait(std::chrono::milliseconds(0)).has_value();
}

struct BadRequest {
  std::string name;
  std::function<grpc::Status(v1::ManyShot::Stub&)> call;
  StatusCode code;
  std::string message;  // a substring the error message must contain
};

// An input over the test task's max_query_tokens (48).
std::string EightyWords() {
  std::string text;
  for (int i = 0; i < 80; ++i) text += "word ";
  return text;
}

std::vector<BadRequest> Cases() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<BadRequest> cases;
  auto add = [&](std::string name, std::function<grpc::Status(v1::ManyShot::Stub&)> call,
                 StatusCode code, std::string message) {
    cases.push_back({std::move(name), std::move(call), code, std::move(message)});
  };

  // ---- CreateTask: ids and stream shape.
  // A label that can never be scored is refused at create, quoted only in part.
  add(
      "create_label_longer_than_max_answer_tokens",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) {
          sp.set_labels(1, "one two three four five six seven eight nine ten eleven twelve");
        });
      },
      StatusCode::INVALID_ARGUMENT,
      "labels[1] \"one two three four five six seven eight nine ten...\" (62 bytes) is 12 tokens "
      "as an answer, more than max_answer_tokens 8, so it could never be scored");
  add(
      "create_empty_task_id", [](auto& s) { return CreateWith(s, "", [](auto&) {}); },
      StatusCode::INVALID_ARGUMENT, "task_id must be 1 to 128 characters");
  add(
      "create_task_id_with_slash", [](auto& s) { return CreateWith(s, "a/b", [](auto&) {}); },
      StatusCode::INVALID_ARGUMENT, "may only contain letters, digits");
  // Ids are checked before use and never echoed: a 1 MiB id gets a short message, a newline in an
  // id is named by its byte (and escaped in the request log line, checked below).
  const auto get_task = [](const std::string& id) {
    return [id](v1::ManyShot::Stub& s) {
      grpc::ClientContext context;
      v1::GetTaskRequest request;
      request.set_task_id(id);
      v1::Task task;
      return s.GetTask(&context, request, &task);
    };
  };
  add("get_task_id_of_1_mib", get_task(std::string(1 << 20, 'x')), StatusCode::INVALID_ARGUMENT,
      "task_id must be 1 to 128 characters (got 1048576 bytes)");
  add("get_task_id_with_a_newline", get_task("t\nforged log line"), StatusCode::INVALID_ARGUMENT,
      "(byte 0x0a at offset 1)");
  add(
      "create_task_id_200_chars",
      [](auto& s) { return CreateWith(s, std::string(200, 'x'), [](auto&) {}); },
      StatusCode::INVALID_ARGUMENT, "1 to 128 characters");
  add(
      "create_first_message_without_spec",
      [](auto& s) {
        v1::CreateTaskRequest first;
        first.set_task_id("nospec");
        for (const auto& d : Sst2Demonstrations(2)) *first.add_demonstrations() = d;
        return CreateRaw(s, {first});
      },
      StatusCode::INVALID_ARGUMENT, "must carry spec");
  add(
      "create_no_messages", [](auto& s) { return CreateRaw(s, {}); }, StatusCode::INVALID_ARGUMENT,
      "at least one message");
  add(
      "create_different_task_id_in_later_chunk",
      [](auto& s) {
        v1::CreateTaskRequest first;
        first.set_task_id("chunked");
        *first.mutable_spec() = Sst2Spec(32);
        *first.add_demonstrations() = Sst2Demonstrations(1)[0];
        v1::CreateTaskRequest second;
        second.set_task_id("other");
        *second.add_demonstrations() = Sst2Demonstrations(2)[1];
        return CreateRaw(s, {first, second});
      },
      StatusCode::INVALID_ARGUMENT, "same task_id");
  add(
      "create_same_id_different_content",
      [](auto& s) { return CreateTask(s, kTask, Sst2Spec(), Sst2Demonstrations(10)).status; },
      StatusCode::ALREADY_EXISTS, kTask);

  // ---- CreateTask: the spec.
  add(
      "spec_empty_input_template",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_input_template(""); }); },
      StatusCode::INVALID_ARGUMENT, "spec.input_template is required");
  add(
      "spec_unclosed_brace",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_input_template("Sentence: {text"); });
      },
      StatusCode::INVALID_ARGUMENT, "'{' at offset 10 has no closing '}'");
  add(
      "spec_stray_closing_brace",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_input_template("Sentence: {text} }"); });
      },
      StatusCode::INVALID_ARGUMENT, "'}' at offset 17");
  add(
      "spec_no_placeholder",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_input_template("Sentence:"); });
      },
      StatusCode::INVALID_ARGUMENT, "input_template has no placeholder");
  add(
      "spec_placeholder_not_provided",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) {
          sp.set_input_template("Premise: {premise}\nHypothesis: {hypothesis}\nLabel:");
        });
      },
      StatusCode::INVALID_ARGUMENT, "{premise}");
  add(
      "spec_answer_template_without_label",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_answer_template(" {answer}"); });
      },
      StatusCode::INVALID_ARGUMENT, "{label}");
  add(
      "spec_empty_label",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_labels(1, ""); }); },
      StatusCode::INVALID_ARGUMENT, "spec.labels[1] is empty");
  // Every string of a spec and a demonstration's label text is bounded by --max_input_bytes (512).
  const std::string too_long(513, 'x');
  add(
      "spec_label_over_max_input_bytes",
      [too_long](auto& s) {
        return CreateWith(s, "t", [too_long](auto& sp) { sp.set_labels(0, too_long); });
      },
      StatusCode::INVALID_ARGUMENT,
      "spec.labels[0] has 513 bytes, more than --max_input_bytes 512");
  add(
      "spec_answer_template_over_max_input_bytes",
      [too_long](auto& s) {
        return CreateWith(s, "t",
                          [too_long](auto& sp) { sp.set_answer_template(too_long + "{label}"); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.answer_template has 520 bytes");
  add(
      "spec_separator_over_max_input_bytes",
      [too_long](auto& s) {
        return CreateWith(s, "t", [too_long](auto& sp) { sp.set_separator(too_long); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.separator has 513 bytes");
  add(
      "spec_calibration_text_over_max_input_bytes",
      [too_long](auto& s) {
        return CreateWith(s, "t", [too_long](auto& sp) {
          sp.set_calibrate(true);
          sp.set_calibration_text(too_long);
        });
      },
      StatusCode::INVALID_ARGUMENT, "spec.calibration_text has 513 bytes");
  add(
      "demo_label_text_over_max_input_bytes",
      [too_long](auto& s) {
        return CreateWithDemos(s, [too_long](auto& d) { d[1].set_label(too_long); });
      },
      StatusCode::INVALID_ARGUMENT, "demonstrations[1].label has 513 bytes");
  add(
      "spec_unknown_kv_dtype",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_kv_dtype(static_cast<v1::KvDtype>(9)); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.kv_dtype 9 is not a known KV dtype");
  add(
      "spec_kv_dtype_other_than_the_servers",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_kv_dtype(v1::KV_DTYPE_BF16); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.kv_dtype asks for bf16 but this server stores");
  add(
      "spec_negative_rescale_factor",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_rescale_factor(-1); }); },
      StatusCode::INVALID_ARGUMENT, "rescale_factor");
  add(
      "spec_nan_rescale_factor",
      [nan](auto& s) {
        return CreateWith(s, "t", [nan](auto& sp) { sp.set_rescale_factor(nan); });
      },
      StatusCode::INVALID_ARGUMENT, "rescale_factor");
  add(
      "spec_tiny_rescale_factor",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_rescale_factor(1e-9); }); },
      StatusCode::INVALID_ARGUMENT, ">= 1e-6");
  add(
      "spec_group_length_too_large",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_group_length(2000); }); },
      StatusCode::INVALID_ARGUMENT, "context length 1024");
  add(
      "spec_group_length_1",
      [](auto& s) { return CreateWith(s, "t", [](auto& sp) { sp.set_group_length(1); }); },
      StatusCode::INVALID_ARGUMENT, "group_length 1 must be at least 2");
  add(
      "spec_unknown_mode",
      [](auto& s) {
        return CreateWith(s, "t", [](auto& sp) { sp.set_mode(static_cast<v1::Mode>(42)); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.mode 42");
  add(
      "spec_unknown_alignment",
      [](auto& s) {
        return CreateWith(s, "t",
                          [](auto& sp) { sp.set_alignment(static_cast<v1::Alignment>(9)); });
      },
      StatusCode::INVALID_ARGUMENT, "spec.alignment");
  add(
      "spec_calibrate_without_labels",
      [](auto& s) {
        return CreateWith(
            s, "t",
            [](auto& sp) {
              sp.clear_labels();
              sp.set_calibrate(true);
            },
            TextLabelled(Sst2Demonstrations(4)));
      },
      StatusCode::INVALID_ARGUMENT, "calibrate needs labels");

  // ---- CreateTask: the demonstrations.
  add(
      "demos_none", [](auto& s) { return CreateTask(s, "t", Sst2Spec(32), {}).status; },
      StatusCode::INVALID_ARGUMENT, "at least one demonstration");
  add(
      "demo_label_index_out_of_range",
      [](auto& s) { return CreateWithDemos(s, [](auto& d) { d[3].set_label_index(5); }); },
      StatusCode::INVALID_ARGUMENT, "demonstrations[3].label_index 5");
  add(
      "demo_without_answer",
      [](auto& s) { return CreateWithDemos(s, [](auto& d) { d[1].clear_answer(); }); },
      StatusCode::INVALID_ARGUMENT, "demonstrations[1] has neither label nor label_index");
  add(
      "demo_longer_than_group_under_reject",
      [](auto& s) {
        return CreateWithDemos(s, [](auto& d) {
          std::string text;
          for (int i = 0; i < 40; ++i) text += "long ";
          d[2].set_text(text);
        });
      },
      StatusCode::INVALID_ARGUMENT, "demonstration 2 has");
  add(
      "demo_text_over_max_input_bytes",
      [](auto& s) {
        return CreateWithDemos(s, [](auto& d) { d[0].set_text(std::string(600, 'a')); });
      },
      StatusCode::INVALID_ARGUMENT, "demonstrations[0].text has 600 bytes");

  // ---- Classify.
  add(
      "classify_unknown_task",
      [](auto& s) { return ClassifyWith(s, [](auto& r) { r.set_task_id("nope"); }); },
      StatusCode::NOT_FOUND, "task \"nope\" does not exist");
  add(
      "classify_empty_inputs",
      [](auto& s) { return ClassifyWith(s, [](auto& r) { r.clear_inputs(); }); },
      StatusCode::INVALID_ARGUMENT, "inputs is empty");
  add(
      "classify_too_many_inputs",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) {
          for (int i = 0; i < 8; ++i) r.add_inputs()->set_text("fine");
        });
      },
      StatusCode::INVALID_ARGUMENT, "more than --max_batch_inputs 8");
  add(
      "classify_input_over_max_input_bytes",
      [](auto& s) {
        return ClassifyWith(s,
                            [](auto& r) { r.mutable_inputs(0)->set_text(std::string(513, 'a')); });
      },
      StatusCode::INVALID_ARGUMENT,
      "inputs[0].text has 513 bytes, more than --max_input_bytes 512");
  add(
      "classify_field_over_max_input_bytes",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) {
          (*r.mutable_inputs(0)->mutable_fields())["text"] = std::string(700, 'b');
        });
      },
      StatusCode::INVALID_ARGUMENT, "inputs[0].fields[text]");
  add(
      "classify_query_over_max_query_tokens",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) { r.mutable_inputs(0)->set_text(EightyWords()); });
      },
      StatusCode::INVALID_ARGUMENT, "inputs[0]: the rendered input has");
  add(
      "classify_query_over_max_query_tokens_names_the_task_option",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) { r.mutable_inputs(0)->set_text(EightyWords()); });
      },
      StatusCode::INVALID_ARGUMENT,
      "more than max_query_tokens 48 (the task's spec.max_query_tokens, fixed when it was "
      "created: manyshot create --max_query_tokens=N");
  add(
      "classify_negative_rescale_factor",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) { r.mutable_options()->set_rescale_factor(-2); });
      },
      StatusCode::INVALID_ARGUMENT, "options.rescale_factor");
  add(
      "classify_nan_rescale_factor",
      [nan](auto& s) {
        return ClassifyWith(s, [nan](auto& r) { r.mutable_options()->set_rescale_factor(nan); });
      },
      StatusCode::INVALID_ARGUMENT, "options.rescale_factor");
  add(
      "classify_rescale_factor_in_parallel_mode",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) {
          r.mutable_options()->set_mode(v1::MODE_PARALLEL);
          r.mutable_options()->set_rescale_factor(2);
        });
      },
      StatusCode::INVALID_ARGUMENT,
      "applies to STRUCTURED mode only; this request runs in PARALLEL");
  add(
      "classify_rescale_factor_in_conventional_mode",
      [](auto& s) {
        return ClassifyWith(s, [](auto& r) {
          r.mutable_options()->set_mode(v1::MODE_CONVENTIONAL);
          r.mutable_options()->set_rescale_factor(2);
        });
      },
      StatusCode::INVALID_ARGUMENT, "this request runs in CONVENTIONAL mode");
  add(
      "classify_unknown_mode",
      [](auto& s) {
        return ClassifyWith(
            s, [](auto& r) { r.mutable_options()->set_mode(static_cast<v1::Mode>(42)); });
      },
      StatusCode::INVALID_ARGUMENT, "options.mode 42");
  add(
      "classify_task_without_labels",
      [](auto& s) { return ClassifyWith(s, [](auto& r) { r.set_task_id(kNoLabels); }); },
      StatusCode::FAILED_PRECONDITION, "no labels");

  // ---- Score.
  add(
      "score_no_items", [](auto& s) { return ScoreWith(s, [](auto& r) { r.clear_items(); }); },
      StatusCode::INVALID_ARGUMENT, "items is empty");
  add(
      "score_no_candidates",
      [](auto& s) { return ScoreWith(s, [](auto& r) { r.mutable_items(0)->clear_candidates(); }); },
      StatusCode::INVALID_ARGUMENT, "items[0].candidates must have 1 to --max_candidates 4");
  add(
      "score_too_many_candidates",
      [](auto& s) {
        return ScoreWith(s, [](auto& r) {
          for (int i = 0; i < 3; ++i) r.mutable_items(0)->add_candidates(" more");
        });
      },
      StatusCode::INVALID_ARGUMENT, "--max_candidates 4");
  add(
      "score_too_many_items",
      [](auto& s) {
        return ScoreWith(s, [](auto& r) {
          for (int i = 0; i < 8; ++i) *r.add_items() = r.items(0);
        });
      },
      StatusCode::INVALID_ARGUMENT, "more than --max_batch_inputs 8");
  add(
      "score_empty_candidate",
      [](auto& s) {
        return ScoreWith(s, [](auto& r) { r.mutable_items(0)->set_candidates(1, ""); });
      },
      StatusCode::INVALID_ARGUMENT, "candidate 1");
  add(
      "score_unknown_task",
      [](auto& s) { return ScoreWith(s, [](auto& r) { r.set_task_id("nope"); }); },
      StatusCode::NOT_FOUND, "\"nope\"");

  // ---- Generate.
  add(
      "generate_too_many_new_tokens",
      [](auto& s) {
        return GenerateWith(s, [](auto& r) { r.mutable_options()->set_max_new_tokens(17); });
      },
      StatusCode::INVALID_ARGUMENT, "more than --max_new_tokens 16");
  add(
      "generate_more_new_tokens_than_the_task_answer_room",
      [](auto& s) {
        // A 40-word input leaves fewer than 15 of the 48 + 8 tokens of room.
        return GenerateWith(s, [](auto& r) {
          r.mutable_input()->set_text(EightyWords().substr(0, 200));
          r.mutable_options()->set_max_new_tokens(15);
        });
      },
      StatusCode::INVALID_ARGUMENT,
      "tokens this input leaves for an answer (max_query_tokens 48 + max_answer_tokens 8 - the "
      "input's ");
  add(
      "generate_beam_width_above_max",
      [](auto& s) {
        return GenerateWith(s, [](auto& r) {
          r.mutable_options()->set_strategy(v1::DECODING_STRATEGY_BEAM);
          r.mutable_options()->set_beam_width(9);
        });
      },
      StatusCode::INVALID_ARGUMENT, "--max_beam_width 8");
  add(
      "generate_empty_stop_string",
      [](auto& s) { return GenerateWith(s, [](auto& r) { r.mutable_options()->add_stop(""); }); },
      StatusCode::INVALID_ARGUMENT, "options.stop has an empty string");
  add(
      "generate_nan_length_penalty",
      [nan](auto& s) {
        return GenerateWith(s, [nan](auto& r) { r.mutable_options()->set_length_penalty(nan); });
      },
      StatusCode::INVALID_ARGUMENT, "options.length_penalty");
  add(
      "generate_huge_length_penalty",
      [](auto& s) {
        return GenerateWith(s, [](auto& r) {
          r.mutable_options()->set_strategy(v1::DECODING_STRATEGY_BEAM);
          r.mutable_options()->set_length_penalty(400);
        });
      },
      StatusCode::INVALID_ARGUMENT,
      "options.length_penalty must be a finite number from -10 to 10");
  add(
      "generate_unknown_strategy",
      [](auto& s) {
        return GenerateWith(s, [](auto& r) {
          r.mutable_options()->set_strategy(static_cast<v1::DecodingStrategy>(9));
        });
      },
      StatusCode::INVALID_ARGUMENT, "options.strategy 9 is not a known strategy");
  add(
      "create_second_spec",
      [](auto& s) {
        grpc::ClientContext context;
        auto stream = s.CreateTask(&context);
        v1::CreateTaskRequest first;
        first.set_task_id("second-spec");
        *first.mutable_spec() = Sst2Spec(32);
        for (const auto& d : Sst2Demonstrations(2)) *first.add_demonstrations() = d;
        v1::CreateTaskRequest second;
        *second.mutable_spec() = Sst2Spec(48);
        for (const auto& d : Sst2Demonstrations(2)) *second.add_demonstrations() = d;
        stream->Write(first);
        stream->Write(second);
        stream->WritesDone();
        v1::CreateTaskResponse response;
        while (stream->Read(&response)) {
        }
        return stream->Finish();
      },
      StatusCode::INVALID_ARGUMENT, "carries a second spec");
  add(
      "generate_unknown_task",
      [](auto& s) { return GenerateWith(s, [](auto& r) { r.set_task_id("nope"); }); },
      StatusCode::NOT_FOUND, "\"nope\"");
  add(
      "generate_query_over_max_query_tokens",
      [](auto& s) {
        return GenerateWith(s, [](auto& r) { r.mutable_input()->set_text(EightyWords()); });
      },
      StatusCode::INVALID_ARGUMENT, "max_query_tokens 48");

  // ---- GetTask / DeleteTask.
  add(
      "get_unknown_task",
      [](auto& s) {
        grpc::ClientContext context;
        v1::GetTaskRequest request;
        request.set_task_id("nope");
        v1::Task task;
        return s.GetTask(&context, request, &task);
      },
      StatusCode::NOT_FOUND, "task \"nope\" does not exist");
  add(
      "delete_unknown_task",
      [](auto& s) {
        grpc::ClientContext context;
        v1::DeleteTaskRequest request;
        request.set_task_id("nope");
        v1::DeleteTaskResponse response;
        return s.DeleteTask(&context, request, &response);
      },
      StatusCode::NOT_FOUND, "task \"nope\" does not exist");
  return cases;
}

TEST(BadRequestsTest, EveryBadRequestFailsWithItsCodeAndAnActionableMessage) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data",
                         {"--max_batch_inputs=8", "--max_input_bytes=512", "--max_candidates=4",
                          "--max_new_tokens=16", "--max_beam_width=8"});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());

  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  v1::TaskSpec no_labels = Sst2Spec();
  no_labels.clear_labels();
  auto unlabelled = CreateTask(*stub, kNoLabels, no_labels, TextLabelled(Sst2Demonstrations(4)));
  ASSERT_TRUE(unlabelled.status.ok()) << unlabelled.status.error_message();

  const std::vector<BadRequest> cases = Cases();
  EXPECT_GE(cases.size(), 30u);
  for (const BadRequest& c : cases) {
    SCOPED_TRACE(c.name);
    const grpc::Status status = c.call(*stub);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": got code " << status.error_code()
                                           << " \"" << status.error_message() << "\"";
    EXPECT_NE(status.error_message().find(c.message), std::string::npos)
        << c.name << ": message \"" << status.error_message() << "\" lacks \"" << c.message << "\"";
    // Every error carries the google.rpc details: a stable reason, and the field when invalid.
    const ErrorDetails d = DetailsOf(status);
    EXPECT_TRUE(d.present) << c.name;
    EXPECT_EQ(d.code, static_cast<int>(c.code)) << c.name;
    EXPECT_TRUE(IsUpperSnake(d.reason)) << c.name << ": reason \"" << d.reason << "\"";
    EXPECT_EQ(d.domain, "manyshot.v1") << c.name;
    if (c.code == StatusCode::INVALID_ARGUMENT) {
      EXPECT_EQ(d.fields.size(), 1u) << c.name;
    }
    EXPECT_LT(status.error_message().size(), 2000u) << c.name << ": unbounded message";
    ASSERT_TRUE(Alive(server)) << c.name << " killed the server\n" << server.Stderr();
  }

  // The request log escapes control characters: no line of the log starts with the forged text.
  EXPECT_EQ(server.Stderr().find("\nforged log line"), std::string::npos) << server.Stderr();
  EXPECT_NE(server.Stderr().find("task=t\\x0aforged log line"), std::string::npos);

  // Invalid UTF-8 in a proto3 string: INVALID_ARGUMENT naming the field (wire_errors_test.cc has
  // every method and stream).
  {
    grpc::ClientContext context;
    v1::ClassifyResponse response;
    const grpc::Status status =
        stub->Classify(&context, ClassifyRequestFor(kTask, {"bad \xff\xfe text"}), &response);
    EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("inputs[0].text is not valid UTF-8"), std::string::npos)
        << status.error_message();
    ASSERT_TRUE(Alive(server)) << server.Stderr();
  }

  // None of the failed creations left a task behind.
  grpc::ClientContext lc;
  v1::ListTasksResponse listed;
  ASSERT_TRUE(stub->ListTasks(&lc, v1::ListTasksRequest(), &listed).ok());
  EXPECT_EQ(listed.tasks_size(), 2);

  // Still healthy: a valid Classify succeeds.
  grpc::ClientContext cc;
  v1::ClassifyResponse classified;
  const grpc::Status ok = stub->Classify(
      &cc, ClassifyRequestFor(kTask, {"a delightful film", "a dull mess"}), &classified);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(classified.results_size(), 2);
  EXPECT_TRUE(Alive(server));
}

}  // namespace
}  // namespace manyshot::testing
