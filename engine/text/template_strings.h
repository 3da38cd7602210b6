// The helpers the template's builtins share (argument reading, values built under the budget)
// and Python's string operations (template_strings.cpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "text/template_builtins.h"

namespace recur::detail {

/// Throws BuiltinError(what).
[[noreturn]] void refuse(const std::string& what);
const std::string& want_string(const TValue& v, const char* what);
std::int64_t want_int(const TValue& v, const char* what);
/// Positional argument `index` or keyword `key`, else `fallback`.
TValue arg(const CallArgs& args, std::size_t index, std::string_view key, TValue fallback = TValue());
/// Refuses more than `max` positional arguments, and keywords not in `keys`.
void check_arity(const CallArgs& args, std::size_t max, const std::string& what,
                 std::initializer_list<std::string_view> keys = {});
TValue make_string(std::string s, Budget& budget);
TValue make_list(TList items, Budget& budget, TValue::Flavor flavor = TValue::Flavor::kList);
/// What a filter walks: a list's items, a dict's keys, a string's characters.
TList iterate(const TValue& v, const char* what);

/// Python's str.isspace() for one code point.
bool py_space(char32_t c);
/// str.strip(chars), lstrip and rstrip; `chars` Undefined or None strips whitespace.
std::string py_strip(const std::string& s, const TValue& chars, bool left, bool right);
/// str.split(sep, maxsplit) and rsplit.
TValue py_split(const std::string& s, const TValue& sep, std::int64_t maxsplit, bool from_right, Budget& budget);
/// str.replace(old, with, count); count -1 replaces all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& with,
                       std::int64_t count, Budget& budget);
/// how: 0 lower(), 1 upper(), 2 title(), 3 capitalize().
std::string change_case(const std::string& s, int how);
/// Jinja2's title filter (words start after whitespace and brackets), unlike str.title().
std::string jinja_title(const std::string& s);
/// The str methods templates call: startswith, split, strip, replace, find, join, ...
TValue string_method(const std::string& name, const std::string& s, const CallArgs& args, Budget& budget);

}  // namespace recur::detail
