// A training run from a deck: the stages of tessera-train, each that can
// fail on one rank ending in a collective verdict. The run's outputs
// (metrics, checkpoints) and restarts are in run_outputs.cpp.
#include <tessera/app/run.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/data/hdf5.hpp>
#include <tessera/data/stream.hpp>
#include <tessera/data/tokens.hpp>
#include <tessera/deck/build.hpp>

#include <nlohmann/json.hpp>

#include "run_state.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace tessera {

using impl::agree;
using impl::mib;
using json = nlohmann::json;

namespace {

std::string number_text(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

// data.max_resident_mb against an HDF5 set loaded whole, before it is read.
void require_resident(const Deck& deck, const std::string& file) {
  if (deck.max_resident_mb <= 0) return;
  const std::vector<std::int64_t> dims = hdf5_dataset_extent(file, deck.images_dataset);
  std::int64_t values = 1;
  for (const std::int64_t d : dims) values *= d;
  const std::int64_t samples = dims.empty() ? 0 : dims[0];
  const std::int64_t bytes = 4 * values + 4 * samples;
  if (bytes <= (deck.max_resident_mb << 20)) return;
  throw DeckError(deck.location("data.max_resident_mb") + ": data.max_resident_mb: " + file + ":" +
                  deck.images_dataset + " holds " + std::to_string(samples) +
                  " samples, which take " + std::to_string((bytes + (1 << 20) - 1) >> 20) +
                  " MiB in memory, more than the limit of " + std::to_string(deck.max_resident_mb) +
                  " MiB; set data.streaming = true to read them from the file batch by batch");
}

// The samples a set takes from the head of its files (0: all of them).
std::int64_t head_samples(const Deck& d, bool training) {
  return training ? d.train_samples : d.test_samples;
}

// How each format of data_formats() reads a set from its files (the
// format's file keys for that set, in order); IDX files only as far as the
// run takes samples (data.train_samples, data.test_samples).
Dataset read_idx(const Deck& d, const std::vector<std::string>& files, bool training) {
  return load_idx_dataset(files.at(0), files.at(1), d.normalize_mean, d.normalize_std,
                          head_samples(d, training));
}
Dataset read_hdf5(const Deck& d, const std::vector<std::string>& files, bool) {
  if (d.streaming)
    return stream_hdf5_dataset(files.at(0), d.images_dataset, d.labels_dataset, d.normalize_mean,
                               d.normalize_std);
  require_resident(d, files.at(0));
  return load_hdf5_dataset(files.at(0), d.images_dataset, d.labels_dataset, d.normalize_mean,
                           d.normalize_std);
}
// Training draws random windows; evaluation covers the stream once.
Dataset read_tokens(const Deck& d, const std::vector<std::string>& files, bool training) {
  return load_token_dataset(files.at(0), d.token_type, d.input_shape.at(0), training);
}

struct DataSource {
  const char* format;
  Dataset (*read)(const Deck&, const std::vector<std::string>& files, bool training);
};
constexpr DataSource data_sources[] = {
    {"idx", read_idx}, {"hdf5", read_hdf5}, {"tokens", read_tokens}};

const DataSource& data_source(const std::string& format) {
  for (const DataSource& source : data_sources)
    if (format == source.format) return source;
  throw Error("tessera::read_data_set: no reader for data format '" + format + "'");
}

// What a set read from `files` depends on: a process's runs share it when
// this is the same (DatasetCache).
std::string data_cache_key(const Deck& d, const std::vector<std::string>& files, bool training) {
  std::ostringstream key;
  key << d.data_format << '\n';
  for (const auto& f : files) key << f << '\n';
  key << d.images_dataset << '\n'
      << d.labels_dataset << '\n'
      << d.streaming << '\n'
      << d.token_type << ' ' << (d.data_format == "tokens" ? d.input_shape.at(0) : 0) << ' '
      << training << '\n'
      << std::hexfloat << d.normalize_mean << ' ' << d.normalize_std << '\n'
      << (d.data_format == "idx" ? head_samples(d, training) : 0);
  return key.str();
}

}  // namespace

std::vector<std::string> data_set_files(const Deck& deck, bool training) {
  std::vector<std::string> files;
  for (const auto& f : deck.data_files)
    if (f.training == training) files.push_back(f.path);
  return files;
}

Dataset read_data_set(const Deck& deck, bool training) {
  return data_source(deck.data_format).read(deck, data_set_files(deck, training), training);
}

Run::Run(Deck deck, MPI_Comm comm) : deck_(std::move(deck)), outputs_(std::make_unique<Outputs>()) {
  const Communicator world(comm);
  const int stages = deck_.pipeline_stages;
  PipelinePlan plan;
  agree(world, [&] {
    if (world.size() % stages != 0)
      throw DeckError(deck_.location("parallel.pipeline_stages") + ": parallel.pipeline_stages: " +
                      std::to_string(stages) + " stages need a rank count divisible by " +
                      std::to_string(stages) + "; the job has " + std::to_string(world.size()) +
                      " ranks (stages x data-parallel ranks)");
    // A pipeline stage's ranks split every micro-batch between them.
    const std::int64_t shard = deck_.training.max_shard(world.size() / stages);
    if (stages == 1) {
      model_ = build_model(deck_, shard);
      return;
    }
    // Planned on the shapes; each rank then allocates its stage's workspace.
    model_ = infer_model(deck_, shard);
    try {
      plan = deck_.stage_boundaries.empty() ? balanced_pipeline(*model_, stages)
                                            : pipeline_at(*model_, deck_.stage_boundaries);
    } catch (const Error& e) {
      throw DeckError(deck_.location("parallel.pipeline_stages") +
                      ": parallel.pipeline_stages: " + e.what());
    }
  });
  std::string identity = deck_.text;
  for (const auto& o : deck_.overrides) identity += "\n--set " + o;
  require_same_on_every_rank(world, content_hash(identity), "the deck",
                             "start every rank with the same deck file and --set options");
  comm_ = std::make_unique<Communicator>(comm, device_mpi_from_name(deck_.gpu_aware_mpi));
  if (stages > 1) {
    pipeline_ = std::make_unique<Pipeline>(*comm_, plan, deck_.training.accumulation_steps);
    agree(world, [&] {
      const LayerRange stage = pipeline_->layers(*model_);
      model_->compile(model_->max_batch(), deck_.training.seed, stage);
      for (std::int64_t k = 1; k < pipeline_->in_flight(); ++k) {
        replicas_.push_back(build_model(deck_));
        replicas_.back()->compile(model_->max_batch(), *model_, stage);
      }
    });
  }
  // Before any training: a run over the deck's cap stops here on every rank.
  agree(world, [&] {
    const double cap = deck_.memory.cap_mb;
    const auto fits = [&](std::int64_t bytes) {
      return static_cast<double>(bytes) <= cap * (1 << 20);
    };
    const Memory m = memory();
    if (cap <= 0 || fits(m.total())) return;
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << deck_.location("memory.cap_mb")
       << ": memory.cap_mb: the run needs " << mib(m.total()) << " MiB on rank " << world.rank()
       << ", above the cap of " << cap << " MiB (" << memory_description(m) << "); ";
    if (m.activations.plan == BufferPlan::separate && fits(m.total(BufferPlan::shared)))
      os << "memory.buffers = \"shared\" fits; ";
    if (fits(m.total_blocks()) && m.total_blocks() < m.total())
      os << "training.recompute = \"blocks\" fits (" << mib(m.total_blocks()) << " MiB); ";
    os << "lower training.batch_size, raise training.accumulation_steps (smaller micro-batches), "
          "use precision.compute = \"bf16\", shard the optimizer state "
          "(parallel.shard_optimizer) or raise memory.cap_mb";
    throw DeckError(os.str());
  });
}

Run::~Run() = default;

std::int64_t Run::steps_per_epoch() const {
  return (train_.size() + deck_.training.batch_size - 1) / deck_.training.batch_size;
}

std::string Run::description() const {
  const TrainOptions& t = deck_.training;
  std::ostringstream os;
  os << "deck " << deck_.path << " (run '" << deck_.run.name << "')\n"
     << model_->summary() << "optimizer " << deck_.optimizer.type << ", lr " << t.schedule.base_lr
     << ", schedule " << schedule_name(t.schedule.type);
  if (t.schedule.warmup_steps > 0) os << " after " << t.schedule.warmup_steps << " warmup steps";
  if (t.clip_norm > 0) os << ", gradients clipped to norm " << t.clip_norm;
  if (t.accumulation_steps > 1)
    os << ", " << t.accumulation_steps << " micro-batches of gradients per step";
  if (t.compute != FloatFormat::fp32)
    os << ", activations and their gradients in " << float_format_name(t.compute) << " ("
       << std::fixed << std::setprecision(1) << mib(model_->activation_bytes())
       << " MiB), weights in fp32" << std::defaultfloat;
  if (t.loss_scaling.dynamic)
    os << ", dynamic loss scaling from " << t.loss_scaling.initial << " (doubling after "
       << t.loss_scaling.growth_interval << " finite steps)";
  os << "\n";
  if (comm_->size() > 1) {
    os << comm_->size() << " ranks, global batch " << t.batch_size << " (shards of up to "
       << model_->max_batch() << "), BatchNorm " << (t.sync_batchnorm ? "sync" : "local");
    if (pipeline_)
      os << ", each stage's gradients summed over its ranks after backward";
    else
      os << ", gradients averaged"
         << (t.gradient_dtype == FloatFormat::fp32
                 ? std::string()
                 : std::string(" in ") + float_format_name(t.gradient_dtype))
         << " over " << comm_->transport() << (t.overlap ? " during backward" : " after backward")
         << (t.shard_optimizer
                 ? std::string(", optimizer state sharded over the ranks, "
                               "parameters gathered ") +
                       (t.overlap_gather ? "during the next forward pass" : "after each update")
                 : std::string());
    os << "\n";
  }
  if (pipeline_) {
    const std::int64_t s = pipeline_->stages(), m = t.accumulation_steps;
    os << "pipeline of " << s << " stages x " << comm_->size() / s << " data-parallel rank(s), "
       << m << " micro-batch(es) per step in 1F1B order (idle "
       << "share without communication (S - 1) / (M + S - 1) = " << std::setprecision(2)
       << static_cast<double>(s - 1) / static_cast<double>(m + s - 1) << std::defaultfloat
       << "): " << describe_pipeline(*model_, pipeline_->plan()) << "\n";
    // Each stage holds its layers' activations once per micro-batch in flight.
    os << std::fixed << std::setprecision(1) << "activations and their gradients per rank: ";
    for (int k = 0; k < s; ++k)
      os << (k ? ", " : "") << "stage " << k + 1 << " "
         << mib(model_->activation_bytes(pipeline_->plan().stage(k))) << " MiB x "
         << pipeline_in_flight(k, static_cast<int>(s), m);
    os << " (the whole model " << mib(model_->activation_bytes()) << " MiB)" << std::defaultfloat
       << "\n";
  }
  os << memory_description() << "\n";
  if (deck_.streaming) {
    os << "data streamed from " << deck_.train_file << " and " << deck_.test_file
       << ": each rank reads its share of every batch, " << BatchStream::default_depth
       << " batches ahead";
    if (deck_.max_resident_mb > 0) os << ", within " << deck_.max_resident_mb << " MiB";
    os << "\n";
  }
  return os.str();
}

std::string Run::layer_options() const {
  std::string out;
  for (const auto& l : deck_.layers)
    out += "  " + l.name + " (" + l.type + ")" +
           (l.layer_type->keys.empty() ? "" : ": " + l.layer_type->describe(l.options)) + "\n";
  return out;
}

Dataset DatasetCache::get(const std::string& key, const std::function<Dataset()>& load) {
  const auto found = entries_.find(key);
  if (found != entries_.end()) return found->second;
  return entries_.emplace(key, load()).first->second;
}

void Run::prepare(const std::string& restart, const RunCallbacks& callbacks, DatasetCache* cache,
                  EarlierRun earlier_run_policy) {
  TESSERA_REQUIRE(!prepared_, "tessera::Run::prepare: called twice");
  const Communicator& comm = *comm_;
  load_data(callbacks, cache);
  shape_data();

  // A new run's output folder holds no other run's metrics or checkpoints.
  Outputs& out = *outputs_;
  out.metrics_path = deck_.run.output_dir + "/metrics.jsonl";
  out.checkpoints = std::make_unique<CheckpointDirectory>(deck_.run.checkpoint.directory,
                                                          deck_.run.checkpoint.keep);
  std::vector<std::string> earlier;  // what EarlierRun::replace removes
  if (restart.empty())
    agree(comm, [&] {
      if (comm.rank() == 0) earlier = earlier_run(earlier_run_policy);
    });

  // Every rank initialised the same weights from the seed; rank 0's are
  // broadcast anyway and the replicas compared, so no rank starts apart.
  comm.broadcast(model_->parameters().values());
  comm.broadcast(model_->state().values());
  require_same_weights_on_every_rank(comm, model_->parameters().values(), "the initial weights");

  optimizer_ = make_optimizer(deck_.optimizer);
  std::vector<Model*> replicas;
  for (const auto& r : replicas_) replicas.push_back(r.get());
  trainer_ = std::make_unique<Trainer>(*model_, *optimizer_, deck_.training, &comm, pipeline_.get(),
                                       replicas);
  if (deck_.run.early_stop_patience > 0)
    early_stop_ = std::make_unique<EarlyStopping>(deck_.run.early_stop_patience,
                                                  deck_.run.early_stop_min_delta);
  if (restart.empty()) choose_layer_kernels({}, false);
  const Restart resumed = restart.empty() ? Restart{} : resume(restart);
  open_outputs(earlier, resumed);
  out.last_checkpoint = cursor_.step;
  prepared_ = true;
}

// Every rank reads its data files (or its share of a streamed file).
void Run::load_data(const RunCallbacks& callbacks, DatasetCache* cache) {
  const Communicator& comm = *comm_;
  try {
    agree(comm, [&] {
      if (callbacks.before_data) callbacks.before_data(comm.rank());
      const auto load = [&](bool training) {
        const auto read = [&] { return read_data_set(deck_, training); };
        return cache ? cache->get(data_cache_key(deck_, data_set_files(deck_, training), training),
                                  read)
                     : read();
      };
      train_ = load(true);
      test_ = load(false);
      data_bytes_ = train_.device_bytes() + test_.device_bytes();
    });
  } catch (const CollectiveError& e) {
    throw CollectiveError(std::string("data error: ") + e.what());
  }
}

// The data against the model, then cut to data.train_samples and
// test_samples and split for validation.
void Run::shape_data() {
  const Communicator& comm = *comm_;
  agree(comm, [&] {
    const std::int64_t model_values = model_->input_shape().numel();
    for (const auto* set : {&train_, &test_}) {
      if (set->sample_shape.numel() == model_values) continue;
      throw DeckError(deck_.location("model.input_shape") +
                      ": model.input_shape: the model takes " + std::to_string(model_values) +
                      " values per sample, the data's samples have shape " +
                      to_string(set->sample_shape) + " (" +
                      std::to_string(set->sample_shape.numel()) + " values)");
    }
    // A quick trial or a benchmark may train on the head of the file only.
    if (deck_.train_samples > 0 && deck_.train_samples < train_.size())
      train_ = slice(train_, 0, deck_.train_samples);
    if (deck_.test_samples > 0 && deck_.test_samples < test_.size())
      test_ = slice(test_, 0, deck_.test_samples);
    // The validation split is the tail of the training file, before shuffling.
    if (deck_.validation_split > 0) {
      const auto held =
          static_cast<std::int64_t>(std::llround(deck_.validation_split * train_.size()));
      if (held < 1 || held >= train_.size())
        throw DeckError(deck_.location("data.validation_split") +
                        ": data.validation_split: " + number_text(deck_.validation_split) + " of " +
                        std::to_string(train_.size()) + " training samples leaves " +
                        std::to_string(held) + " for validation and " +
                        std::to_string(train_.size() - held) +
                        " for training; both need at least one");
      validation_ = slice(train_, train_.size() - held, held);
      train_ = slice(train_, 0, train_.size() - held);
    }
    if (deck_.streaming && deck_.max_resident_mb > 0) {
      // The largest share of a micro-batch a rank reads, in every buffer.
      const TrainOptions& t = deck_.training;
      const std::int64_t micro = (t.batch_size + t.accumulation_steps - 1) / t.accumulation_steps;
      const std::int64_t share = (micro + comm.size() - 1) / comm.size();
      const std::int64_t bytes = BatchStream::buffer_bytes(train_.features(), share);
      if (bytes > (deck_.max_resident_mb << 20))
        throw DeckError(deck_.location("data.max_resident_mb") +
                        ": data.max_resident_mb: " + std::to_string(deck_.max_resident_mb) +
                        " MiB cannot hold the streaming buffers: " +
                        std::to_string(BatchStream::default_depth) + " batches of " +
                        std::to_string(share) + " samples of " + std::to_string(train_.features()) +
                        " values on each rank take " +
                        std::to_string((bytes + (1 << 20) - 1) >> 20) +
                        " MiB; raise it or lower training.batch_size");
    }
  });
}

std::string Run::data_description() const {
  std::ostringstream os;
  os << "data: " << train_.size() << " training, " << validation_.size() << " validation and "
     << test_.size() << " test samples of shape " << train_.sample_shape << "; " << std::fixed
     << std::setprecision(1) << mib(data_bytes_) << " MiB held in device memory";
  if (deck_.streaming) os << " (streamed: the files are read batch by batch)";
  return os.str();
}

// After a step: a checkpoint when the step cadence or the minutes say so.
void Run::checkpoint_after_step(const StepReport& r) {
  const CheckpointCadence& cadence = deck_.run.checkpoint;
  const bool by_steps = cadence.every_steps > 0 && r.step % cadence.every_steps == 0;
  if (by_steps || minutes_due()) {
    const bool epoch_done = r.step_in_epoch + 1 == steps_per_epoch();
    save(TrainingCursor{epoch_done ? r.epoch + 1 : r.epoch, epoch_done ? 0 : r.step_in_epoch + 1,
                        r.step});
  }
}

void Run::checkpoint_after_epoch(const EpochSummary& summary, bool pausing) {
  // By epochs, at the end of any run that checkpoints at all, and at a
  // pause whatever the cadence; training.max_steps or early stopping may
  // end the run within or before its last epoch.
  const CheckpointCadence& cadence = deck_.run.checkpoint;
  const int epoch = summary.report.epoch;
  const std::int64_t step = trainer_->step(), steps = steps_per_epoch();
  if ((cadence.every_epochs > 0 && (epoch + 1) % cadence.every_epochs == 0) ||
      (cadence.any() && summary.last) || (pausing && summary.last))
    save(steps_done() ? TrainingCursor{static_cast<int>(step / steps), step % steps, step}
                      : TrainingCursor{epoch + 1, 0, step});
}

CallbackList Run::compose(const RunCallbacks& callbacks,
                          const std::function<Evaluation(bool held_out)>& evaluate, bool pausing) {
  const bool root = comm_->rank() == 0;
  CallbackList list;
  // Evaluated every eval_every epochs and after the last (or the step that
  // ends the run): on the validation split when there is one, else on the
  // test set.
  list.add("evaluation", true, {}, [this, evaluate](EpochSummary& e) {
    const int every = deck_.run.eval_every;
    e.evaluated = e.last || (every > 0 && (e.report.epoch + 1) % every == 0);
    if (e.evaluated) e.evaluation = evaluate(true);
  });
  // Replicas must not drift apart (a cheap check, once an epoch).
  list.add("weights check", true, {}, [this](EpochSummary& e) {
    require_same_weights_on_every_rank(
        *trainer_->replica_comm(), model_->parameters().values(),
        "the weights after epoch " + std::to_string(e.report.epoch + 1));
  });
  if (early_stop_)
    list.add("early stopping", false, {}, [this](EpochSummary& e) { early_stop_->on_epoch(e); });
  list.add(
      "metrics", false, [this](const StepReport& r) { record(step_record(r)); },
      [this](EpochSummary& e) {
        record(epoch_record(e));
        if (e.stop)
          record(json{{"type", "stop"}, {"epoch", e.report.epoch + 1}, {"reason", e.stop_reason}}
                     .dump());
      });
  list.add("caller's callbacks", false, callbacks.on_step,
           [root, on_epoch = callbacks.on_epoch](EpochSummary& e) {
             if (root && on_epoch) on_epoch(e);
           });
  list.add(
      "checkpoint", true, [this](const StepReport& r) { checkpoint_after_step(r); },
      [this, pausing](EpochSummary& e) { checkpoint_after_epoch(e, pausing); });
  return list;
}

std::string Run::callbacks() { return compose({}, {}, false).describe(); }

bool Run::steps_done() const {
  const std::int64_t max = deck_.training.max_steps;
  return max > 0 && trainer_->step() >= max;
}

RunResult Run::train(const RunCallbacks& callbacks, int pause_after) {
  TESSERA_REQUIRE(prepared_, "tessera::Run::train: call prepare() first");
  const bool root = comm_->rank() == 0;
  const int epochs = deck_.training.epochs;
  TESSERA_REQUIRE(pause_after >= 0,
                  "tessera::Run::train: pause_after " << pause_after << " must be >= 0");
  const int end = pause_after > 0 && pause_after < epochs ? pause_after : epochs;
  const bool pausing = end < epochs;
  const std::function<void(const std::string&)> log =
      root && callbacks.log ? callbacks.log : std::function<void(const std::string&)>{};
  // Evaluations report their progress to rank 0's callback.
  std::string evaluated_set;
  trainer_->on_evaluation_batch([&](std::int64_t done, std::int64_t total) {
    if (root && callbacks.evaluating) callbacks.evaluating(evaluated_set, done, total);
  });
  const auto evaluate = [&](bool held_out) {
    const bool validation = held_out && validation_.size() > 0;
    evaluated_set = validation ? "validation" : "test";
    return trainer_->evaluate(validation ? validation_ : test_);
  };

  RunResult result;
  result.set = validation_.size() > 0 ? "validation" : "test";
  result.paused = pausing;
  result.epochs = std::max(cursor_.epoch, end);
  // Nothing left to train: the checkpoint went as far already.
  const bool stopped_before = early_stop_ && early_stop_->exhausted();
  if (cursor_.epoch >= end || steps_done() || stopped_before) {
    if (stopped_before) {
      result.stopped = early_stop_->reason();
      result.epochs = cursor_.epoch;
    }
    result.evaluation = evaluate(true);
    if (!pausing) result.test = validation_.size() > 0 ? evaluate(false) : result.evaluation;
    return result;
  }
  const CallbackList list = compose(callbacks, evaluate, pausing);
  trainer_->on_step([&list](const StepReport& r) { list.on_step(r); });
  // The trainer forgets the list when train returns or throws.
  const std::unique_ptr<Trainer, void (*)(Trainer*)> forget(trainer_.get(),
                                                            [](Trainer* t) { t->on_step({}); });
  for (int epoch = cursor_.epoch; epoch < end; ++epoch) {
    EpochSummary summary;
    summary.epochs = epochs;
    summary.set = result.set;
    summary.report =
        trainer_->train_epoch(train_, epoch, log, epoch == cursor_.epoch ? cursor_.batch : 0);
    summary.last = epoch + 1 == end || steps_done();
    list.on_epoch(summary);
    if (summary.evaluated) result.evaluation = summary.evaluation;
    if (summary.evaluated && summary.set == "test" && !pausing) result.test = summary.evaluation;
    if (summary.stop) {
      result.stopped = summary.stop_reason;
      result.epochs = epoch + 1;
    }
    if (summary.last) break;
  }
  // The test set is held back until the end when a validation split is used.
  if (validation_.size() > 0 && !pausing) {
    result.test = evaluate(false);
    record(json{
        {"type", "test"}, {"test_loss", result.test.loss}, {"test_accuracy", result.test.accuracy}}
               .dump());
  }
  return result;
}

// A step's metrics record.
std::string Run::step_record(const StepReport& r) const {
  json line{{"type", "step"},
            {"step", r.step},
            {"epoch", r.epoch + 1},
            {"loss", r.loss},
            {"lr", r.lr},
            // JSON has no infinity: a skipped step's norm is null.
            {"grad_norm", r.grad_norm}};
  if (deck_.training.loss_scaling.dynamic) {
    line["loss_scale"] = r.loss_scale;
    line["skipped"] = r.skipped;
  }
  return line.dump();
}

// An epoch's metrics record: losses, accuracies, times, memory.
std::string Run::epoch_record(const EpochSummary& summary) const {
  const EpochReport& r = summary.report;
  const PhaseTimes& t = r.time;
  json line{{"type", "epoch"},
            {"epoch", r.epoch + 1},
            {"train_loss", r.train.loss},
            {"train_accuracy", r.train.accuracy},
            {"lr", r.lr},
            {"seconds", r.seconds},
            {"samples_per_second", r.samples_per_second},
            {"time",
             {{"data", t.data},
              {"forward", t.forward},
              {"backward", t.backward},
              {"optimizer", t.optimizer},
              {"communication", t.communication},
              {"communication_overlapped", r.overlapped_seconds}}},
            {"overlap_fraction", r.overlap_fraction},
            {"peak_resident_mb", peak_resident_mib()}};
  if (pipeline_) {
    line["time"]["pipeline_wait"] = r.pipeline_wait_seconds;
    line["pipeline_bubble"] = r.bubble_fraction;
  }
  if (deck_.training.loss_scaling.dynamic) {
    line["skipped_steps"] = r.skipped_steps;
    line["loss_scale"] = trainer_->loss_scale().scale;
  }
  if (summary.evaluated) {
    line[summary.set + "_loss"] = summary.evaluation.loss;
    line[summary.set + "_accuracy"] = summary.evaluation.accuracy;
  }
  return line.dump();
}

std::string epoch_line(const EpochSummary& e, int ranks) {
  const EpochReport& r = e.report;
  const PhaseTimes& t = r.time;
  std::ostringstream os;
  os << std::fixed << std::setprecision(4) << "epoch " << r.epoch + 1 << "/" << e.epochs
     << ": train loss " << r.train.loss << ", train accuracy " << r.train.accuracy;
  if (e.evaluated)
    os << ", " << e.set << " loss " << e.evaluation.loss << ", " << e.set << " accuracy "
       << e.evaluation.accuracy;
  os << ", lr " << std::defaultfloat << std::setprecision(4) << r.lr << std::fixed << ", "
     << std::setprecision(1) << r.seconds << " s, " << std::setprecision(0) << r.samples_per_second
     << " samples/s" << std::setprecision(2) << " (data " << t.data << " s, forward " << t.forward
     << " s, backward " << t.backward << " s, optimizer " << t.optimizer << " s";
  if (ranks > 1)
    os << ", communication " << t.communication << " s exposed + " << r.overlapped_seconds
       << " s overlapped (" << std::setprecision(0) << 100 * r.overlap_fraction << "%)";
  if (r.bubble_fraction > 0)
    os << ", pipeline bubble " << std::setprecision(0) << 100 * r.bubble_fraction << "%";
  os << ")";
  if (e.stop) os << "\n" << e.stop_reason;
  return os.str();
}

}  // namespace tessera
