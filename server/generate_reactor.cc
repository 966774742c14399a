#include "server/generate_reactor.h"

#include "absl/strings/str_cat.h"
#include "server/api_to_engine.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/request_parser.h"

namespace manyshot::server {

GenerateReactor::GenerateReactor(ServiceParts& parts, grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer& request)
    : parts_(parts), context_(context) {
  Start(request);
}

void GenerateReactor::End(const absl::Status& status) {
  writes_.Finish(parts_.Record("Generate", context_, start_, task_id_, ToGrpc(status)));
}

void GenerateReactor::Emit(int32_t token, double logprob) {
  emitted_.push_back(token);
  auto text = parts_.model->tokenizer().Decode(emitted_);
  std::string full = text.ok() ? *text : std::string();
  v1::GenerateResponse r;
  r.mutable_token()->set_token_id(token);
  r.mutable_token()->set_logprob(logprob);
  if (full.size() >= emitted_text_.size() &&
      full.compare(0, emitted_text_.size(), emitted_text_) == 0 &&
      full.find("\xEF\xBF\xBD", emitted_text_.size()) == std::string::npos) {
    r.mutable_token()->set_text(full.substr(emitted_text_.size()));
    emitted_text_ = full;
  }
  writes_.Write(SerializeResponse(r));
}

namespace {

v1::FinishReason ToFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kMaxTokens:
      break;
  }
  return v1::FINISH_REASON_MAX_TOKENS;
}

}  // namespace

void GenerateReactor::Start(const grpc::ByteBuffer& buffer) {
  v1::GenerateRequest request;
  if (auto s = ParseRequest(buffer, request); !s.ok()) return End(s);
  task_id_ = request.task_id();
  auto input = ToExample(request.input(), parts_.config, "input");
  if (!input.ok()) return End(input.status());
  const auto& o = request.options();
  auto params = ToGenerationParams(o, parts_.config);
  if (!params.ok()) return End(params.status());
  if (!o.has_stop_at_eos() || o.stop_at_eos()) params->eos_id = parts_.model->tokenizer().eos_id();
  auto overrides = ToOverrides(o.query());
  if (!overrides.ok()) return End(overrides.status());
  const bool beam = params->beam_search;
  // Greedy tokens stream as they are chosen; a beam's are known only at the end.
  if (!beam) params->on_token = [this](int32_t token, double logprob) { Emit(token, logprob); };
  params->cancelled = [this] { return context_->IsCancelled(); };
  auto version = parts_.registry.Resolve(TenantOf(parts_.tenants, context_), task_id_);
  if (!version.ok()) return End(version.status());
  parts_.scheduler.Generate(*std::move(version), *std::move(input), *std::move(params), *overrides,
                            abandoned_, [this, beam](absl::StatusOr<GenerationOutput> output) {
                              if (!output.ok()) return End(InRequestTerms(output.status()));
                              WriteResult(*output, beam);
                            });
}

void GenerateReactor::WriteResult(const GenerationOutput& output, bool beam) {
  if (beam) {
    for (int32_t t : output.tokens) Emit(t, 0.0);
  }
  parts_.metrics.TokensGenerated(output.tokens.size());
  auto text = parts_.model->tokenizer().Decode(output.tokens);
  std::string full = text.ok() ? *text : std::string();
  // The stop string ends the generation but is not part of the answer.
  if (output.reason == FinishReason::kStopString && !output.stop_string.empty() &&
      full.size() >= output.stop_string.size()) {
    full.resize(full.size() - output.stop_string.size());
  }
  v1::GenerateResponse last;
  auto* result = last.mutable_result();
  result->set_text(full);
  for (int32_t t : output.tokens) result->add_token_ids(t);
  result->set_finish_reason(ToFinishReason(output.reason));
  result->set_sum_logprob(output.sum_logprob);
  result->set_score(output.score);
  result->set_truncated_input_tokens(static_cast<uint32_t>(output.truncated_input_tokens));
  writes_.Write(SerializeResponse(last));
  End(absl::OkStatus());
}

}  // namespace manyshot::server
