// The builtins published templates use beyond the first subset (template_more.cpp): dictsort,
// sort, indent, markupsafe's escaping, str.format, and the list and dict methods as Jinja2's
// immutable sandbox allows or refuses them.
#pragma once

#include <string>

#include "text/template_builtins.h"

namespace recur::detail {

/// markupsafe's escape of text: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(const std::string& s);
/// markupsafe.escape(v): a Markup as it is, anything else its str() escaped, marked.
TValue escape_value(const TValue& v, Budget& budget);
/// Jinja2's item-or-attribute path ("a.b", "items.0"), Undefined where a part is missing.
TValue attribute_path(const TValue& v, const std::string& path);

/// The filters dictsort(case_sensitive, by, reverse), sort(reverse, case_sensitive, attribute)
/// and indent(width, first, blank), as Jinja2 3.1 defines them.
TValue dictsort(const TValue& input, const CallArgs& args, Budget& budget);
TValue sort(const TValue& input, const CallArgs& args, Budget& budget);
TValue indent(const TValue& input, const CallArgs& args, Budget& budget);

/// str.format(*args, **kwargs): fields by position, number or name, with .attr and [key], the
/// conversions !s and !r, and the [[fill]align][width] specs; `markup` escapes what it inserts
/// (Markup.format) and marks the result.
TValue str_format(const std::string& s, bool markup, const CallArgs& args, Budget& budget);

/// list.pop, list.clear, list.copy and dict.copy; the methods the immutable sandbox refuses
/// (list.append, dict.update, ...) throw. False when `name` is none of these for `self`.
bool container_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget,
                      TValue& result);

/// A method of a Markup string: markupsafe's wrappers escape the string arguments and mark
/// the result (strip, replace, upper, ...), split gives marked parts, format and join escape
/// what they insert.
TValue markup_method(const std::string& name, const TValue& self, const CallArgs& args, Budget& budget);

}  // namespace recur::detail
