// T5 through the gRPC API: a real server (ServerApp) on 127.0.0.1 with an
// ephemeral port serves a tiny random T5 directory (make-tiny-t5's writer) with a hand-made
// Unigram tokenizer.json, for both T5 configs (v1.0: relu, tied head; v1.1: gated-gelu, untied).
// Every score and token the API returns is compared with the engine called directly on its own
// copy of the model (engine/t5/prompt_modes.h): CONVENTIONAL, SAICL, FID, ENSEMBLE and GROUP_FID
// tasks; Classify, StreamClassify, Score and Generate; the modes each architecture refuses; the
// task record surviving a restart; and permutation invariance of the encoder-decoder modes through
// the API.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "engine/backends/backend_factory.h"
#include "engine/model/synthetic/tiny_t5_model.h"
#include "engine/serving/encoder_decoder_model.h"
#include "engine/t5/prompt_modes.h"
#include "engine/t5/t5_generation.h"
#include "engine/t5/t5_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/api_to_engine.h"
#include "server/server_app.h"
#include "tests/engine/model/temp_dir.h"
#include "tests/engine/support/unigram_tokenizer_json.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;

using manyshot::testing::TempDir;

// T5's special ids (pad 0, eos 1, unk 2), then "▁", letters, digits, punctuation and some words,
// each scored so that whole words win over letters, then fillers to the model's vocabulary size.
void WriteUnigramTokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::array();
  vocab.push_back({"<pad>", 0.0});
  vocab.push_back({"</s>", 0.0});
  vocab.push_back({"<unk>", 0.0});
  vocab.push_back({"\u2581", -2.0});
  for (char c = 'a'; c <= 'z'; ++c) vocab.push_back({std::string(1, c), -4.0});
  for (char c = 'A'; c <= 'Z'; ++c) vocab.push_back({std::string(1, c), -5.0});
  for (char c = '0'; c <= '9'; ++c) vocab.push_back({std::string(1, c), -5.0});
  for (const char* p : {":", ".", ",", "!", "?", "'"}) vocab.push_back({p, -3.0});
  for (const char* w : {"good", "bad", "movie", "great", "terrible", "plot", "film", "fun", "dull",
                        "Sentence", "Label", "positive", "negative", "the", "was", "a", "it"}) {
    vocab.push_back({std::string("\u2581") + w, -1.0});
  }
  // Filler words up to the model's 512 ids, so that every id a random decoder generates has text
  // (stop strings match decoded text). No input, template or label has a "q".
  for (int i = 0; vocab.size() < 512; ++i) {
    vocab.push_back({"\u2581q" + std::to_string(i), -10.0});
  }
  manyshot::testing::WriteUnigramTokenizerJson(
      dir, vocab, R"({"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"})");
}

// The two configs of tests/golden/t5_v1_0.json and t5_v1_1.json.
fs::path WriteTinyT5(const fs::path& dir, bool v1_1) {
  TinyT5Spec spec;
  T5Config& c = spec.config;
  c.vocab_size = 512;
  c.d_model = 64;
  c.d_kv = 16;
  c.d_ff = 128;
  c.num_layers = 2;
  c.num_decoder_layers = 2;
  c.num_heads = 4;
  c.relative_attention_num_buckets = 32;
  c.relative_attention_max_distance = 128;
  c.feed_forward = v1_1 ? T5FeedForward::kGatedGelu : T5FeedForward::kRelu;
  c.tie_word_embeddings = !v1_1;
  spec.seed = v1_1 ? 12 : 11;
  const fs::path model = dir / "model";
  EXPECT_TRUE(WriteTinyT5Model(spec, model).ok());
  WriteUnigramTokenizer(model);
  return model;
}

ServerConfig ConfigFor(const fs::path& data_dir, const fs::path& model_dir) {
  ServerConfig config;
  config.listen_address = "127.0.0.1:0";
  config.metrics_address = "";
  config.data_dir = data_dir.string();
  config.model_dir = model_dir.string();
  config.backend = "cpu";
  config.threads = 1;
  return config;
}

struct Running {
  std::unique_ptr<ServerApp> app;
  std::unique_ptr<v1::ManyShot::Stub> stub;
};

Running Start(const ServerConfig& config) {
  Running r;
  auto app = ServerApp::Start(config);
  EXPECT_TRUE(app.ok()) << app.status();
  if (!app.ok()) return r;
  r.app = *std::move(app);
  r.stub = v1::ManyShot::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(r.app->grpc_port()), grpc::InsecureChannelCredentials()));
  return r;
}

v1::TaskSpec SpecFor(v1::Mode mode, uint32_t groups = 0) {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_mode(mode);
  spec.set_groups(groups);
  return spec;
}

const std::vector<std::pair<std::string, std::string>> kDemos = {
    {"the movie was great", "positive"},   {"a dull plot", "negative"}, {"it was fun", "positive"},
    {"the film was terrible", "negative"}, {"a good film", "positive"}, {"bad movie", "negative"}};

std::vector<v1::Demonstration> Demonstrations(const std::vector<size_t>& order) {
  std::vector<v1::Demonstration> out;
  for (size_t i : order) {
    v1::Demonstration d;
    d.set_text(kDemos[i].first);
    d.set_label(kDemos[i].second);
    out.push_back(d);
  }
  return out;
}

std::vector<size_t> InOrder() { return {0, 1, 2, 3, 4, 5}; }

grpc::Status CreateTask(v1::ManyShot::Stub& stub, const std::string& id, const v1::TaskSpec& spec,
                        const std::vector<v1::Demonstration>& demos) {
  grpc::ClientContext context;
  auto stream = stub.CreateTask(&context);
  v1::CreateTaskRequest request;
  request.set_task_id(id);
  *request.mutable_spec() = spec;
  for (const auto& d : demos) *request.add_demonstrations() = d;
  stream->Write(request);
  stream->WritesDone();
  v1::CreateTaskResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

const std::vector<std::string> kInputs = {"a great film", "the plot was bad", "fun"};

v1::ClassifyResponse Classify(v1::ManyShot::Stub& stub, const std::string& id, grpc::Status* status,
                              v1::Mode override_mode = v1::MODE_UNSPECIFIED) {
  grpc::ClientContext context;
  v1::ClassifyRequest request;
  request.set_task_id(id);
  for (const auto& text : kInputs) request.add_inputs()->set_text(text);
  request.mutable_options()->set_mode(override_mode);
  v1::ClassifyResponse response;
  *status = stub.Classify(&context, request, &response);
  return response;
}

// The engine on its own copy of the model: each input's label scores, computed with
// EncodeT5Prompts / ScoreT5Prompts from the tokens the task renders.
class DirectEngine {
 public:
  explicit DirectEngine(const fs::path& model_dir) {
    backend_ = *CreateBackend(BackendKind::kCpu, 0, 1);
    auto model = T5Model::Load(model_dir, *backend_);
    EXPECT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    tokenizer_ = *LoadTokenizer(model_dir);
  }

  std::unique_ptr<T5Task> Task(const v1::TaskSpec& spec,
                               const std::vector<v1::Demonstration>& demos) const {
    auto served_options = ToServedTaskOptions(spec, ServerConfig());
    EXPECT_TRUE(served_options.ok()) << served_options.status();
    const T5TaskOptions options = manyshot::ToT5TaskOptions(*served_options);
    std::vector<Example> examples;
    for (const auto& d : demos) examples.push_back({d.text(), {}, d.label()});
    auto task = T5Task::Prepare(*model_, *tokenizer_, options, examples);
    EXPECT_TRUE(task.ok()) << task.status();
    return task.ok() ? *std::move(task) : nullptr;
  }

  // [input][candidate] mean and sum log-probs.
  std::vector<std::vector<T5CandidateScore>> Scores(const T5Task& task,
                                                    const std::vector<std::string>& inputs,
                                                    const std::vector<std::string>& answers) const {
    std::vector<std::vector<T5CandidateScore>> out;
    for (const auto& text : inputs) {
      auto query = task.QueryTokens({text, {}, ""});
      EXPECT_TRUE(query.ok()) << query.status();
      std::vector<std::vector<int32_t>> candidates;
      for (const auto& a : answers) candidates.push_back(*task.TargetTokens(a));
      auto encoding = EncodeT5Prompts(*model_, task.demonstrations(), task.options().mode, *query);
      EXPECT_TRUE(encoding.ok()) << encoding.status();
      auto scores = ScoreT5Prompts(*model_, *encoding, candidates);
      EXPECT_TRUE(scores.ok()) << scores.status();
      out.push_back(*scores);
    }
    return out;
  }

  T5Generation Greedy(const T5Task& task, const std::string& input, int64_t max_new) const {
    auto query = task.QueryTokens({input, {}, ""});
    auto encoding = EncodeT5Prompts(*model_, task.demonstrations(), task.options().mode, *query);
    EXPECT_TRUE(encoding.ok()) << encoding.status();
    auto generated = GenerateT5Prompts(*model_, *encoding, max_new);
    EXPECT_TRUE(generated.ok()) << generated.status();
    return *generated;
  }

  // GenerateT5 on the task's decoder input for `input`, stop strings decoded by the tokenizer.
  GenerationOutput Generate(const T5Task& task, const std::string& input,
                            GenerationParams params) const {
    auto query = task.QueryTokens({input, {}, ""});
    auto encoding = EncodeT5Prompts(*model_, task.demonstrations(), task.options().mode, *query);
    EXPECT_TRUE(encoding.ok()) << encoding.status();
    params.decode = [this](const std::vector<int32_t>& ids) { return Decode(ids); };
    auto generated = GenerateT5(*model_, encoding->decoder, 0, params);
    EXPECT_TRUE(generated.ok()) << generated.status();
    return generated.ok() ? *std::move(generated) : GenerationOutput();
  }

  std::string Decode(const std::vector<int32_t>& ids) const {
    auto text = tokenizer_->Decode(ids);
    return text.ok() ? *text : std::string();
  }

  double SumLogprob(const T5Task& task, const std::string& input,
                    const std::vector<int32_t>& tokens) const {
    auto query = task.QueryTokens({input, {}, ""});
    auto encoding = EncodeT5Prompts(*model_, task.demonstrations(), task.options().mode, *query);
    auto scores = ScoreT5Prompts(*model_, *encoding, {tokens});
    return (*scores)[0].sum_logprob;
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<T5Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

void ExpectClassifyEqualsEngine(const v1::ClassifyResponse& response,
                                const std::vector<std::vector<T5CandidateScore>>& expected) {
  ASSERT_EQ(response.results_size(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& r = response.results(static_cast<int>(i));
    ASSERT_EQ(r.scores_size(), 2);
    for (int l = 0; l < 2; ++l) {
      EXPECT_NEAR(r.scores(l).mean_logprob(), expected[i][static_cast<size_t>(l)].mean_logprob,
                  1e-6)
          << "input " << i << " label " << l;
      EXPECT_NEAR(r.scores(l).sum_logprob(), expected[i][static_cast<size_t>(l)].sum_logprob, 1e-6);
      EXPECT_EQ(r.scores(l).num_tokens(), expected[i][static_cast<size_t>(l)].tokens);
    }
    const bool positive = expected[i][1].mean_logprob > expected[i][0].mean_logprob;
    EXPECT_EQ(r.label_index(), positive ? 1u : 0u);
  }
}

class T5ServingTest : public ::testing::TestWithParam<bool> {};

TEST_P(T5ServingTest, ConventionalTaskAnswersAsTheEngine) {
  TempDir dir(GetParam() ? "t5_conv_v1_1_" : "t5_conv_v1_0_");
  const fs::path model_dir = WriteTinyT5(dir.path(), GetParam());
  Running server = Start(ConfigFor(dir.path() / "data", model_dir));
  ASSERT_TRUE(server.app);
  DirectEngine engine(model_dir);

  grpc::ClientContext info_context;
  v1::ServerInfo info;
  ASSERT_TRUE(server.stub->GetServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.model().model_type(), "t5");
  EXPECT_TRUE(info.model().encoder_decoder());
  EXPECT_EQ(info.model().hidden_size(), 64u);
  EXPECT_EQ(info.model().tokenizer_kind(), "unigram");

  const v1::TaskSpec spec = SpecFor(v1::MODE_CONVENTIONAL);
  const auto demos = Demonstrations(InOrder());
  ASSERT_TRUE(CreateTask(*server.stub, "conv", spec, demos).ok());
  auto task = engine.Task(spec, demos);
  ASSERT_NE(task, nullptr);
  const auto expected = engine.Scores(*task, kInputs, {" negative", " positive"});

  grpc::Status status;
  const v1::ClassifyResponse classified = Classify(*server.stub, "conv", &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectClassifyEqualsEngine(classified, expected);

  // StreamClassify: the same scores, request by request.
  {
    grpc::ClientContext context;
    auto stream = server.stub->StreamClassify(&context);
    for (size_t i = 0; i < kInputs.size(); ++i) {
      v1::ClassifyRequest request;
      request.set_task_id("conv");
      request.set_request_id(std::to_string(i));
      request.add_inputs()->set_text(kInputs[i]);
      ASSERT_TRUE(stream->Write(request));
    }
    stream->WritesDone();
    // Responses come in completion order; request_id says which input each answers.
    std::vector<v1::ClassifyResult> by_input(kInputs.size());
    v1::ClassifyResponse response;
    size_t answered = 0;
    while (stream->Read(&response)) {
      ASSERT_EQ(response.error().code(), 0) << response.error().message();
      ASSERT_EQ(response.results_size(), 1);
      by_input.at(std::stoul(response.request_id())) = response.results(0);
      ++answered;
    }
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(answered, kInputs.size());
    v1::ClassifyResponse all;
    for (const auto& r : by_input) *all.add_results() = r;
    ExpectClassifyEqualsEngine(all, expected);
  }

  // Score: free candidates, each its tokens and eos.
  {
    grpc::ClientContext context;
    v1::ScoreRequest request;
    request.set_task_id("conv");
    auto* item = request.add_items();
    item->mutable_input()->set_text(kInputs[0]);
    item->add_candidates("great");
    item->add_candidates("bad movie");
    v1::ScoreResponse response;
    ASSERT_TRUE(server.stub->Score(&context, request, &response).ok());
    const auto scores = engine.Scores(*task, {kInputs[0]}, {"great", "bad movie"});
    ASSERT_EQ(response.results_size(), 1);
    ASSERT_EQ(response.results(0).candidates_size(), 2);
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(response.results(0).candidates(c).mean_logprob(),
                  scores[0][static_cast<size_t>(c)].mean_logprob, 1e-6);
      EXPECT_EQ(response.results(0).candidates(c).num_tokens(),
                scores[0][static_cast<size_t>(c)].tokens);
    }
  }

  // Generate: greedy tokens as the engine's, streamed one by one, and their log-probability.
  {
    grpc::ClientContext context;
    v1::GenerateRequest request;
    request.set_task_id("conv");
    request.mutable_input()->set_text(kInputs[1]);
    request.mutable_options()->set_max_new_tokens(8);
    auto reader = server.stub->Generate(&context, request);
    v1::GenerateResponse response;
    std::vector<int32_t> streamed;
    double streamed_sum = 0;
    v1::GenerationResult result;
    while (reader->Read(&response)) {
      if (response.has_token()) {
        streamed.push_back(response.token().token_id());
        streamed_sum += response.token().logprob();
      }
      if (response.has_result()) result = response.result();
    }
    ASSERT_TRUE(reader->Finish().ok());
    const T5Generation expected_tokens = engine.Greedy(*task, kInputs[1], 8);
    EXPECT_EQ(std::vector<int32_t>(result.token_ids().begin(), result.token_ids().end()),
              expected_tokens.tokens);
    EXPECT_EQ(streamed, expected_tokens.tokens);
    std::vector<int32_t> scored = expected_tokens.tokens;
    if (expected_tokens.ended_with_eos) scored.push_back(1);
    EXPECT_EQ(result.finish_reason(), expected_tokens.ended_with_eos
                                          ? v1::FINISH_REASON_EOS
                                          : v1::FINISH_REASON_MAX_TOKENS);
    // The server sums each step's log-probability (one token per decoder pass), the engine here
    // scores the whole sequence in one pass: equal up to f32 rounding.
    if (!scored.empty()) {
      EXPECT_NEAR(result.sum_logprob(), engine.SumLogprob(*task, kInputs[1], scored), 1e-5);
    }
    if (!expected_tokens.ended_with_eos) {
      EXPECT_NEAR(streamed_sum, result.sum_logprob(), 1e-6);
    }
  }
}

TEST_P(T5ServingTest, SaiclFidEnsembleGroupFidAnswerAsTheEngineAndIgnoreOrder) {
  TempDir dir(GetParam() ? "t5_modes_v1_1_" : "t5_modes_v1_0_");
  const fs::path model_dir = WriteTinyT5(dir.path(), GetParam());
  Running server = Start(ConfigFor(dir.path() / "data", model_dir));
  ASSERT_TRUE(server.app);
  DirectEngine engine(model_dir);
  const std::vector<size_t> shuffled = {3, 0, 5, 1, 4, 2};

  struct Case {
    v1::Mode mode;
    uint32_t groups;
    bool order_free;  // the paper's permutation invariance
    // GetTask's stats.demonstrations_per_group: the demonstrations of each prompt the encoder
    // reads (stats.groups is their count).
    std::vector<uint32_t> per_prompt;
  };
  for (const Case& c :
       {Case{v1::MODE_SAICL, 0, true, {6}}, Case{v1::MODE_FID, 0, true, {1, 1, 1, 1, 1, 1}},
        Case{v1::MODE_ENSEMBLE, 0, true, {1, 1, 1, 1, 1, 1}},
        Case{v1::MODE_ENSEMBLE, 4, false, {2, 2, 1, 1}},
        Case{v1::MODE_GROUP_FID, 4, false, {2, 2, 1, 1}},
        Case{v1::MODE_CONVENTIONAL, 0, false, {6}}}) {
    SCOPED_TRACE(ModeName(c.mode));
    const v1::TaskSpec spec = SpecFor(c.mode, c.groups);
    const std::string id =
        absl::AsciiStrToLower(ModeName(c.mode)) + (c.groups ? "-g" + std::to_string(c.groups) : "");
    ASSERT_TRUE(CreateTask(*server.stub, id, spec, Demonstrations(InOrder())).ok());
    auto task = engine.Task(spec, Demonstrations(InOrder()));
    ASSERT_NE(task, nullptr);
    grpc::Status status;
    const v1::ClassifyResponse in_order = Classify(*server.stub, id, &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectClassifyEqualsEngine(in_order, engine.Scores(*task, kInputs, {" negative", " positive"}));

    // GetTask says what the task keeps between queries.
    grpc::ClientContext context;
    v1::GetTaskRequest get;
    get.set_task_id(id);
    v1::Task shown;
    ASSERT_TRUE(server.stub->GetTask(&context, get, &shown).ok());
    EXPECT_NE(shown.stats().cache_holds().find("first encoder layer"), std::string::npos);
    EXPECT_EQ(shown.stats().demonstrations(), 6u);
    EXPECT_EQ(shown.stats().cache_bytes(), 0u);
    EXPECT_EQ(shown.stats().tiers_size(), 0);  // nothing in the KV tiers
    EXPECT_EQ(shown.stats().groups(), c.per_prompt.size());
    EXPECT_EQ(std::vector<uint32_t>(shown.stats().demonstrations_per_group().begin(),
                                    shown.stats().demonstrations_per_group().end()),
              c.per_prompt);

    if (c.groups != 0) continue;  // groups change with the order
    ASSERT_TRUE(CreateTask(*server.stub, id + "-shuffled", spec, Demonstrations(shuffled)).ok());
    const v1::ClassifyResponse reordered = Classify(*server.stub, id + "-shuffled", &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    double largest = 0;
    for (int i = 0; i < in_order.results_size(); ++i) {
      for (int l = 0; l < 2; ++l) {
        largest = std::max(largest, std::abs(in_order.results(i).scores(l).mean_logprob() -
                                             reordered.results(i).scores(l).mean_logprob()));
      }
    }
    if (c.order_free) {
      EXPECT_LE(largest, 1e-5);
    } else {
      EXPECT_GT(largest, 1e-5) << "CONVENTIONAL (full attention) should depend on the order";
    }
  }

  // A request may run a T5 task in CONVENTIONAL mode: the SAICL task then answers as the
  // CONVENTIONAL task of the same demonstrations.
  {
    grpc::Status status;
    const v1::ClassifyResponse overridden =
        Classify(*server.stub, "saicl", &status, v1::MODE_CONVENTIONAL);
    ASSERT_TRUE(status.ok()) << status.error_message();
    const v1::ClassifyResponse conventional = Classify(*server.stub, "conventional", &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    for (int i = 0; i < conventional.results_size(); ++i) {
      for (int l = 0; l < 2; ++l) {
        EXPECT_EQ(overridden.results(i).scores(l).mean_logprob(),
                  conventional.results(i).scores(l).mean_logprob());
      }
    }
  }

  // ENSEMBLE has no single decoder input to generate from.
  grpc::ClientContext context;
  v1::GenerateRequest request;
  request.set_task_id("ensemble");
  request.mutable_input()->set_text("fun");
  auto reader = server.stub->Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("ENSEMBLE"), std::string::npos) << status.error_message();
}

struct ServerGeneration {
  grpc::Status status;
  v1::GenerationResult result;
  std::vector<int32_t> streamed;  // the token messages' ids
};

ServerGeneration GenerateThroughServer(v1::ManyShot::Stub& stub, const std::string& id,
                                       const std::string& input,
                                       const v1::GenerationOptions& options) {
  grpc::ClientContext context;
  v1::GenerateRequest request;
  request.set_task_id(id);
  request.mutable_input()->set_text(input);
  *request.mutable_options() = options;
  auto reader = stub.Generate(&context, request);
  ServerGeneration out;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_token()) out.streamed.push_back(response.token().token_id());
    if (response.has_result()) out.result = response.result();
  }
  out.status = reader->Finish();
  return out;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kMaxTokens:
      return v1::FINISH_REASON_MAX_TOKENS;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void ExpectGenerationEquals(const ServerGeneration& got, const GenerationOutput& expected) {
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(std::vector<int32_t>(got.result.token_ids().begin(), got.result.token_ids().end()),
            expected.tokens);
  EXPECT_EQ(got.streamed, expected.tokens);
  EXPECT_EQ(got.result.finish_reason(), ToProto(expected.reason));
  EXPECT_NEAR(got.result.sum_logprob(), expected.sum_logprob, 1e-5);
  EXPECT_NEAR(got.result.score(), expected.score, 1e-5);
}

TEST_P(T5ServingTest, BeamSearchAndStopStringsGenerateAsGenerateT5) {
  TempDir dir(GetParam() ? "t5_beam_v1_1_" : "t5_beam_v1_0_");
  const fs::path model_dir = WriteTinyT5(dir.path(), GetParam());
  Running server = Start(ConfigFor(dir.path() / "data", model_dir));
  ASSERT_TRUE(server.app);
  DirectEngine engine(model_dir);
  constexpr int kMaxNew = 8;

  for (const auto& [mode, groups] : {std::pair{v1::MODE_SAICL, 0u}, {v1::MODE_GROUP_FID, 2u}}) {
    SCOPED_TRACE(ModeName(mode));
    const v1::TaskSpec spec = SpecFor(mode, groups);
    const std::string id = absl::AsciiStrToLower(ModeName(mode));
    ASSERT_TRUE(CreateTask(*server.stub, id, spec, Demonstrations(InOrder())).ok());
    auto task = engine.Task(spec, Demonstrations(InOrder()));
    ASSERT_NE(task, nullptr);

    // Beam search of width 3: the server's result is GenerateT5's on the same decoder input.
    v1::GenerationOptions beam_options;
    beam_options.set_strategy(v1::DECODING_STRATEGY_BEAM);
    beam_options.set_beam_width(3);
    beam_options.set_length_penalty(0.6);
    beam_options.set_max_new_tokens(kMaxNew);
    GenerationParams beam;
    beam.beam_search = true;
    beam.beam_width = 3;
    beam.length_penalty = 0.6;
    beam.max_new_tokens = kMaxNew;
    beam.eos_id = 1;
    GenerationParams greedy = beam;
    greedy.beam_search = false;
    int beam_beats_greedy = 0;
    for (const std::string& input : kInputs) {
      SCOPED_TRACE(input);
      const GenerationOutput expected = engine.Generate(*task, input, beam);
      ExpectGenerationEquals(GenerateThroughServer(*server.stub, id, input, beam_options),
                             expected);
      beam_beats_greedy += expected.tokens != engine.Generate(*task, input, greedy).tokens;
    }
    // Else a server that ignored the strategy would pass too.
    EXPECT_GT(beam_beats_greedy, 0) << "beam search chose greedy's output for every input";

    // A stop string: the text of the greedy output's shortest non-empty prefix that is not the
    // whole output. Generation ends right there, the stop string cut from the text.
    bool stopped_one = false;
    for (const std::string& input : kInputs) {
      SCOPED_TRACE(input);
      const GenerationOutput unstopped = engine.Generate(*task, input, greedy);
      size_t cut = 1;
      std::string stop;
      for (; cut < unstopped.tokens.size(); ++cut) {
        stop = engine.Decode(
            {unstopped.tokens.begin(), unstopped.tokens.begin() + static_cast<int64_t>(cut)});
        if (!stop.empty()) break;
      }
      if (stop.empty() || cut >= unstopped.tokens.size()) continue;
      v1::GenerationOptions options;
      options.set_max_new_tokens(kMaxNew);
      options.add_stop(stop);
      const ServerGeneration got = GenerateThroughServer(*server.stub, id, input, options);
      ASSERT_TRUE(got.status.ok()) << got.status.error_message();
      EXPECT_EQ(got.result.finish_reason(), v1::FINISH_REASON_STOP_STRING);
      EXPECT_EQ(std::vector<int32_t>(got.result.token_ids().begin(), got.result.token_ids().end()),
                std::vector<int32_t>(unstopped.tokens.begin(),
                                     unstopped.tokens.begin() + static_cast<int64_t>(cut)));
      EXPECT_EQ(got.result.text(), "");  // the whole text was the stop string
      GenerationParams with_stop = greedy;
      with_stop.stop = {stop};
      ExpectGenerationEquals(got, engine.Generate(*task, input, with_stop));

      // The same stop string under beam search, as GenerateT5 with it.
      v1::GenerationOptions beam_stop = beam_options;
      beam_stop.add_stop(stop);
      GenerationParams beam_with_stop = beam;
      beam_with_stop.stop = {stop};
      ServerGeneration beam_got = GenerateThroughServer(*server.stub, id, input, beam_stop);
      const GenerationOutput beam_expected = engine.Generate(*task, input, beam_with_stop);
      ExpectGenerationEquals(beam_got, beam_expected);
      stopped_one = true;
    }
    EXPECT_TRUE(stopped_one) << "no greedy output of these inputs had a non-empty proper prefix";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, T5ServingTest, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "v1_1" : "v1_0"; });

TEST(T5ServingRefusalsTest, DecoderOnlyModesOnT5AreFailedPreconditionNamingTheMode) {
  TempDir dir("refusals_t5");
  const fs::path model_dir = WriteTinyT5(dir.path(), false);
  Running server = Start(ConfigFor(dir.path() / "data", model_dir));
  ASSERT_TRUE(server.app);
  for (v1::Mode mode : {v1::MODE_STRUCTURED, v1::MODE_PARALLEL}) {
    const grpc::Status status =
        CreateTask(*server.stub, "refused", SpecFor(mode), Demonstrations(InOrder()));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(status.error_message().find(ModeName(mode)), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find("t5"), std::string::npos) << status.error_message();
  }
  // GROUP_FID needs G; G past k is refused at creation.
  EXPECT_EQ(CreateTask(*server.stub, "g", SpecFor(v1::MODE_GROUP_FID, 0), Demonstrations(InOrder()))
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateTask(*server.stub, "g", SpecFor(v1::MODE_GROUP_FID, 7), Demonstrations(InOrder()))
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateTask(*server.stub, "g", SpecFor(v1::MODE_SAICL, 2), Demonstrations(InOrder()))
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // A request overriding a T5 task's mode to a decoder-only one.
  ASSERT_TRUE(
      CreateTask(*server.stub, "conv", SpecFor(v1::MODE_CONVENTIONAL), Demonstrations(InOrder()))
          .ok());
  grpc::Status status;
  Classify(*server.stub, "conv", &status, v1::MODE_STRUCTURED);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find("STRUCTURED"), std::string::npos) << status.error_message();
  EXPECT_NE(status.error_message().find("t5"), std::string::npos) << status.error_message();
}

TEST(T5ServingRefusalsTest, EncoderDecoderModesOnADecoderOnlyModelAreFailedPrecondition) {
  TempDir dir("refusals_gpt2");
  ServerConfig config = ConfigFor(dir.path() / "data", "");
  config.default_tokenizer_dir = MANYSHOT_GPT2_TOKENIZER_DIR;
  Running server = Start(config);
  ASSERT_TRUE(server.app);
  grpc::ClientContext info_context;
  v1::ServerInfo info;
  ASSERT_TRUE(server.stub->GetServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.model().model_type(), "gpt2");
  EXPECT_FALSE(info.model().encoder_decoder());
  for (v1::Mode mode : {v1::MODE_SAICL, v1::MODE_FID, v1::MODE_ENSEMBLE, v1::MODE_GROUP_FID}) {
    const grpc::Status status =
        CreateTask(*server.stub, "refused", SpecFor(mode, 1), Demonstrations(InOrder()));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(status.error_message().find(ModeName(mode)), std::string::npos)
        << status.error_message();
    EXPECT_NE(status.error_message().find("gpt2"), std::string::npos) << status.error_message();
    EXPECT_NE(status.error_message().find("decoder-only"), std::string::npos);
  }
}

TEST(T5ServingRestartTest, TaskSurvivesARestartAndAnswersTheSame) {
  TempDir dir("restart");
  const fs::path model_dir = WriteTinyT5(dir.path(), true);
  const ServerConfig config = ConfigFor(dir.path() / "data", model_dir);
  v1::ClassifyResponse before;
  {
    Running server = Start(config);
    ASSERT_TRUE(server.app);
    ASSERT_TRUE(
        CreateTask(*server.stub, "saicl", SpecFor(v1::MODE_SAICL), Demonstrations(InOrder())).ok());
    grpc::Status status;
    before = Classify(*server.stub, "saicl", &status);
    ASSERT_TRUE(status.ok()) << status.error_message();
    server.app->Shutdown(std::chrono::seconds(5));
  }
  Running server = Start(config);
  ASSERT_TRUE(server.app);
  grpc::ClientContext context;
  v1::GetTaskRequest get;
  get.set_task_id("saicl");
  v1::Task shown;
  ASSERT_TRUE(server.stub->GetTask(&context, get, &shown).ok());
  EXPECT_EQ(shown.state(), v1::TASK_STATE_READY);
  EXPECT_EQ(shown.spec().mode(), v1::MODE_SAICL);
  grpc::Status status;
  const v1::ClassifyResponse after = Classify(*server.stub, "saicl", &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(after.results_size(), before.results_size());
  for (int i = 0; i < before.results_size(); ++i) {
    for (int l = 0; l < 2; ++l) {
      EXPECT_EQ(after.results(i).scores(l).mean_logprob(),
                before.results(i).scores(l).mean_logprob());
    }
  }

  // DeleteTask removes the record: gone now and after the next restart.
  grpc::ClientContext delete_context;
  v1::DeleteTaskRequest request;
  request.set_task_id("saicl");
  v1::DeleteTaskResponse deleted;
  ASSERT_TRUE(server.stub->DeleteTask(&delete_context, request, &deleted).ok());
  server.app->Shutdown(std::chrono::seconds(5));
  server.stub.reset();
  server.app.reset();  // releases the data directory's lock before the next start
  server = Start(config);
  ASSERT_TRUE(server.app);
  grpc::ClientContext gone_context;
  EXPECT_EQ(server.stub->GetTask(&gone_context, get, &shown).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace manyshot::server
