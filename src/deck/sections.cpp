// Every key of a deck's sections, declared once (deck/keys.hpp): kind,
// range, help, and where its value goes. Defaults are the settings structs'
// member initialisers; the defaults that follow other keys and the rules
// between keys are each section's select and finish.
#include <tessera/deck/deck.hpp>
#include <tessera/settings/device_mpi.hpp>

#include <algorithm>
#include <cstdint>

namespace tessera {

namespace impl {
// resource_sections.cpp: [memory] and [kernels].
Section<Deck> memory_section();
Section<Deck> kernels_section();
}  // namespace impl

namespace {

constexpr Range non_negative = Range::at_least(0);

// Every data format: the keys naming the training set's files and the test
// set's, and its other keys.
const std::vector<DataFormat>& formats() {
  static const std::vector<DataFormat> list{
      {"idx",
       {"train_images", "train_labels"},
       {"test_images", "test_labels"},
       {"normalize_mean", "normalize_std"}},
      {"hdf5",
       {"train_file"},
       {"test_file"},
       {"images_dataset", "labels_dataset", "streaming", "max_resident_mb", "normalize_mean",
        "normalize_std"}},
      {"tokens", {"train_tokens"}, {"test_tokens"}, {"token_type"}}};
  return list;
}

// The formats that take data key `key`.
std::vector<std::string> formats_taking(const std::string& key) {
  std::vector<std::string> out;
  for (const auto& f : formats())
    if (std::count(f.train.begin(), f.train.end(), key) ||
        std::count(f.test.begin(), f.test.end(), key) ||
        std::count(f.keys.begin(), f.keys.end(), key))
      out.push_back(f.name);
  return out;
}

// The keys that name data files, the member each fills, and its help.
struct FileKey {
  const char* key;
  std::string Deck::*member;
  const char* help;
};
constexpr FileKey file_keys[] = {
    {"train_images", &Deck::train_images, "IDX file of the training images"},
    {"train_labels", &Deck::train_labels, "IDX file of the training labels"},
    {"test_images", &Deck::test_images, "IDX file of the test images"},
    {"test_labels", &Deck::test_labels, "IDX file of the test labels"},
    {"train_file", &Deck::train_file, "HDF5 file of the training images and labels"},
    {"test_file", &Deck::test_file, "HDF5 file of the test images and labels"},
    {"train_tokens", &Deck::train_tokens, "token file of the training text"},
    {"test_tokens", &Deck::test_tokens, "token file of the test text"}};

const FileKey& file_key(const std::string& key) {
  for (const FileKey& f : file_keys)
    if (key == f.key) return f;
  throw Error("tessera::data_formats: '" + key + "' is not a data file key");
}

// Declares the data file keys of `format`, the training set's then the
// test set's: each path with the data variables expanded, required by the
// formats that take it.
void declare_files(SectionBuilder<Deck>& s, const std::string& format) {
  for (const DataFormat& d : formats()) {
    if (d.name != format) continue;
    for (const auto* set : {&d.train, &d.test})
      for (const auto& key : *set) {
        const FileKey f = file_key(key);
        s.custom(
             f.key, KeyKind::text, Range::any(), f.help,
             [f](Deck& deck, const KeyValue& v) {
               try {
                 deck.*f.member = expand_data_path(v.text);
               } catch (const DeckError& e) {
                 throw KeyRefused(e.what());
               }
             },
             [f](const Deck& deck) { return deck.*f.member; })
            .required()
            .applies_to(formats_taking(f.key))
            .default_text("required for `" + format + "`");
      }
  }
}

Section<Deck> run_section() {
  return SectionBuilder<Deck>("run")
      .text(
          "name", [](auto& d) -> auto& { return d.run.name; },
          "name shown in the output, and the default output directory")
      .allowed("no `/`")
      .check([](const Deck& d) {
        if (d.run.name.empty() || d.run.name.find('/') != std::string::npos)
          throw KeyRefused("must be a non-empty name without '/'");
      })
      .integer(
          "seed", [](auto& d) -> auto& { return d.training.seed; }, non_negative,
          "seeds weight initialisation, the per-epoch shuffle and dropout")
      .text(
          "output_dir", [](auto& d) -> auto& { return d.run.output_dir; },
          "where the run writes metrics.jsonl and, by default, its checkpoints")
      .default_text("`\"output/<name>\"`")
      .check([](const Deck& d) {
        if (d.run.output_dir.empty()) throw KeyRefused("must not be empty");
      })
      .finish([](Deck& d, const KeyFailure&) {
        if (d.run.output_dir.empty()) d.run.output_dir = "output/" + d.run.name;
      });
}

// Pixels are scaled to [0, 1] before (x - mean) / std, so a mean outside
// [0, 1] or a std above 1 is a setting for another scale (0 to 255).
const char* const pixel_scale =
    "; pixels are scaled to [0, 1] before normalising (for statistics on the 0-255 scale, "
    "divide them by 255)";

Section<Deck> data_section() {
  std::vector<std::string> names;
  for (const auto& f : formats()) names.push_back(f.name);
  SectionBuilder<Deck> s("data", true);
  s.choice(
       "format", [](auto& d) -> auto& { return d.data_format; }, names,
       "file format; the file keys depend on it")
      .selector("format");
  declare_files(s, "idx");
  declare_files(s, "hdf5");
  s.text(
       "images_dataset", [](auto& d) -> auto& { return d.images_dataset; },
       "dataset of images [N, ...] in the HDF5 files")
      .applies_to(formats_taking("images_dataset"))
      .text(
          "labels_dataset", [](auto& d) -> auto& { return d.labels_dataset; },
          "dataset of labels [N] in the HDF5 files")
      .applies_to(formats_taking("labels_dataset"))
      .boolean(
          "streaming", [](auto& d) -> auto& { return d.streaming; },
          "read each batch from the HDF5 file while training runs")
      .applies_to(formats_taking("streaming"))
      .integer(
          "max_resident_mb", [](auto& d) -> auto& { return d.max_resident_mb; },
          Range::closed(0, double(std::int64_t(1) << 40)),
          "the most memory (MiB) one data file may take on a rank; 0: no limit")
      .applies_to(formats_taking("max_resident_mb"));
  declare_files(s, "tokens");
  return s
      .choice(
          "token_type", [](auto& d) -> auto& { return d.token_type; }, {"uint16", "int32"},
          "the width of each token id in both files")
      .applies_to(formats_taking("token_type"))
      .number(
          "normalize_mean", [](auto& d) -> auto& { return d.normalize_mean; }, Range::closed(0, 1),
          "subtracted from pixels scaled to [0, 1] (statistics on the 0-255 scale / 255)")
      .applies_to(formats_taking("normalize_mean"))
      .range_hint(pixel_scale)
      .number(
          "normalize_std", [](auto& d) -> auto& { return d.normalize_std; },
          Range::closed(0.001, 1), "divides pixels scaled to [0, 1] after the mean")
      .applies_to(formats_taking("normalize_std"))
      .range_hint(pixel_scale)
      .integer(
          "train_samples", [](auto& d) -> auto& { return d.train_samples; }, non_negative,
          "train on the first this many samples only; 0: all")
      .integer(
          "test_samples", [](auto& d) -> auto& { return d.test_samples; }, non_negative,
          "evaluate on the first this many test samples only; 0: all")
      .number(
          "validation_split", [](auto& d) -> auto& { return d.validation_split; },
          Range::closed(0, 0.9), "share of the training file held out for validation")
      .finish([](Deck& d, const KeyFailure&) {
        for (const auto& f : formats())
          if (f.name == d.data_format)
            for (const auto* set : {&f.train, &f.test})
              for (const auto& key : *set)
                d.data_files.push_back(
                    {key, d.*file_key(key).member, d.location("data." + key), set == &f.train});
      });
}

Section<Deck> model_section() {
  return SectionBuilder<Deck>("model", true)
      .custom(
          "input_shape", KeyKind::integers, Range::at_least(1),
          "one sample, without the batch dimension, e.g. [784] or [1, 28, 28]",
          [](Deck& d, const KeyValue& v) {
            if (v.integers.empty() || v.integers.size() > 3)
              throw KeyRefused("expected 1 to 3 dimensions");
            d.input_shape = v.integers;
          },
          [](const Deck& d) { return impl::list_text(d.input_shape); })
      .required()
      .allowed("1 to 3 extents")
      .custom("layers", KeyKind::tables, Range::any(), "the layers, applied in order", {}, {})
      .required()
      .allowed("at least one")
      .finish([](Deck& d, const KeyFailure& f) {
        if (d.data_format == "tokens" && d.input_shape.size() != 1)
          f.fail("input_shape",
                 "token data needs one extent, the window of tokens a sample holds, e.g. [128]");
      });
}

Section<Deck> loss_section() {
  return SectionBuilder<Deck>("loss")
      .choice(
          "type", [](auto& d) -> auto& { return d.training.loss.type; }, loss_types(),
          "the loss over the model's output")
      .number(
          "label_smoothing", [](auto& d) -> auto& { return d.training.loss.label_smoothing; },
          Range::closed(0, 0.99), "share of each target spread over all classes (training)");
}

Section<Deck> optimizer_section() {
  const std::vector<std::string> sgd{"sgd"}, adam{"adam", "adamw"};
  return SectionBuilder<Deck>("optimizer")
      .choice(
          "type", [](auto& d) -> auto& { return d.optimizer.type; }, {"sgd", "adam", "adamw"},
          "the update rule")
      .selector("type")
      .select([](Deck& d, const std::string& type) {
        d.optimizer = OptimizerParams::for_type(type);
        d.training.schedule.base_lr = OptimizerParams::default_lr(type);
      })
      .number(
          "lr", [](auto& d) -> auto& { return d.training.schedule.base_lr; },
          LrSchedule::base_lr_range, "the learning rate (the schedule's base)")
      .default_text("`0.01` for `sgd`, `0.001` for `adam` and `adamw`")
      .number(
          "weight_decay", [](auto& d) -> auto& {
            return d.optimizer.type == "sgd" ? d.optimizer.sgd.weight_decay
                                             : d.optimizer.adam.weight_decay;
          },
          OptimizerParams::weight_decay_range, "L2 penalty (sgd, adam) or decoupled decay (adamw)")
      .default_text("`0`; `0.01` for `adamw`")
      .number(
          "momentum", [](auto& d) -> auto& { return d.optimizer.sgd.momentum; },
          SgdParams::momentum_range, "velocity kept from step to step")
      .applies_to(sgd)
      .boolean(
          "nesterov", [](auto& d) -> auto& { return d.optimizer.sgd.nesterov; },
          "Nesterov momentum")
      .allowed("needs `momentum > 0`")
      .applies_to(sgd)
      .number(
          "beta1", [](auto& d) -> auto& { return d.optimizer.adam.beta1; }, AdamParams::beta_range,
          "decay of the first moment")
      .applies_to(adam)
      .number(
          "beta2", [](auto& d) -> auto& { return d.optimizer.adam.beta2; }, AdamParams::beta_range,
          "decay of the second moment")
      .applies_to(adam)
      .number(
          "eps", [](auto& d) -> auto& { return d.optimizer.adam.eps; }, AdamParams::eps_range,
          "added to the second moment's root")
      .applies_to(adam)
      .finish([](Deck& d, const KeyFailure& f) {
        if (d.optimizer.sgd.nesterov && !(d.optimizer.sgd.momentum > 0))
          f.fail("nesterov", "Nesterov momentum needs optimizer.momentum > 0");
      });
}

Section<Deck> schedule_section() {
  return SectionBuilder<Deck>("schedule")
      .named(
          "type", [](auto& d) -> auto& { return d.training.schedule.type; }, schedule_types,
          "how the learning rate changes")
      .selector("type")
      .integer(
          "step_size", [](auto& d) -> auto& { return d.training.schedule.step_size; },
          LrSchedule::step_size_range, "epochs between decays")
      .applies_to({"step"})
      .default_text("required for `step`")
      .number(
          "gamma", [](auto& d) -> auto& { return d.training.schedule.gamma; },
          LrSchedule::gamma_range, "the decay factor")
      .applies_to({"step", "multistep", "exponential"})
      .default_text("`0.1`; required for `exponential`")
      .custom(
          "milestones", KeyKind::integers, Range::at_least(1),
          "increasing epochs at which the rate decays",
          [](Deck& d, const KeyValue& v) {
            if (v.integers.empty())
              throw KeyRefused("expected a non-empty array of increasing epochs, e.g. [30, 60]");
            for (std::size_t i = 1; i < v.integers.size(); ++i)
              if (v.integers[i] <= v.integers[i - 1])
                throw KeyRefused("epoch " + std::to_string(v.integers[i]) + " does not follow " +
                                     std::to_string(v.integers[i - 1]) +
                                     "; milestones must increase",
                                 i);
            d.training.schedule.milestones = v.integers;
          },
          [](const Deck& d) { return impl::list_text(d.training.schedule.milestones); })
      .applies_to({"multistep"})
      .default_text("required for `multistep`")
      .allowed("increasing")
      .number(
          "min_lr", [](auto& d) -> auto& { return d.training.schedule.min_lr; },
          LrSchedule::base_lr_range, "the rate a cosine schedule ends at")
      .allowed("at most `optimizer.lr`")
      .applies_to({"cosine"})
      .integer(
          "warmup_steps", [](auto& d) -> auto& { return d.training.schedule.warmup_steps; },
          non_negative, "steps of linear warmup")
      .number(
          "warmup_start_factor",
          [](auto& d) -> auto& { return d.training.schedule.warmup_start_factor; },
          LrSchedule::warmup_start_factor_range, "the warmup's first factor")
      .allowed("needs `warmup_steps > 0`")
      .finish([](Deck& d, const KeyFailure& f) {
        const LrSchedule& s = d.training.schedule;
        const std::string type = schedule_name(s.type);
        // The key each type cannot do without, and what it holds.
        const struct {
          const char *type, *key, *holds;
        } needs[] = {{"exponential", "gamma", ""},
                     {"step", "step_size", ""},
                     {"multistep", "milestones", ": an array of increasing epochs, e.g. [30, 60]"}};
        for (const auto& n : needs)
          if (type == n.type && !f.given(n.key))
            f.fail(n.key, "required for type '" + type + "'" + n.holds);
        if (s.min_lr > s.base_lr)
          f.fail("min_lr",
                 "value " + impl::number_text(s.min_lr) +
                     " is out of range [0, optimizer.lr = " + impl::number_text(s.base_lr) + "]");
        if (s.warmup_steps == 0 && f.given("warmup_start_factor"))
          f.fail("warmup_start_factor", "has no effect without schedule.warmup_steps > 0");
      });
}

Section<Deck> training_section() {
  return SectionBuilder<Deck>("training")
      .integer(
          "epochs", [](auto& d) -> auto& { return d.training.epochs; }, TrainOptions::epochs_range,
          "passes over the training set")
      .integer(
          "batch_size", [](auto& d) -> auto& { return d.training.batch_size; },
          TrainOptions::batch_size_range, "samples per step over all ranks together")
      .integer(
          "accumulation_steps", [](auto& d) -> auto& { return d.training.accumulation_steps; },
          TrainOptions::accumulation_steps_range, "micro-batches per step, their gradients added")
      .allowed("at most `batch_size`")
      .integer(
          "max_steps", [](auto& d) -> auto& { return d.training.max_steps; }, non_negative,
          "optimizer steps after which the run ends, whatever the epochs; 0: no limit")
      .integer(
          "log_every", [](auto& d) -> auto& { return d.training.log_every; }, non_negative,
          "steps between progress lines; 0: none")
      .number(
          "clip_norm", [](auto& d) -> auto& { return d.training.clip_norm; },
          TrainOptions::clip_norm_range, "gradient clipping by global norm; 0: off")
      .custom(
          "recompute", KeyKind::choice_or_texts, Range::any(),
          "outputs kept from forward to backward; the others are computed again",
          [](Deck& d, const KeyValue& v) {
            if (v.texts.empty()) {
              d.memory.recompute.mode = recompute_modes.value(v.text, "tessera::parse_deck");
              d.memory.recompute.layers.clear();
              return;
            }
            for (std::size_t i = 0; i < v.texts.size(); ++i)
              if (std::none_of(d.layers.begin(), d.layers.end(),
                               [&](const LayerDeck& l) { return l.name == v.texts[i]; }))
                throw KeyRefused("'" + v.texts[i] + "' is not a layer name", i);
            d.memory.recompute.mode = RecomputeMode::layers;
            d.memory.recompute.layers = v.texts;
          },
          [](const Deck& d) {
            return d.memory.recompute.mode == RecomputeMode::layers
                       ? impl::list_text(d.memory.recompute.layers)
                       : impl::quoted(recompute_modes.name(d.memory.recompute.mode));
          })
      .choices({"none", "blocks"})
      .allowed("or an array of layer names")
      .integer(
          "eval_every", [](auto& d) -> auto& { return d.run.eval_every; },
          Range::closed(0, 1000000), "epochs between evaluations; 0: after the last only")
      .integer(
          "early_stop_patience", [](auto& d) -> auto& { return d.run.early_stop_patience; },
          Range::closed(0, 1000000),
          "evaluations in a row without a lower evaluation loss after which the run ends; 0: "
          "never")
      .number(
          "early_stop_min_delta", [](auto& d) -> auto& { return d.run.early_stop_min_delta; },
          Range::closed(0, 1e6), "the least fall of the evaluation loss that counts as lower")
      .finish([](Deck& d, const KeyFailure& f) {
        if (d.run.early_stop_patience > 0 && d.run.eval_every == 0)
          f.fail("early_stop_patience",
                 "early stopping watches the evaluations after each epoch; set eval_every "
                 "(the epochs between them) to 1 or more");
        const TrainOptions& t = d.training;
        if (t.accumulation_steps > t.batch_size)
          f.fail("accumulation_steps",
                 "value " + std::to_string(t.accumulation_steps) +
                     " is out of range [1, batch_size = " + std::to_string(t.batch_size) + "]");
      });
}

Section<Deck> precision_section() {
  return SectionBuilder<Deck>("precision")
      .named(
          "compute", [](auto& d) -> auto& { return d.training.compute; }, float_formats,
          "the format of every layer's output and its gradient")
      .custom(
          "loss_scale", KeyKind::choice, Range::any(), "loss scaling",
          [](Deck& d, const KeyValue& v) { d.training.loss_scaling.dynamic = v.text == "dynamic"; },
          [](const Deck& d) {
            return std::string(d.training.loss_scaling.dynamic ? "dynamic" : "none");
          })
      .choices({"none", "dynamic"})
      .selector("loss_scale")
      .number(
          "initial_loss_scale", [](auto& d) -> auto& { return d.training.loss_scaling.initial; },
          Range::any(), "the scale of the first step")
      .allowed("a power of two from 1 to 16777216")
      .applies_to({"dynamic"})
      .check([](const Deck& d) {
        if (!LossScaling::valid_scale(d.training.loss_scaling.initial))
          throw KeyRefused("must be a power of two from 1 to 16777216 (2^24)");
      })
      .integer(
          "loss_scale_growth_interval",
          [](auto& d) -> auto& { return d.training.loss_scaling.growth_interval; },
          Range::at_least(1), "finite steps in a row after which the scale doubles")
      .applies_to({"dynamic"});
}

// [parallel]'s rules: what a pipeline cannot be combined with, and as many
// boundaries as stages after the first.
void check_pipeline(Deck& d, const KeyFailure& f) {
  if (d.pipeline_stages > 1 && d.training.shard_optimizer)
    f.fail("pipeline_stages",
           "a pipeline keeps each stage's optimizer state on its own ranks already; it cannot be "
           "combined with parallel.shard_optimizer = true");
  if (d.pipeline_stages > 1 && d.training.gradient_dtype != FloatFormat::fp32)
    f.fail("pipeline_stages",
           "a pipeline sums its stages' gradients in fp32; it cannot be combined with "
           "parallel.gradient_dtype = \"" +
               std::string(float_format_name(d.training.gradient_dtype)) + "\"");
  if (f.given("stage_boundaries") &&
      d.stage_boundaries.size() + 1 != static_cast<std::size_t>(d.pipeline_stages))
    f.fail("stage_boundaries",
           "names " + std::to_string(d.stage_boundaries.size()) +
               " layer(s); parallel.pipeline_stages = " + std::to_string(d.pipeline_stages) +
               " needs " + std::to_string(d.pipeline_stages - 1) +
               " (the first layer of every stage but the first)");
}

Section<Deck> parallel_section() {
  return SectionBuilder<Deck>("parallel")
      .custom(
          "bucket_mb", KeyKind::number, Range::closed(1e-6, 4096),
          "gradients are summed in buckets of at least this many MiB",
          [](Deck& d, const KeyValue& v) {
            d.training.bucket_bytes =
                std::max<std::int64_t>(1, static_cast<std::int64_t>(v.number * 1024.0 * 1024.0));
          },
          [](const Deck& d) {
            return impl::number_text(static_cast<double>(d.training.bucket_bytes) / (1 << 20));
          })
      .boolean(
          "overlap", [](auto& d) -> auto& { return d.training.overlap; },
          "start each bucket's allreduce while backward runs")
      .custom(
          "batchnorm", KeyKind::choice, Range::any(), "BatchNorm statistics per rank or global",
          [](Deck& d, const KeyValue& v) { d.training.sync_batchnorm = v.text == "sync"; },
          [](const Deck& d) { return std::string(d.training.sync_batchnorm ? "sync" : "local"); })
      .choices({"local", "sync"})
      .choice(
          "gpu_aware_mpi", [](auto& d) -> auto& { return d.gpu_aware_mpi; },
          device_mpi_names.names(), "how gradients in GPU memory reach MPI")
      .named(
          "gradient_dtype", [](auto& d) -> auto& { return d.training.gradient_dtype; },
          float_formats, "the format gradients are sent and summed in")
      .boolean(
          "shard_optimizer", [](auto& d) -> auto& { return d.training.shard_optimizer; },
          "ZeRO-1: each rank keeps and updates 1/N of the optimizer state")
      .boolean(
          "overlap_gather", [](auto& d) -> auto& { return d.training.overlap_gather; },
          "gather sharded parameters during the next forward pass")
      .integer(
          "pipeline_stages", [](auto& d) -> auto& { return d.pipeline_stages; },
          Range::closed(1, 4096), "pipeline stages the layers are split into")
      .allowed("dividing the rank count")
      .custom(
          "stage_boundaries", KeyKind::texts, Range::any(),
          "the first layer of every stage after the first",
          [](Deck& d, const KeyValue& v) {
            for (std::size_t i = 0; i < v.texts.size(); ++i)
              if (std::none_of(d.layers.begin(), d.layers.end(),
                               [&](const LayerDeck& l) { return l.name == v.texts[i]; }))
                throw KeyRefused("'" + v.texts[i] + "' is not a layer name", i);
            d.stage_boundaries = v.texts;
          },
          [](const Deck& d) { return impl::list_text(d.stage_boundaries); })
      .default_text("balanced")
      .allowed("layer names")
      .finish(check_pipeline);
}

Section<Deck> checkpoint_section() {
  return SectionBuilder<Deck>("checkpoint")
      .text(
          "directory", [](auto& d) -> auto& { return d.run.checkpoint.directory; },
          "where checkpoints and the `latest` pointer go")
      .default_text("`\"<run.output_dir>/checkpoints\"`")
      .allowed("not empty")
      .check([](const Deck& d) {
        if (d.run.checkpoint.directory.empty()) throw KeyRefused("must not be empty");
      })
      .integer(
          "keep", [](auto& d) -> auto& { return d.run.checkpoint.keep; }, Range::closed(1, 1000000),
          "newest checkpoints kept")
      .integer(
          "every_epochs", [](auto& d) -> auto& { return d.run.checkpoint.every_epochs; },
          Range::closed(0, 1000000), "a checkpoint every this many epochs")
      .integer(
          "every_steps", [](auto& d) -> auto& { return d.run.checkpoint.every_steps; },
          non_negative, "a checkpoint every this many optimizer steps")
      .number(
          "every_minutes", [](auto& d) -> auto& { return d.run.checkpoint.every_minutes; },
          Range::closed(0, 1e6), "a checkpoint once this many minutes have passed")
      .finish([](Deck& d, const KeyFailure&) {
        if (d.run.checkpoint.directory.empty())
          d.run.checkpoint.directory = d.run.output_dir + "/checkpoints";
      });
}

}  // namespace

const std::vector<DataFormat>& data_formats() { return formats(); }

const std::vector<Section<Deck>>& deck_sections() {
  static const std::vector<Section<Deck>> sections{
      run_section(),       data_section(),         model_section(),      loss_section(),
      optimizer_section(), schedule_section(),     training_section(),   precision_section(),
      parallel_section(),  impl::memory_section(), checkpoint_section(), impl::kernels_section()};
  return sections;
}

std::string deck_key_reference() {
  const Deck defaults;
  std::string out;
  for (const auto& s : deck_sections())
    out += "## `[" + s.name + "]`\n\n" + section_reference_markdown(s, defaults) + "\n";
  return out;
}

std::string deck_settings(const Deck& deck) {
  std::string out;
  for (const auto& s : deck_sections()) {
    const Key<Deck>* selector = s.key(s.selector);
    const std::string selected = selector ? selector->show(deck) : "";
    for (const auto& k : s.keys) {
      const bool applies =
          k.applies_to.empty() || std::count(k.applies_to.begin(), k.applies_to.end(), selected);
      if (k.kind == KeyKind::tables || !applies) continue;
      const std::string key = s.name + "." + k.name;
      const auto given = deck.locations.find(key);
      const bool text = k.kind == KeyKind::choice || k.kind == KeyKind::text;
      const std::string value = k.show(deck);
      out += "  " + key + " = " + (text ? impl::quoted(value) : value) +
             (given == deck.locations.end() ? "" : "  (" + given->second + ")") + "\n";
    }
  }
  return out;
}

std::string Deck::location(const std::string& key) const {
  return key_location(locations, key, path);
}

}  // namespace tessera
