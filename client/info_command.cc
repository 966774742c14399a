#include <cstdio>
#include <string>

#include "client/commands.h"
#include "google/protobuf/util/json_util.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {

int RunInfo(const CliContext& cli) {
  auto stub = v1::ManyShot::NewStub(cli.channel);
  v1::ServerInfo info;
  auto call = cli.NewCall();
  grpc::Status status = stub->GetServerInfo(call.get(), v1::GetServerInfoRequest(), &info);
  if (!status.ok()) return ReportRpcError("info", status);
  if (cli.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(info, &json, options);
    std::printf("%s\n", json.c_str());
    return 0;
  }
  std::printf("server      %s (manyshot %s)\n", cli.server.c_str(), info.version().c_str());
  if (info.has_model()) {
    const auto& m = info.model();
    if (m.encoder_decoder()) {
      std::printf(
          "model       %s (%s, encoder-decoder, %u encoder layers, d_model %u, %u heads of %u, "
          "vocab %u)%s\n",
          m.path().c_str(), m.model_type().c_str(), m.layers(), m.hidden_size(), m.heads(),
          m.head_dim(), m.vocab_size(),
          m.random_weights() ? "  [RANDOM WEIGHTS: answers are meaningless]" : "");
    } else {
      std::printf(
          "model       %s (%s, %u layers, hidden %u, %u heads / %u kv, vocab %u, ctx %u)%s\n",
          m.path().c_str(), m.model_type().c_str(), m.layers(), m.hidden_size(), m.heads(),
          m.kv_heads(), m.vocab_size(), m.context_length(),
          m.random_weights() ? "  [RANDOM WEIGHTS: answers are meaningless]" : "");
    }
    // What the weights are (the note of the tool that wrote them) and the dtype they are stored
    // in on disk and held in in memory (--weight_dtype).
    std::string weights = m.weights_note();
    if (!m.weight_dtype().empty() || !m.held_weight_dtype().empty()) {
      if (!weights.empty()) weights += "; ";
      weights += "stored " + (m.weight_dtype().empty() ? std::string("-") : m.weight_dtype()) +
                 ", held " +
                 (m.held_weight_dtype().empty() ? std::string("-") : m.held_weight_dtype());
    }
    if (!weights.empty()) std::printf("weights     %s\n", weights.c_str());
  } else {
    std::printf("model       (none loaded)\n");
  }
  std::printf("backend     %s, %u threads, %s%s%s\n", info.backend().name().c_str(),
              info.backend().threads(), info.backend().device().c_str(),
              info.backend().blas_kernel().empty() ? "" : ", BLAS kernel ",
              info.backend().blas_kernel().c_str());
  std::printf("compute     %s weights/activations, %s K/V (%s; CUDA %s)\n",
              info.backend().compute_dtype().c_str(), info.backend().kv_dtype().c_str(),
              info.backend().selection().c_str(),
              info.backend().cuda_built() ? "built" : "not built");
  const auto& c = info.cache();
  std::printf("cache       memory %s of %s (%llu entries), disk %s (%llu entries)\n",
              HumanBytes(c.memory_bytes()).c_str(), HumanBytes(c.memory_budget_bytes()).c_str(),
              static_cast<unsigned long long>(c.memory_entries()),
              HumanBytes(c.disk_bytes()).c_str(),
              static_cast<unsigned long long>(c.disk_entries()));
  std::printf("tasks       %llu\n", static_cast<unsigned long long>(info.tasks()));
  return 0;
}

}  // namespace manyshot::client
