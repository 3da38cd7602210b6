// How recur chat and recur serve lay out a conversation for a model, found once for both.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "recur/chat_template.h"
#include "text_model.h"

namespace recur::cli {

/// A conversation's layout: a chat template (--chat-template FILE, else the model directory's
/// own), else RWKV's world format for a world vocabulary, else none, and `none` says why and
/// what to do instead.
struct ChatFormat {
  std::shared_ptr<const ChatTemplate> chat_template;  // null: none
  bool world = false;
  /// Text that ends a reply besides the eos ids: generation_config.json's "stop_strings" beside
  /// the template (the built-in model's "\n"), "\n\n" in the world format.
  std::vector<std::string> stop;
  std::string none;  // "" when there is a layout
  /// One line for stderr: which layout, and what ends a reply.
  std::string describe() const;
};

/// The option --chat-template FILE, for the commands that chat.
void declare_chat_template_option(Args& args);
/// The layout of `tm` (opened by open_model from the same args); `way_out` ends `none` with what
/// to do instead. FormatError for a template (or generation_config.json) that cannot be read.
ChatFormat chat_format(const Args& args, const TextModel& tm, const std::string& way_out);

}  // namespace recur::cli
