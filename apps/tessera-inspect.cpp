// tessera-inspect: print what a checkpoint holds (step, deck, layers,
// parameter shapes and norms, optimizer state) without a model or a device;
// bad files get a message naming the file and the problem and exit status 2.
#include <tessera/io/checkpoint.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "cli.hpp"

namespace {

using tessera::shape_text;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out.empty() ? "-" : out;
}

// Nine significant digits: enough to tell any two floats apart.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

void print_tensors(const char* title, const std::vector<tessera::CheckpointTensor>& tensors) {
  std::int64_t values = 0;
  std::size_t name_width = 0, shape_width = 0;
  for (const auto& t : tensors) {
    values += static_cast<std::int64_t>(t.values.size());
    name_width = std::max(name_width, t.layer.size() + 1 + t.name.size());
    shape_width = std::max(shape_width, shape_text(t.shape).size());
  }
  std::cout << title << " (" << tensors.size() << " tensors, " << values << " values):\n";
  for (const auto& t : tensors) {
    const std::string name = t.layer + "/" + t.name, shape = shape_text(t.shape);
    std::cout << "  " << name << std::string(name_width - name.size() + 2, ' ') << shape
              << std::string(shape_width - shape.size() + 2, ' ') << "norm " << number(t.norm())
              << "\n";
  }
}

void print(const tessera::CheckpointContents& c) {
  const auto& info = c.info;
  std::cout << "checkpoint: " << c.path << "\n"
            << "format: " << tessera::checkpoint_format << " version "
            << tessera::checkpoint_format_version << ", written by Tessera " << info.tessera_version
            << "\n"
            << "step: " << info.cursor.step << "\n"
            << tessera::checkpoint_progress(info) << "\n"
            << "world size: " << info.world_size << ", global batch " << info.global_batch << "\n"
            << "learning rate: " << info.lr << ", schedule: " << info.schedule << "\n"
            << "seed: " << info.seed << "\n"
            << "optimizer: " << c.optimizer << ", step count " << c.optimizer_steps << ", state: ";
  std::vector<std::string> buffers;
  for (const auto& b : c.optimizer_buffers) buffers.push_back(b.name);
  std::cout << (buffers.empty() ? "none yet" : join(buffers)) << "\n";
  const auto metric_lines = std::count(info.metrics.begin(), info.metrics.end(), '\n');
  std::cout << "metrics: " << metric_lines << " lines\n"
            << "deck: " << info.deck_path << ", overrides: " << join(info.deck_overrides) << "\n";
  std::istringstream deck(info.deck_text);
  for (std::string line; std::getline(deck, line);) std::cout << "  | " << line << "\n";

  std::cout << "layers (" << c.layers.size() << "), input shape " << shape_text(c.input_shape)
            << ":\n";
  std::size_t name_width = 4, type_width = 4;
  for (const auto& l : c.layers) {
    name_width = std::max(name_width, l.name.size());
    type_width = std::max(type_width, l.type.size());
  }
  std::size_t shape_width = 0;
  for (const auto& l : c.layers)
    shape_width = std::max(shape_width, shape_text(l.output_shape).size());
  for (const auto& l : c.layers) {
    const std::string shape = shape_text(l.output_shape);
    std::cout << "  " << l.name << std::string(name_width - l.name.size() + 2, ' ') << l.type
              << std::string(type_width - l.type.size() + 2, ' ') << shape
              << std::string(shape_width - shape.size() + 2, ' ') << "<- " << join(l.inputs)
              << "\n";
  }
  print_tensors("parameters", c.parameters);
  print_tensors("state", c.state);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-inspect: print what a Tessera checkpoint holds"};
  std::string what;
  app.add_option(
         "checkpoint", what,
         "a checkpoint file, a checkpoint directory (its newest checkpoint) or its 'latest' file")
      ->required();
  if (const auto status = tessera::app::parse_command_line(app, argc, argv, "tessera-inspect"))
    return *status;
  try {
    print(tessera::read_checkpoint(tessera::resolve_checkpoint(what)));
  } catch (const std::exception& e) {
    std::cerr << "tessera-inspect: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
