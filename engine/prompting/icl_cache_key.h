// The cache-key inputs of a decoder-only task: its demonstrations in packing order and the
// options that shape its groups (engine/task/cache_key.h hashes them).
#pragma once

#include <string>

#include "engine/core/dtype.h"
#include "engine/task/cache_key.h"

namespace manyshot {

class IclTask;
class Tokenizer;
class Transformer;

// The inputs of a prepared task (its demonstrations in packing order, its options).
CacheKeyInputs KeyInputsForTask(const Transformer& model, const Tokenizer& tokenizer,
                                const IclTask& task, DType kv_dtype,
                                const std::string& sharing_scope = "");

// Convenience: ComputeCacheKey(KeyInputsForTask(...)).
std::string CacheKeyForTask(const Transformer& model, const Tokenizer& tokenizer,
                            const IclTask& task, DType kv_dtype,
                            const std::string& sharing_scope = "");

}  // namespace manyshot
