// Runs one layer on its own, outside a model, for value and gradient tests:
// random inputs, seeded parameters, and a finite-difference check of every
// input and parameter gradient through L = sum(r .* y) for a fixed random r.
#pragma once

#include <tessera/layers/layer.hpp>
#include <tessera/model/parameters.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

#include "tessera_test.hpp"

namespace tessera::test {

class LayerHarness {
 public:
  LayerHarness(Layer& layer, const Shapes& input_shapes, std::uint64_t seed = 1)
      : layer_(layer), state_(false) {
    for (std::size_t i = 0; i < input_shapes.size(); ++i) {
      inputs.emplace_back("x" + std::to_string(i), input_shapes[i]);
      input_grads.emplace_back("dx" + std::to_string(i), input_shapes[i]);
      from_host(inputs.back().flat(), random_values(input_shapes[i].numel(), seed + 100 + i));
    }
    const Shape out = layer.output_shape(input_shapes);
    output = Tensor<float>("y", out);
    output_grad = Tensor<float>("dy", out);
    std::vector<std::size_t> slots, state_slots;
    for (const auto& spec : layer.parameter_specs(input_shapes))
      slots.push_back(params_.add(layer.name(), spec));
    for (const auto& spec : layer.state_specs(input_shapes))
      state_slots.push_back(state_.add(layer.name(), spec));
    params_.allocate();
    state_.allocate();
    Tensors values, grads, state;
    for (auto s : slots) {
      values.push_back(params_.value(s));
      grads.push_back(params_.gradient(s));
    }
    for (auto s : state_slots) state.push_back(state_.value(s));
    layer.bind_parameters(values, grads);
    layer.bind_state(state);
    layer.allocate(input_shapes);
    params_.initialize(ExecSpace(), seed);
    state_.initialize(ExecSpace(), seed);
    // Non-zero biases too, so the checks see every term.
    if (params_.count() > 0) {
      auto p = to_host(params_.values());
      const auto noise = random_values(p.size(), seed + 7, -0.1f, 0.1f);
      for (std::size_t i = 0; i < p.size(); ++i) p[i] += noise[i];
      from_host(params_.values(), p);
    }
  }

  // Every input element distinct, at least 0.05 from every other and 0.1
  // from zero: central differences (step 0.01) then never cross a kink
  // (ReLU at 0) or change which element wins a max.
  void spread_inputs(std::uint64_t seed = 5) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto n = static_cast<std::size_t>(inputs[i].numel());
      const auto order = random_values(n, seed + i);
      std::vector<std::size_t> rank(n);
      for (std::size_t k = 0; k < n; ++k) rank[k] = k;
      std::sort(rank.begin(), rank.end(),
                [&](std::size_t a, std::size_t b) { return order[a] < order[b]; });
      std::vector<float> values(n);
      for (std::size_t k = 0; k < n; ++k) {
        const float magnitude = 0.1f + 0.05f * static_cast<float>(k / 2);
        values[rank[k]] = k % 2 ? -magnitude : magnitude;
      }
      from_host(inputs[i].flat(), values);
    }
  }

  // Token ids below `vocabulary` in every input (an embedding's), so that
  // central differences (step 0.01) never change which id an input holds.
  void token_inputs(std::int64_t vocabulary, std::uint64_t seed = 5) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto n = static_cast<std::size_t>(inputs[i].numel());
      std::vector<float> ids(n);
      for (std::size_t k = 0; k < n; ++k)
        ids[k] = static_cast<float>(counter_hash(seed + i, 3, k) % vocabulary);
      from_host(inputs[i].flat(), ids);
    }
  }

  ParameterStore& parameters() { return params_; }
  const ParameterStore& parameters() const { return params_; }
  ParameterStore& state() { return state_; }

  void forward(const StepContext& ctx = {}) { layer_.forward(inputs, output, ctx); }
  // Zeroes gradients, then back-propagates output_grad.
  void backward(const StepContext& ctx = {}) {
    params_.zero_gradients(ExecSpace());
    for (auto& g : input_grads) Kokkos::deep_copy(g.flat(), 0.0f);
    layer_.backward(inputs, output, output_grad, input_grads, ctx);
  }

  // Finite-difference check of every input and parameter gradient.
  void expect_gradients(const StepContext& ctx = {}, float eps = 1e-2f, double rtol = 2e-3,
                        double atol = 2e-3) {
    const auto r = random_values(output.numel(), 4242);
    from_host(output_grad.flat(), r);
    const auto loss = [&]() {
      forward(ctx);
      const auto y = to_host(output.flat());
      double l = 0;
      for (std::size_t i = 0; i < y.size(); ++i) l += double(r[i]) * y[i];
      return l;
    };
    forward(ctx);
    backward(ctx);
    std::vector<std::vector<float>> analytic_inputs;
    for (auto& g : input_grads) analytic_inputs.push_back(to_host(g.flat()));
    std::vector<std::vector<float>> analytic_params;
    for (std::size_t i = 0; i < params_.entries().size(); ++i)
      analytic_params.push_back(to_host(params_.gradient(i).flat()));
    if (layer_.writes_input_gradients()) expect_written_gradients(ctx, analytic_inputs);
    for (std::size_t i = 0; i < inputs.size(); ++i)
      expect_gradient(("d" + layer_.name() + "/dx" + std::to_string(i)).c_str(), inputs[i].flat(),
                      analytic_inputs[i], loss, eps, rtol, atol);
    for (std::size_t i = 0; i < params_.entries().size(); ++i)
      expect_gradient(("d" + layer_.name() + "/d" + params_.entries()[i].spec.name).c_str(),
                      params_.value(i).flat(), analytic_params[i], loss, eps, rtol, atol);
  }

  // A layer that writes_input_gradients(), run with
  // StepContext::write_input_gradients over input gradients full of NaN,
  // leaves the bits `added` holds (backward into zeroed gradients).
  void expect_written_gradients(const StepContext& ctx,
                                const std::vector<std::vector<float>>& added) {
    StepContext write = ctx;
    write.write_input_gradients = true;
    params_.zero_gradients(ExecSpace());
    for (auto& g : input_grads) Kokkos::deep_copy(g.flat(), std::nanf(""));
    layer_.backward(inputs, output, output_grad, input_grads, write);
    for (std::size_t i = 0; i < input_grads.size(); ++i)
      EXPECT_EQ(float_bits(to_host(input_grads[i].flat())), float_bits(added[i]))
          << layer_.name() << ": input gradient " << i
          << " written whole differs from the one added into zeros";
  }

  Tensors inputs, input_grads;
  Tensor<float> output, output_grad;

 private:
  Layer& layer_;
  ParameterStore params_;
  ParameterStore state_;
};

// Per-type tolerances of a layer computing in 16 bits: its outputs and
// input gradients are float results rounded once to the format, so each lies
// within the unit roundoff u (2^-8 for bf16, 2^-11 for fp16) of the float
// layer's result on the same values, relative to that result, plus `slack`
// times the largest magnitude of the tensor for sums taken in another order;
// its parameter gradients are float sums of the same products, within
// `slack` of the float layer's (relative to their largest magnitude). A
// layer whose backward reads its own (rounded) output allows input_grad_u
// times u for its input gradients, and input_grad_slack (when not negative)
// instead of `slack` for them.
template <class T>
constexpr double unit_roundoff() {
  return std::is_same<T, bf16>::value ? 1.0 / 256 : 1.0 / 2048;
}

inline void expect_rounded_from(const char* what, const std::vector<float>& got,
                                const std::vector<float>& reference, double u, double slack) {
  ASSERT_EQ(got.size(), reference.size()) << what;
  double largest = 0;
  for (float r : reference) largest = std::max(largest, std::fabs(double(r)));
  int shown = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = u * std::fabs(double(reference[i])) + slack * largest;
    const double error = std::fabs(double(got[i]) - double(reference[i]));
    if (!(error <= bound) && shown++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " against " << reference[i]
                    << " (error " << error << ", bound " << bound << ")";
  }
}

// Runs layer16 (set to compute in T) and layer32 (the same layer in float)
// on the same inputs, weights and output gradient, all values of T (what
// the 16-bit layer can hold), and checks the 16-bit results against the
// float ones with the tolerances above. `prepare` sets the harness's
// inputs (e.g. spread_inputs) before they are rounded.
template <class T>
void expect_16bit_matches_float(Layer& layer16, Layer& layer32, const Shapes& shapes,
                                const std::function<void(LayerHarness&)>& prepare = {},
                                double slack = 1e-5, double input_grad_u = 1.0,
                                const StepContext& ctx = {}, double input_grad_slack = -1) {
  constexpr FloatFormat format = format_of<T>();
  const double u = unit_roundoff<T>();
  const auto round = [](std::vector<float> v) {
    for (auto& x : v) x = float(T(x));
    return v;
  };
  const auto to16 = [](const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
    return out;
  };
  const auto widened = [](const std::vector<T>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = float(v[i]);
    return out;
  };
  layer16.set_compute(format);
  LayerHarness h32(layer32, shapes), h16(layer16, shapes);
  if (prepare) prepare(h32);
  for (auto& x : h32.inputs) from_host(x.flat(), round(to_host(x.flat())));
  from_host(h32.parameters().values(), round(to_host(h32.parameters().values())));
  Kokkos::deep_copy(h16.parameters().values(), h32.parameters().values());
  Kokkos::deep_copy(h16.state().values(), h32.state().values());
  from_host(h32.output_grad.flat(), round(random_values(h32.output.numel(), 4242)));

  // Float.
  h32.forward(ctx);
  h32.backward(ctx);
  // 16 bits.
  TensorsOf<T> x, dx;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    x.emplace_back("x16", shapes[i]);
    dx.emplace_back("dx16", shapes[i]);
    from_host(x.back().flat(), to16(to_host(h32.inputs[i].flat())));
    from_host(dx.back().flat(), std::vector<T>(shapes[i].numel(), T(0.0f)));
  }
  Tensor<T> y("y16", h32.output.shape()), dy("dy16", h32.output.shape());
  from_host(dy.flat(), to16(to_host(h32.output_grad.flat())));
  layer16.forward16(x, y, ctx);
  h16.parameters().zero_gradients(ExecSpace());
  layer16.backward16(x, y, dy, dx, ctx);

  const std::string name = layer16.name() + " in " + float_format_name(format);
  expect_rounded_from((name + ": y").c_str(), widened(to_host(y.flat())),
                      to_host(h32.output.flat()), u, slack);
  for (std::size_t i = 0; i < shapes.size(); ++i)
    expect_rounded_from((name + ": dx" + std::to_string(i)).c_str(), widened(to_host(dx[i].flat())),
                        to_host(h32.input_grads[i].flat()), input_grad_u * u,
                        input_grad_slack < 0 ? slack : input_grad_slack);
  expect_rounded_from((name + ": parameter gradients").c_str(),
                      to_host(h16.parameters().gradients()), to_host(h32.parameters().gradients()),
                      0.0, slack);
}

}  // namespace tessera::test
