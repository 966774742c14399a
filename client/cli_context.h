// What every `manyshot` subcommand gets: a channel to the server, output preferences, positional
// arguments. Subcommands return a process exit code.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/message.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace manyshot::client {

// gRPC metadata naming the task of a per-task call (create, classify, score, generate, get,
// delete), so that a proxy in front of several replicas can send every call for one task to the
// replica holding its cached context (deploy/proxy/). The server itself reads the task id from the
// request message and ignores this.
inline constexpr char kTaskMetadataKey[] = "x-manyshot-task";

// True when `value` can be sent as ASCII gRPC metadata (printable, no leading/trailing space).
bool IsValidMetadataValue(std::string_view value);

struct CliContext {
  std::shared_ptr<grpc::Channel> channel;
  std::string server;  // host:port, for messages
  bool json = false;   // --json: one JSON document on stdout instead of human text
  int timeout_seconds = 30;
  // True when --timeout was given: streaming calls (create, classify --stream, generate) then get
  // it as their deadline too; by default they run without one, as encoding 100k demonstrations may
  // take longer than any sensible per-call deadline.
  bool timeout_explicit = false;
  std::vector<std::string> args;  // after the subcommand name
  // Repeatable flags (--candidate, --stop, --field): every value, in order.
  std::map<std::string, std::vector<std::string>> repeated;
  // --token / --token_file: sent as `authorization: Bearer TOKEN` on every call (empty: none).
  std::string token;

  // A ClientContext with the --timeout deadline applied. Every context carries the bearer token
  // (when set) and, for a per-task call (non-empty `task_id`), x-manyshot-task: TASK_ID.
  std::unique_ptr<grpc::ClientContext> NewCall(std::string_view task_id = {}) const;
  // A ClientContext for a streaming call: the deadline only when --timeout was given.
  std::unique_ptr<grpc::ClientContext> NewStreamingCall(std::string_view task_id = {}) const;
  // Values of a repeatable flag (empty when not given).
  const std::vector<std::string>& Repeated(const std::string& name) const;
};

// Prints "manyshot: <command>: <message>" on stderr; returns exit code 2 (a usage error).
int ReportUsageError(const std::string& command, const std::string& message);

// Prints a failed call as "manyshot: <command>: <CODE>: <message>" on stderr; returns exit code 1.
int ReportRpcError(const std::string& command, const grpc::Status& status);
// The same for an error as a google.rpc.Status (StreamClassify's in-band errors). Both print the
// error's details when it has them: the ErrorInfo reason, the BadRequest field, the RetryInfo
// delay.
int ReportErrorStatus(const std::string& command, const google::rpc::Status& status);

// A message as JSON (proto field names), on one line.
std::string ToJson(const google::protobuf::Message& message);

// A byte count for people: "812 B", "1.5 KiB", "2.10 GiB" (powers of 1024, three significant
// digits). JSON output keeps exact byte counts.
std::string HumanBytes(uint64_t bytes);

}  // namespace manyshot::client
