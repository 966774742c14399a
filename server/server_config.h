// Everything the server is configured with, as plain values. main.cc fills it from flags, tests can
// build one directly. Limits live here so one struct documents them all.
#pragma once

#include <cstdint>
#include <string>

namespace manyshot::server {

struct ServerConfig {
  std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  std::string metrics_address = "127.0.0.1:9464";  // host:port for Prometheus /metrics; "" = off
  std::string data_dir = "manyshot-data";          // RocksDB and the generated default model
  std::string model_dir;                           // HF model directory; "" = generated default
  // GPT-2 vocab.json + merges.txt for generating the default model (installed by setup.sh).
  std::string default_tokenizer_dir = "/usr/local/share/manyshot/gpt2";
  std::string port_file;  // when set, the bound ports are written here ("grpc=N\nmetrics=M\n")
  int threads = 0;        // compute threads; 0 = hardware concurrency
  std::string log_level = "info";
  std::string log_format = "text";  // "text" or "json"
  int shutdown_grace_seconds = 10;  // in-flight calls get this long after SIGTERM
  uint64_t max_message_bytes = 64ull << 20;
};

}  // namespace manyshot::server
