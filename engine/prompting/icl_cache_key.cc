#include "engine/prompting/icl_cache_key.h"

#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

CacheKeyInputs KeyInputsForTask(const Transformer& model, const Tokenizer& tokenizer,
                                const IclTask& task, DType kv_dtype,
                                const std::string& sharing_scope) {
  CacheKeyInputs in;
  in.model_fingerprint = model.fingerprint();
  in.tokenizer_fingerprint = tokenizer.fingerprint();
  const auto& tokens = task.demonstration_tokens();
  for (int64_t i : task.layout().order) in.demonstrations.push_back(tokens[i]);
  const TaskOptions& o = task.options();
  in.input_template = o.input_template;
  in.answer_template = o.answer_template;
  in.separator = o.separator;
  in.group_length = task.layout().group_length;
  in.alignment = o.alignment;
  in.long_demonstrations = o.long_demonstrations;
  in.kv_dtype = kv_dtype;
  in.sharing_scope = sharing_scope;
  return in;
}

std::string CacheKeyForTask(const Transformer& model, const Tokenizer& tokenizer,
                            const IclTask& task, DType kv_dtype, const std::string& sharing_scope) {
  return ComputeCacheKey(KeyInputsForTask(model, tokenizer, task, kv_dtype, sharing_scope));
}

}  // namespace manyshot
