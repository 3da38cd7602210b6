// Opening the model a command runs: -m DIR, the built-in model, or --random-model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli.h"
#include "recur/model.h"
#include "recur/tokenizer.h"

namespace recur::cli {

/// The random-weight model's seed (--random-model).
constexpr std::uint64_t kBuiltinSeed = 1;

/// A model and how text becomes its ids: its tokenizer.json, or bytes (ids 0-255) for a model
/// without one.
struct TextModel {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null: bytes
  std::string label;                           // for messages
  bool random = false;
  /// Why text cannot go in or out ("" when it can): a model trained on a tokenizer it does not
  /// ship (Based: GPT-2's) takes token ids until --tokenizer gives one.
  std::string no_text;
  /// Throws ArgumentError(no_text) when text cannot be used.
  void require_text() const;
};

/// Where the built-in model lives: RECUR_MODEL, else beside the running binary
/// (RECUR_BUILTIN_MODEL_RELPATH from its directory).
std::string builtin_dir();
/// The model of the options "model" (-m) and "random-model"; the built-in one without either.
TextModel open_model(const Args& args);
/// One line on the model, one on the tokenizer, to stderr.
void describe_model(const TextModel& tm);
/// The kernels' instruction set, for the progress lines; the whole choice with `verbose`.
std::string kernels_line(bool verbose);

}  // namespace recur::cli
