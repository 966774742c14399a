#include "server/generate_reactor.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/task/query_room.h"
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

void GenerateReactor::Start(const grpc::ByteBuffer& buffer) {
  v1::GenerateRequest request;
  if (auto s = ParseRequest(buffer, request); !s.ok()) return End(s);
  task_id_ = request.task_id();
  const ServerConfig& config = parts_.config;
  auto input = ToExample(request.input(), config, "input");
  if (!input.ok()) return End(input.status());
  const auto& o = request.options();
  GenerationParams params;
  if (o.strategy() != v1::DECODING_STRATEGY_UNSPECIFIED &&
      o.strategy() != v1::DECODING_STRATEGY_GREEDY && o.strategy() != v1::DECODING_STRATEGY_BEAM) {
    return End(
        absl::InvalidArgumentError(absl::StrCat("options.strategy ", static_cast<int>(o.strategy()),
                                                " is not a known strategy (GREEDY, BEAM)")));
  }
  params.beam_search = o.strategy() == v1::DECODING_STRATEGY_BEAM;
  params.beam_width = o.beam_width() ? static_cast<int>(o.beam_width()) : 3;
  params.length_penalty = o.has_length_penalty() ? o.length_penalty() : 0.6;
  // Unset: the default length, or fewer tokens where the input leaves less room (the task
  // shortens it); set: exactly that bound, refused when the input leaves less room.
  params.shorten_to_room = o.max_new_tokens() == 0;
  params.max_new_tokens =
      params.shorten_to_room
          ? std::min(kDefaultMaxNewTokens, static_cast<int>(config.max_new_tokens))
          : static_cast<int>(std::min<uint32_t>(o.max_new_tokens(), INT32_MAX));
  if (params.max_new_tokens > static_cast<int>(config.max_new_tokens)) {
    return End(absl::InvalidArgumentError(
        absl::StrCat("options.max_new_tokens ", params.max_new_tokens,
                     " is more than --max_new_tokens ", config.max_new_tokens)));
  }
  if (params.beam_search &&
      (params.beam_width < 1 || params.beam_width > static_cast<int>(config.max_beam_width))) {
    return End(absl::InvalidArgumentError(
        absl::StrCat("options.beam_width must be 1 to --max_beam_width ", config.max_beam_width)));
  }
  // sum_logprob / length^length_penalty must stay finite for every length up to
  // --max_new_tokens (a beam ranked by an infinite or zero divisor is ranked by nothing).
  if (!std::isfinite(params.length_penalty) || std::abs(params.length_penalty) > 10) {
    return End(absl::InvalidArgumentError(
        absl::StrCat("options.length_penalty must be a finite number from -10 to 10 (got ",
                     params.length_penalty, ")")));
  }
  for (const auto& s : o.stop()) {
    if (s.empty()) return End(absl::InvalidArgumentError("options.stop has an empty string"));
    params.stop.push_back(s);
  }
  if (!o.has_stop_at_eos() || o.stop_at_eos()) params.eos_id = parts_.model->tokenizer().eos_id();
  auto overrides = ToOverrides(o.query());
  if (!overrides.ok()) return End(overrides.status());
  const bool beam = params.beam_search;
  if (!beam) params.on_token = [this](int32_t token, double logprob) { Emit(token, logprob); };
  params.cancelled = [this] { return context_->IsCancelled(); };
  auto version = parts_.registry.Resolve(TenantOf(parts_.tenants, context_), task_id_);
  if (!version.ok()) return End(version.status());
  parts_.scheduler.Generate(
      *std::move(version), *std::move(input), std::move(params), *overrides, abandoned_,
      [this, beam](absl::StatusOr<GenerationOutput> output) {
        if (!output.ok()) return End(InRequestTerms(output.status()));
        if (beam) {
          for (int32_t t : output->tokens) Emit(t, 0.0);
        }
        parts_.metrics.TokensGenerated(output->tokens.size());
        auto text = parts_.model->tokenizer().Decode(output->tokens);
        std::string full = text.ok() ? *text : std::string();
        if (output->reason == FinishReason::kStopString && !output->stop_string.empty() &&
            full.size() >= output->stop_string.size()) {
          full.resize(full.size() - output->stop_string.size());
        }
        v1::GenerateResponse last;
        auto* result = last.mutable_result();
        result->set_text(full);
        for (int32_t t : output->tokens) result->add_token_ids(t);
        result->set_finish_reason(output->reason == FinishReason::kEos ? v1::FINISH_REASON_EOS
                                  : output->reason == FinishReason::kStopString
                                      ? v1::FINISH_REASON_STOP_STRING
                                      : v1::FINISH_REASON_MAX_TOKENS);
        result->set_sum_logprob(output->sum_logprob);
        result->set_score(output->score);
        result->set_truncated_input_tokens(static_cast<uint32_t>(output->truncated_input_tokens));
        writes_.Write(SerializeResponse(last));
        End(absl::OkStatus());
      });
}

}  // namespace manyshot::server
