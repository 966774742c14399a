// Chunked work spread over the cores: reading and checksumming a KV payload's chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace manyshot {

// Runs fn(i, scratch) for every chunk i in [0, chunks) on up to one thread per core (8 at most),
// each thread taking the next chunk and keeping its own scratch string; returns the first error,
// after which no thread takes another chunk. Several readers keep the disk's queue full on a cold
// read and spread the copy and checksum of a warm one over the cores.
absl::Status ForEachChunkInParallel(uint64_t chunks,
                                    const std::function<absl::Status(uint64_t, std::string&)>& fn);

}  // namespace manyshot
