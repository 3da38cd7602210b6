// Renders a parsed chat template with its variables, under ChatTemplateLimits.
#pragma once

#include <string>

#include "recur/chat_template.h"
#include "text/template_ast.h"

namespace recur::detail {

/// The rendered text. Type errors and spent limits are FormatErrors naming the template's
/// line:column; raise_exception is an ArgumentError carrying the template's message.
std::string render_program(const TemplateProgram& program, const TDict& globals, const ChatTemplateLimits& limits);

}  // namespace recur::detail
