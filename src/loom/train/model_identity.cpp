#include "loom/train/model_identity.hpp"

#include <memory>

#include "loom/data/tokenizer.hpp"
#include "loom/error.hpp"
#include "loom/train/sharded_checkpoint.hpp"

namespace loom::train {

namespace {

// "char with 65 symbols" or "byte with 256 symbols": a tokenizer spec is a whole vocabulary, too
// long (and full of newlines) to print.
std::string describe_tokenizer(const std::string& spec, const data::Tokenizer& tokenizer, const char* other = "") {
  return spec.substr(0, spec.find(':')) + " with " + std::to_string(tokenizer.vocab_size()) + other + " symbols";
}

// The tokenizer a data identity names, or null when it is not a tokenizer's (a graph's digest).
std::unique_ptr<data::Tokenizer> tokenizer_of(const std::string& spec) {
  if (spec.rfind("graph:", 0) == 0) return nullptr;
  return data::Tokenizer::from_spec(spec);
}

}  // namespace

std::vector<std::string> model_differences(const CheckpointInfo& checkpoint, const TrainConfig& config,
                                           const std::string& tokenizer_spec) {
  TrainConfig stored;
  apply_toml_string(stored, checkpoint.config_toml, "the checkpoint's stored configuration");
  const std::unique_ptr<data::Tokenizer> stored_tokenizer = tokenizer_of(checkpoint.tokenizer_spec);
  stored.model.vocab_size = stored_tokenizer ? stored_tokenizer->vocab_size() : config.model.vocab_size;

  std::vector<std::string> out;
  auto differ = [&](const std::string& key, const std::string& theirs, const std::string& ours) {
    if (theirs != ours) out.push_back(key + " " + theirs + (out.empty() ? " (checkpoint) vs " : " vs ") + ours +
                                      (out.empty() ? " (config)" : ""));
  };
  TrainConfig current = config;
  const std::vector<ConfigKey> theirs = config_schema(stored), ours = config_schema(current);
  for (size_t i = 0; i < ours.size(); ++i) {
    const ConfigKey& k = ours[i];
    if (k.section != "model" || k.key == "recompute" || k.key == "selective_recompute" || k.key == "padded_vocab_size")
      continue;
    differ(k.key, value_string(theirs[i].target), value_string(k.target));
  }
  differ("vocab_size", std::to_string(stored.model.vocab_size), std::to_string(config.model.vocab_size));
  const std::unique_ptr<data::Tokenizer> ours_tokenizer = tokenizer_of(tokenizer_spec);
  if (checkpoint.tokenizer_spec != tokenizer_spec && (!stored_tokenizer || !ours_tokenizer)) {
    // A graph: its digest covers the split too, so a changed split is named as one (the two
    // digests would read the same but for their CRCs); the graph is named where its sizes
    // differ too, or the split is the same.
    auto without_crc = [](const std::string& digest) { return digest.substr(0, digest.find(",crc32 ")); };
    const bool split_differs = stored.split != config.split;
    if (split_differs && !stored_tokenizer && !ours_tokenizer)
      differ("split", "'" + stored.split + "'", "'" + config.split + "'");
    if (!split_differs || without_crc(checkpoint.tokenizer_spec) != without_crc(tokenizer_spec))
      differ("data", checkpoint.tokenizer_spec, tokenizer_spec);
  } else if (checkpoint.tokenizer_spec != tokenizer_spec) {
    const std::string a = describe_tokenizer(checkpoint.tokenizer_spec, *stored_tokenizer);
    std::string b = describe_tokenizer(tokenizer_spec, *ours_tokenizer);
    if (a == b) b = describe_tokenizer(tokenizer_spec, *ours_tokenizer, " other");
    differ("tokenizer", a, b);
  }
  return out;
}

std::string different_model_message(const std::string& path, const CheckpointInfo& checkpoint,
                                    const TrainConfig& config, const std::string& tokenizer_spec) {
  const std::vector<std::string> differences = model_differences(checkpoint, config, tokenizer_spec);
  if (differences.empty()) return "";
  std::string list;
  for (const std::string& d : differences) list += (list.empty() ? "" : ", ") + d;
  return "checkpoint '" + path + "' holds a different model: " + list +
         "; resume with the checkpoint's values or start a new out_dir";
}

std::string token_table_repadding(const CheckpointInfo& checkpoint, const TrainConfig& config) {
  TrainConfig stored;
  apply_toml_string(stored, checkpoint.config_toml, "the checkpoint's stored configuration");
  if (stored.family != config.family || config.family == "gcn") return "";
  stored.model.vocab_size = config.model.vocab_size;  // the trainer stores the padding it resolved
  const int64_t rows = stored.model.resolved_padded_vocab(), ours = config.model.resolved_padded_vocab();
  if (rows == ours) return "";
  return "token table re-padded from " + std::to_string(rows) + " to " + std::to_string(ours) + " rows (its " +
         std::to_string(config.model.vocab_size) + " vocabulary rows kept; padding is read by nothing)";
}

void check_token_table_is_its_checkpoints(const std::string& path, const CheckpointInfo& checkpoint,
                                          int64_t stored_rows) {
  TrainConfig stored;
  apply_toml_string(stored, checkpoint.config_toml, "the checkpoint's stored configuration");
  const std::unique_ptr<data::Tokenizer> tokenizer = tokenizer_of(checkpoint.tokenizer_spec);
  if (stored.family == "gcn" || !tokenizer) return;
  stored.model.vocab_size = tokenizer->vocab_size();
  const int64_t rows = stored.model.resolved_padded_vocab();
  check(rows == stored_rows, "checkpoint '", path, "': its token table has ", stored_rows,
        " rows, its own configuration and tokenizer (", describe_tokenizer(checkpoint.tokenizer_spec, *tokenizer),
        ") give ", rows, ": the tokenizer or the configuration does not belong to these weights");
}

void check_same_model(const std::string& path, const CheckpointInfo& checkpoint, const TrainConfig& config,
                      const std::string& tokenizer_spec) {
  const std::string message = different_model_message(path, checkpoint, config, tokenizer_spec);
  check(message.empty(), message);
}

void check_resume_model(const std::string& path, const TrainConfig& config, const std::string& tokenizer_spec,
                        comm::ProcessGroup& world) {
  on_every_rank(world, [&] { check_same_model(path, read_checkpoint_info(path), config, tokenizer_spec); });
}

}  // namespace loom::train
