// Recorded query passes (engine/transformer/forward_graphs.h) on the CUDA backend running on the
// SIMT emulator: a replay gives the eager pass's bits (logits and the K/V left in the caller's
// caches), for several inputs after the first recording, padded to a token bucket; a replayed pass
// is one host-side launch (counted by the emulator, not timed); a context freed and encoded again
// is recorded again; with graphs off every pass runs eagerly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "engine/transformer/forward_graphs.h"
#include "engine/transformer/transformer.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

std::unique_ptr<Transformer> LoadOn(const std::string& family, bool graphs) {
  Backend* backend = NamedTestBackend("simt-cuda", nullptr);
  TransformerOptions options;
  options.graphs = graphs;
  return ValueOrAbort(Transformer::Load(GoldenModelDir(family), *backend, options));
}

std::vector<uint32_t> Bits(const Tensor& t) {
  Tensor flat = t.Reshape({t.numel()});
  std::vector<uint32_t> out(static_cast<size_t>(t.bytes() + 3) / 4);
  std::vector<unsigned char> bytes(t.bytes());
  absl::Status s = NamedTestBackend("simt-cuda", nullptr)->CopyToHost(flat, bytes.data());
  EXPECT_TRUE(s.ok()) << s;
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// A context: the K/V of `tokens` run through the model, shared with log-weight ln 2.
struct Context {
  KvCache cache;
  ContextKv kv;
};

std::unique_ptr<Context> Encode(const Transformer& model, const std::vector<int32_t>& tokens) {
  auto c = std::make_unique<Context>();
  c->cache = model.NewCache(static_cast<int64_t>(tokens.size()));
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int32_t>(i);
  ForwardSequence seq{tokens, positions, &c->cache, {}};
  EXPECT_TRUE(model.Forward({&seq, 1}).ok());
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t l = 0; l < c->cache.layers(); ++l) {
    c->kv.k.push_back(c->cache.k(l).Rows(0, n));
    c->kv.v.push_back(c->cache.v(l).Rows(0, n));
  }
  c->kv.len = n;
  c->kv.log_weight = std::log(2.0f);
  return c;
}

// A query of `length` tokens after the context, as a structured-prompting query runs: its own
// bos at position 0 that does not see the context, the rest after the context's positions.
struct Query {
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> rows;
};

Query MakeQuery(int length, int seed) {
  Query q;
  for (int i = 0; i < length; ++i) {
    q.tokens.push_back(i == 0 ? 1 : 3 + (seed * 131 + i * 977) % 20000);
    q.positions.push_back(i == 0 ? 0 : 40 + i);
  }
  q.rows = {length - 1};
  if (length > 2) q.rows.insert(q.rows.begin(), 1);
  return q;
}

struct Pass {
  std::vector<float> logits;
  std::vector<KvCache> caches;
};

Pass RunPass(const Transformer& model, const std::vector<Query>& queries,
             const ContextKv* context) {
  Pass p;
  for (const Query& q : queries) {
    p.caches.push_back(model.NewCache(static_cast<int64_t>(q.tokens.size()) + 4));
  }
  std::vector<ForwardSequence> batch;
  for (size_t i = 0; i < queries.size(); ++i) {
    ForwardSequence seq{queries[i].tokens, queries[i].positions, &p.caches[i], queries[i].rows};
    seq.own_log_weight = std::log(3.0f);
    seq.weighted_from = 1;
    seq.context_from = 1;
    batch.push_back(seq);
  }
  auto result = model.Forward(batch, context);
  EXPECT_TRUE(result.ok()) << result.status();
  if (result.ok()) p.logits = result->logits;
  return p;
}

// The same logits, and the same K/V in every cache row the pass wrote.
void ExpectSameBits(const Pass& eager, const Pass& replayed, const std::string& what) {
  EXPECT_EQ(Bits(replayed.logits), Bits(eager.logits)) << what;
  ASSERT_EQ(replayed.caches.size(), eager.caches.size());
  for (size_t s = 0; s < eager.caches.size(); ++s) {
    const KvCache& a = eager.caches[s];
    const KvCache& b = replayed.caches[s];
    ASSERT_EQ(b.length(), a.length()) << what;
    for (int64_t l = 0; l < a.layers(); ++l) {
      EXPECT_EQ(Bits(b.k(l).Rows(0, b.length())), Bits(a.k(l).Rows(0, a.length())))
          << what << " sequence " << s << " layer " << l << " K";
      EXPECT_EQ(Bits(b.v(l).Rows(0, b.length())), Bits(a.v(l).Rows(0, a.length())))
          << what << " sequence " << s << " layer " << l << " V";
    }
  }
}

class EmulatedForwardGraphTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string why = BackendUnavailable("simt-cuda");
    if (!why.empty()) GTEST_SKIP() << why;
    eager_ = LoadOn(GetParam(), /*graphs=*/false);
    graphed_ = LoadOn(GetParam(), /*graphs=*/true);
    std::vector<int32_t> demos;
    for (int i = 0; i < 24; ++i) demos.push_back(5 + (i * 613) % 30000);
    context_ = Encode(*eager_, demos);
  }

  std::unique_ptr<Transformer> eager_, graphed_;
  std::unique_ptr<Context> context_;
};

TEST_P(EmulatedForwardGraphTest, ReplaysGiveTheEagerBitsForEveryInput) {
  // Lengths 3, 5, 7 share the 8-token bucket (padded with 5, 3 and 1 rows); 12 takes 16.
  const std::vector<std::vector<Query>> inputs = {{MakeQuery(5, 1)},
                                                  {MakeQuery(3, 2)},
                                                  {MakeQuery(7, 3)},
                                                  {MakeQuery(5, 4)},
                                                  {MakeQuery(12, 5)},
                                                  {MakeQuery(12, 6)},
                                                  {MakeQuery(4, 7), MakeQuery(6, 8)},
                                                  {MakeQuery(6, 9), MakeQuery(3, 10)}};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Pass eager = RunPass(*eager_, inputs[i], &context_->kv);
    const Pass replayed = RunPass(*graphed_, inputs[i], &context_->kv);
    ExpectSameBits(eager, replayed, "input " + std::to_string(i));
  }
  const ForwardGraphStats stats = graphed_->graph_stats();
  EXPECT_EQ(stats.captures, 3u);  // bucket 8, bucket 16, two sequences of bucket 8
  EXPECT_EQ(stats.replays, inputs.size());
  EXPECT_EQ(stats.graphs, 3u);
  EXPECT_EQ(eager_->graph_stats().captures, 0u);  // graphs off: every pass eager
}

TEST_P(EmulatedForwardGraphTest, ADecodeStepAfterAReplayReadsTheCopiedKv) {
  const std::vector<Query> query = {MakeQuery(6, 11)};
  for (int warm = 0; warm < 2; ++warm) {
    Pass eager = RunPass(*eager_, query, &context_->kv);
    Pass replayed = RunPass(*graphed_, query, &context_->kv);
    // One more token on each: an eager pass (the cache is not empty) over the replay's K/V.
    const int32_t token = 77, position = 60;
    const std::vector<int64_t> row = {0};
    std::vector<float> next[2];
    Pass* passes[2] = {&eager, &replayed};
    const Transformer* models[2] = {eager_.get(), graphed_.get()};
    for (int m = 0; m < 2; ++m) {
      ForwardSequence seq{{&token, 1}, {&position, 1}, &passes[m]->caches[0], row};
      seq.own_log_weight = std::log(3.0f);
      seq.weighted_from = 1;
      seq.context_from = 1;
      auto result = models[m]->Forward({&seq, 1}, &context_->kv);
      ASSERT_TRUE(result.ok()) << result.status();
      next[m] = result->logits;
    }
    EXPECT_EQ(Bits(next[1]), Bits(next[0])) << "pass " << warm;
  }
  EXPECT_EQ(graphed_->graph_stats().replays, 2u);
}

TEST_P(EmulatedForwardGraphTest, AReplayedPassIsOneLaunch) {
  const std::vector<Query> query = {MakeQuery(6, 12)};
  RunPass(*graphed_, query, &context_->kv);  // records
  const uint64_t eager_start = simt::HostLaunches();
  RunPass(*eager_, query, &context_->kv);
  const uint64_t eager_launches = simt::HostLaunches() - eager_start;
  const uint64_t replay_start = simt::HostLaunches();
  RunPass(*graphed_, query, &context_->kv);
  const uint64_t replay_launches = simt::HostLaunches() - replay_start;
  std::cout << GetParam() << ": host launches per query pass, eager " << eager_launches
            << ", replayed " << replay_launches << "\n";
  EXPECT_EQ(replay_launches, 1u);
  EXPECT_GT(eager_launches, 20u);
}

TEST_P(EmulatedForwardGraphTest, AContextFreedAndEncodedAgainIsRecordedAgain) {
  const std::vector<Query> query = {MakeQuery(5, 13)};
  ExpectSameBits(RunPass(*eager_, query, &context_->kv), RunPass(*graphed_, query, &context_->kv),
                 "first context");
  EXPECT_EQ(graphed_->graph_stats().graphs, 1u);
  // Evicted: its tensors are freed. Another context of the same length takes its place.
  context_.reset();
  std::vector<int32_t> other;
  for (int i = 0; i < 24; ++i) other.push_back(9 + (i * 389) % 30000);
  std::unique_ptr<Context> replaced = Encode(*eager_, other);
  ExpectSameBits(RunPass(*eager_, query, &replaced->kv), RunPass(*graphed_, query, &replaced->kv),
                 "replaced context");
  const ForwardGraphStats stats = graphed_->graph_stats();
  EXPECT_EQ(stats.captures, 2u);
  EXPECT_EQ(stats.graphs, 1u) << "the freed context's recording is dropped";
}

INSTANTIATE_TEST_SUITE_P(Models, EmulatedForwardGraphTest, ::testing::Values("llama", "gpt2"));

}  // namespace
}  // namespace manyshot::testing
