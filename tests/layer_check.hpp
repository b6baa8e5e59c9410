// Runs one layer on its own, outside a model, for value and gradient tests:
// random inputs, seeded parameters, and a finite-difference check of every
// input and parameter gradient through L = sum(r .* y) for a fixed random r.
#pragma once

#include <tessera/layers/layer.hpp>
#include <tessera/model/parameters.hpp>

#include <algorithm>

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
    params_.initialize(seed);
    state_.initialize(seed);
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
  ParameterStore& state() { return state_; }

  void forward(const StepContext& ctx = {}) { layer_.forward(inputs, output, ctx); }
  // Zeroes gradients, then back-propagates output_grad.
  void backward(const StepContext& ctx = {}) {
    params_.zero_gradients();
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
    for (std::size_t i = 0; i < inputs.size(); ++i)
      expect_gradient(("d" + layer_.name() + "/dx" + std::to_string(i)).c_str(), inputs[i].flat(),
                      analytic_inputs[i], loss, eps, rtol, atol);
    for (std::size_t i = 0; i < params_.entries().size(); ++i)
      expect_gradient(("d" + layer_.name() + "/d" + params_.entries()[i].spec.name).c_str(),
                      params_.value(i).flat(), analytic_params[i], loss, eps, rtol, atol);
  }

  Tensors inputs, input_grads;
  Tensor<float> output, output_grad;

 private:
  Layer& layer_;
  ParameterStore params_;
  ParameterStore state_;
};

}  // namespace tessera::test
