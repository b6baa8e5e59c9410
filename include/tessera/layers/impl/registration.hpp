// Builds a LayerType for layer class L from member pointers into L::Options,
// so each key is declared once, next to the class, with its kind and range;
// the Options struct's member initialisers are the defaults.
//
//   LayerType dense_layer_type() {
//     return impl::LayerTypeBuilder<Dense>("dense")
//         .integer("units", &Dense::Options::units, Range::closed(1, 1 << 24), impl::required)
//         .boolean("bias", &Dense::Options::bias)
//         .output("`[N, units]`")
//         .example({{2, 3, 4}}, "units = 3");
//   }
//
// Layers without options take (name, inputs); L::input_count, when
// present, gives the inputs the type takes (-1: two or more; default 1).
#pragma once

#include <tessera/layers/conv.hpp>
#include <tessera/layers/layer.hpp>
#include <tessera/layers/registry.hpp>

#include <sstream>
#include <type_traits>
#include <utility>

namespace tessera::impl {

// Options of a layer type that takes none.
struct NoOptions {};

template <class L, class = void>
struct options_of {
  using type = NoOptions;
};
template <class L>
struct options_of<L, std::void_t<typename L::Options>> {
  using type = typename L::Options;
};

template <class L, class = void>
struct input_count_of : std::integral_constant<int, 1> {};
template <class L>
struct input_count_of<L, std::void_t<decltype(L::input_count)>>
    : std::integral_constant<int, L::input_count> {};

enum Need { optional, required };

template <class L>
class LayerTypeBuilder {
 public:
  using Options = typename options_of<L>::type;

  explicit LayerTypeBuilder(std::string name) {
    type_.name = std::move(name);
    type_.arity = input_count_of<L>::value;
    type_.default_options = [] { return std::any(Options{}); };
    type_.build = [](const std::string& layer_name, const std::any& options,
                     std::vector<std::string> inputs) -> std::unique_ptr<Layer> {
      if constexpr (std::is_same_v<Options, NoOptions>)
        return std::make_unique<L>(layer_name, std::move(inputs));
      else
        return std::make_unique<L>(layer_name, std::any_cast<const Options&>(options),
                                   std::move(inputs));
    };
  }

  template <class T>
  LayerTypeBuilder& integer(const char* key, T Options::*member, Range range,
                            Need need = optional) {
    return add(
        key, KeyKind::integer, need, range, member,
        [](const KeyValue& v) { return static_cast<T>(v.integer); },
        [](const T& value) { return std::to_string(value); });
  }

  template <class T>
  LayerTypeBuilder& number(const char* key, T Options::*member, Range range, Need need = optional) {
    return add(
        key, KeyKind::number, need, range, member,
        [](const KeyValue& v) { return static_cast<T>(v.number); },
        [](const T& value) { return number_text(value); });
  }

  LayerTypeBuilder& boolean(const char* key, bool Options::*member) {
    return add(
        key, KeyKind::boolean, optional, Range::any(), member,
        [](const KeyValue& v) { return v.boolean; },
        [](const bool& value) { return std::string(value ? "true" : "false"); });
  }

  LayerTypeBuilder& extent2(const char* key, Extent2 Options::*member, Range range,
                            Need need = optional) {
    return add(
        key, KeyKind::extent2, need, range, member,
        [](const KeyValue& v) { return Extent2(v.pair[0], v.pair[1]); },
        [](const Extent2& value) {
          return value.h == value.w
                     ? std::to_string(value.h)
                     : "[" + std::to_string(value.h) + ", " + std::to_string(value.w) + "]";
        });
  }

  // The name of a layer declared earlier in the deck (a string; "" = none).
  LayerTypeBuilder& layer_name(const char* key, std::string Options::*member) {
    return add(
        key, KeyKind::layer, optional, Range::any(), member,
        [](const KeyValue& v) { return v.text; },
        [](const std::string& value) { return "\"" + value + "\""; });
  }

  // A weight initialiser, one of weight_initializer_names().
  LayerTypeBuilder& initializer(const char* key, Init Options::*member) {
    add(
        key, KeyKind::choice, optional, Range::any(), member,
        [](const KeyValue& v) { return init_from_name(v.text); },
        [](const Init& value) { return std::string(init_name(value)); });
    type_.keys.back().choices = weight_initializer_names();
    return *this;
  }

  // Shown in the reference instead of the default value.
  LayerTypeBuilder& default_text(std::string text) {
    type_.keys.back().default_text = std::move(text);
    return *this;
  }
  LayerTypeBuilder& note(std::string text) {
    type_.keys.back().note = std::move(text);
    return *this;
  }
  // Runs on the options once every key is read: f(Options&).
  template <class F>
  LayerTypeBuilder& complete(F f) {
    type_.complete = [f](std::any& options) { f(std::any_cast<Options&>(options)); };
    return *this;
  }
  LayerTypeBuilder& output(std::string text) {
    type_.output = std::move(text);
    return *this;
  }
  LayerTypeBuilder& example(std::vector<std::vector<std::int64_t>> inputs, std::string keys = "") {
    type_.example.inputs = std::move(inputs);
    type_.example.keys = std::move(keys);
    return *this;
  }
  // The example is a sequence layer (see LayerExample::Context); token-id
  // inputs lie below `vocabulary`.
  LayerTypeBuilder& sequence_example(LayerExample::Context context, std::int64_t vocabulary = 0) {
    type_.example.context = context;
    type_.example.vocabulary = vocabulary;
    return *this;
  }

  operator LayerType() const { return type_; }  // NOLINT: the builder ends as its type

 private:
  template <class T, class Read, class Show>
  LayerTypeBuilder& add(const char* key, KeyKind kind, Need need, Range range, T Options::*member,
                        Read read, Show show) {
    LayerKey k;
    k.name = key;
    k.kind = kind;
    k.required = need == required;
    k.range = range;
    k.set = [member, read](std::any& options, const KeyValue& value) {
      std::any_cast<Options&>(options).*member = read(value);
    };
    k.show = [member, show](const std::any& options) {
      return show(std::any_cast<const Options&>(options).*member);
    };
    type_.keys.push_back(std::move(k));
    return *this;
  }

  LayerType type_;
};

}  // namespace tessera::impl
