// Enums spelled as words: the one table that maps each value of an enum to the word that names
// it (in YAML, on the console, in files). Each such enum specialises EnumNames next to its own
// definition, with one name per enumerator in declaration order; everything else here is
// derived from that table, so a name cannot drift from its value. Thread safety: constants only.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>

#include <fmt/core.h>

namespace trainrun {

// Specialise as: template <> struct EnumNames<E> { static constexpr std::string_view names[] =
// {...}; }; with a static_assert that the table has one name per enumerator.
template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires {
  EnumNames<E>::names;
};

template <NamedEnum E>
constexpr std::span<const std::string_view> enum_names() {
  return EnumNames<E>::names;
}

template <NamedEnum E>
constexpr std::string_view enum_name(E e) {
  return EnumNames<E>::names[static_cast<size_t>(e)];
}

// The value named `name` (exact spelling), or nothing.
template <NamedEnum E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  const auto names = enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace trainrun

// fmt::format("{}", e) writes the name.
template <trainrun::NamedEnum E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
  template <class Context>
  auto format(E e, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(trainrun::enum_name(e), ctx);
  }
};
