// Gemma 2 through the gRPC API: a real server (ServerApp) on 127.0.0.1 serves a tiny random Gemma 2
// directory (the golden's settings: soft caps that bite, query_pre_attn_scalar, a sliding window,
// GQA; head_dim 32 so that the CPU's Highway kernels take the capped attention) with a
// tokenizer.json in Gemma's Hugging Face layout. A STRUCTURED task is created and queried with
// Classify and Score, and every score equals the independent NumPy reference
// (tools/reference/score_structured.py, the structured goldens' code) within 1e-4, on the
// token ids the engine's tokenizer gives.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/backend_factory.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/server_app.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr double kTolerance = 1e-4;  // the goldens' tolerance
constexpr char kMetaspace[] = "\xE2\x96\x81";

using manyshot::testing::TempDir;

// Gemma's tokenizer.json layout (transformers' GemmaConverter): <pad> 0, <eos> 1, <bos> 2, <unk> 3
// and the turn markers as added tokens; normalizer Replace(" " -> "▁") and no pre-tokenizer; BPE
// with byte_fallback over <0x00>..<0xFF>; the decoder undoing it. Pieces: "▁", the letters, and the
// words below built left to right by merges.
void WriteGemmaTokenizerJson(const fs::path& dir) {
  json vocab = json::object();
  auto add = [&](const std::string& piece) {
    if (!vocab.contains(piece)) vocab[piece] = static_cast<int>(vocab.size());
  };
  for (const char* special :
       {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) {
    add(special);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name);
  }
  add(kMetaspace);
  for (char c = 'a'; c <= 'z'; ++c) add(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) add(std::string(1, c));
  add(":");
  json merges = json::array();
  for (const char* word : {"good", "bad", "movie", "great", "terrible", "plot", "film", "fun",
                           "dull", "Label", "positive", "negative", "the", "was", "it"}) {
    std::string piece = kMetaspace;
    for (const char* c = word; *c != '\0'; ++c) {
      merges.push_back(piece + " " + std::string(1, *c));
      piece += *c;
      add(piece);
    }
  }
  json added = json::array();
  for (const char* special :
       {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"}) {
    added.push_back({{"id", vocab[special]},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<bos>"}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{"<bos>", {{"id", "<bos>"}, {"ids", json::array({2})}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array(
             {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
}

// The gemma2 golden's model (tools/reference/make_goldens.py) with head_dim 32: a multiple of 16,
// so that the CPU's Highway context and decode kernels run the capped attention.
fs::path WriteTinyGemma2(const fs::path& dir) {
  const fs::path tokenizer_dir = dir / "tokenizer";
  fs::create_directories(tokenizer_dir);
  WriteGemmaTokenizerJson(tokenizer_dir);
  TinyModelSpec spec;
  spec.family = "gemma2";
  spec.vocab_size = 512;
  spec.hidden_size = 64;
  spec.intermediate_size = 160;
  spec.num_layers = 3;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim = 32;
  spec.max_position_embeddings = 2048;
  spec.tie_word_embeddings = true;
  spec.seed = 28;
  const fs::path model = dir / "model";
  EXPECT_TRUE(WriteTinyModel(spec, tokenizer_dir, model).ok());
  // Caps small enough to bite on a random model, as in the golden.
  json config = json::parse(std::ifstream(model / "config.json"));
  config["attn_logit_softcapping"] = 5.0;
  config["final_logit_softcapping"] = 10.0;
  config["query_pre_attn_scalar"] = 24;
  config["sliding_window"] = 1024;
  std::ofstream(model / "config.json") << config.dump(2);
  return model;
}

const std::vector<std::pair<std::string, std::string>> kDemos = {
    {"the movie was great", "positive"}, {"a dull plot", "negative"},
    {"it was fun", "positive"},          {"the film was terrible", "negative"},
    {"a good film", "positive"},         {"bad movie", "negative"},
    {"great fun", "positive"},           {"dull", "negative"}};
const std::vector<std::string> kInputs = {"a great film", "the plot was bad", "fun"};
const std::vector<std::string> kCandidates = {" good", " terrible plot"};
constexpr int64_t kGroupLength = 24;
constexpr uint64_t kShuffleSeed = 5;

v1::TaskSpec Spec() {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_mode(v1::MODE_STRUCTURED);
  spec.set_group_length(kGroupLength);
  spec.set_shuffle_seed(kShuffleSeed);
  return spec;
}

// The same task in the engine, for the token ids the server's task renders (the reference scores
// ids; it never tokenizes).
struct EngineTokens {
  std::vector<std::vector<int32_t>> demonstrations;
  std::vector<QueryWithCandidates> classify, choices;
};

EngineTokens TokensOf(const fs::path& model_dir) {
  EngineTokens out;
  auto backend = CreateBackend(BackendKind::kCpu, 0, 1);
  EXPECT_TRUE(backend.ok()) << backend.status();
  auto model = Transformer::Load(model_dir, **backend);
  EXPECT_TRUE(model.ok()) << model.status();
  auto tokenizer = LoadTokenizer(model_dir);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!backend.ok() || !model.ok() || !tokenizer.ok()) return out;
  TaskOptions options;
  options.input_template = "Sentence: {text}\nLabel:";
  options.labels = {"negative", "positive"};
  options.group_length = kGroupLength;
  options.shuffle_seed = kShuffleSeed;
  std::vector<Example> demos;
  for (const auto& [text, label] : kDemos) demos.push_back({text, {}, label});
  auto task = IclTask::Prepare(**model, **tokenizer, options, demos);
  EXPECT_TRUE(task.ok()) << task.status();
  if (!task.ok()) return out;
  out.demonstrations = (*task)->demonstration_tokens();
  std::vector<Example> inputs;
  for (const auto& text : kInputs) inputs.push_back({text, {}, ""});
  auto classify = (*task)->PrepareClassify(inputs);
  EXPECT_TRUE(classify.ok()) << classify.status();
  auto choices = (*task)->PrepareChoices(
      inputs, std::vector<std::vector<std::string>>(kInputs.size(), kCandidates));
  EXPECT_TRUE(choices.ok()) << choices.status();
  if (classify.ok()) out.classify = *classify;
  if (choices.ok()) out.choices = *choices;
  return out;
}

// The reference's scores of `items` with the task's layout: per item, per candidate
// {sum_logprob, mean_logprob}.
std::vector<std::vector<std::pair<double, double>>> ReferenceScores(
    const fs::path& dir, const fs::path& model_dir,
    const std::vector<std::vector<int32_t>>& demonstrations,
    const std::vector<QueryWithCandidates>& items) {
  json c = {{"model_dir", model_dir.string()},
            {"mode", "STRUCTURED"},
            {"alignment", "TRUNCATE"},
            {"group_length", kGroupLength},
            {"shuffle_seed", kShuffleSeed},
            {"long_demonstrations", "REJECT"},
            {"rescale_factor", nullptr},
            {"bos_id", 2},
            {"space_id", 0},
            {"eos_id", 1},
            {"demonstrations", demonstrations},
            {"queries", json::array()}};
  for (const auto& item : items) {
    c["queries"].push_back({{"tokens", item.query}, {"candidates", item.candidates}});
  }
  const fs::path in = dir / "case.json";
  std::ofstream(in) << c.dump();
  const std::string command = "/usr/bin/python3 " + std::string(MANYSHOT_SOURCE_DIR) +
                              "/tools/reference/score_structured.py < " + in.string();
  std::string text;
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return {};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) text.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << command;
  std::vector<std::vector<std::pair<double, double>>> out;
  const json scored = json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(scored.is_discarded()) << text;
  if (scored.is_discarded()) return out;
  for (const auto& q : scored["queries"]) {
    std::vector<std::pair<double, double>> per;
    for (size_t k = 0; k < q["sum_logprob"].size(); ++k) {
      per.emplace_back(q["sum_logprob"][k].get<double>(), q["mean_logprob"][k].get<double>());
    }
    out.push_back(per);
  }
  return out;
}

struct Running {
  std::unique_ptr<ServerApp> app;
  std::unique_ptr<v1::ManyShot::Stub> stub;
};

Running Start(const fs::path& data_dir, const fs::path& model_dir) {
  ServerConfig config;
  config.listen_address = "127.0.0.1:0";
  config.metrics_address = "";
  config.data_dir = data_dir.string();
  config.model_dir = model_dir.string();
  config.backend = "cpu";
  config.threads = 2;
  Running r;
  auto app = ServerApp::Start(config);
  EXPECT_TRUE(app.ok()) << app.status();
  if (!app.ok()) return r;
  r.app = *std::move(app);
  r.stub = v1::ManyShot::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(r.app->grpc_port()), grpc::InsecureChannelCredentials()));
  return r;
}

grpc::Status CreateTask(v1::ManyShot::Stub& stub) {
  grpc::ClientContext context;
  auto stream = stub.CreateTask(&context);
  v1::CreateTaskRequest request;
  request.set_task_id("gemma2");
  *request.mutable_spec() = Spec();
  for (const auto& [text, label] : kDemos) {
    v1::Demonstration* d = request.add_demonstrations();
    d->set_text(text);
    d->set_label(label);
  }
  stream->Write(request);
  stream->WritesDone();
  v1::CreateTaskResponse response;
  while (stream->Read(&response)) {
  }
  return stream->Finish();
}

TEST(Gemma2ServingTest, ClassifyAndScoreEqualTheReference) {
  TempDir dir("gemma2_serving_");
  const fs::path model_dir = WriteTinyGemma2(dir.path());
  const EngineTokens tokens = TokensOf(model_dir);
  ASSERT_EQ(tokens.classify.size(), kInputs.size());
  ASSERT_EQ(tokens.choices.size(), kInputs.size());
  // Several groups, so that the query attends to a merged context.
  int64_t demo_tokens = 0;
  for (const auto& d : tokens.demonstrations) demo_tokens += static_cast<int64_t>(d.size());
  ASSERT_GT(demo_tokens, 2 * (kGroupLength - 1));

  Running server = Start(dir.path() / "data", model_dir);
  ASSERT_TRUE(server.app);
  grpc::ClientContext info_context;
  v1::ServerInfo info;
  ASSERT_TRUE(server.stub->GetServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.model().model_type(), "gemma2");
  EXPECT_EQ(info.model().tokenizer_kind(), "bpe-sentencepiece");
  ASSERT_TRUE(CreateTask(*server.stub).ok());

  const auto classify_expected =
      ReferenceScores(dir.path(), model_dir, tokens.demonstrations, tokens.classify);
  ASSERT_EQ(classify_expected.size(), kInputs.size());
  {
    grpc::ClientContext context;
    v1::ClassifyRequest request;
    request.set_task_id("gemma2");
    for (const auto& text : kInputs) request.add_inputs()->set_text(text);
    v1::ClassifyResponse response;
    const grpc::Status status = server.stub->Classify(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.results_size(), static_cast<int>(kInputs.size()));
    for (size_t i = 0; i < kInputs.size(); ++i) {
      const auto& r = response.results(static_cast<int>(i));
      ASSERT_EQ(r.scores_size(), 2);
      for (int l = 0; l < 2; ++l) {
        EXPECT_NEAR(r.scores(l).sum_logprob(), classify_expected[i][l].first, kTolerance)
            << "input " << i << " label " << l;
        EXPECT_NEAR(r.scores(l).mean_logprob(), classify_expected[i][l].second, kTolerance)
            << "input " << i << " label " << l;
      }
    }
  }

  const auto score_expected =
      ReferenceScores(dir.path(), model_dir, tokens.demonstrations, tokens.choices);
  ASSERT_EQ(score_expected.size(), kInputs.size());
  {
    grpc::ClientContext context;
    v1::ScoreRequest request;
    request.set_task_id("gemma2");
    for (const auto& text : kInputs) {
      v1::ScoreItem* item = request.add_items();
      item->mutable_input()->set_text(text);
      for (const auto& c : kCandidates) item->add_candidates(c);
    }
    v1::ScoreResponse response;
    const grpc::Status status = server.stub->Score(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.results_size(), static_cast<int>(kInputs.size()));
    for (size_t i = 0; i < kInputs.size(); ++i) {
      const auto& r = response.results(static_cast<int>(i));
      ASSERT_EQ(r.candidates_size(), static_cast<int>(kCandidates.size()));
      for (size_t k = 0; k < kCandidates.size(); ++k) {
        const auto& got = r.candidates(static_cast<int>(k));
        EXPECT_NEAR(got.sum_logprob(), score_expected[i][k].first, kTolerance)
            << "input " << i << " candidate " << k;
        EXPECT_NEAR(got.mean_logprob(), score_expected[i][k].second, kTolerance)
            << "input " << i << " candidate " << k;
      }
    }
  }
}

}  // namespace
}  // namespace manyshot::server
