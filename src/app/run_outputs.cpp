// tessera::Run's outputs and restarts: the output folder that holds one
// run, the metrics file written only once a run is valid, checkpoints on
// their cadence, and resuming from one.
#include <tessera/app/run.hpp>
#include <tessera/core/machine.hpp>
#include <tessera/model/kernels.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iomanip>
#include <sstream>

#include "run_state.hpp"

namespace tessera {

using impl::agree;
using json = nlohmann::json;

namespace {
// {"stem": "threads", ...}: the layers' kernel options for the run record.
json kernels_json(const KernelTable& table) {
  json kernels = json::object();
  for (const auto& [layer, option] : table) kernels[layer] = option;
  return kernels;
}
}  // namespace

// The files of an earlier run in this run's output folder: its metrics and
// its checkpoints. A new run refuses them, or with EarlierRun::replace
// returns them to be removed once the run is known to be valid.
std::vector<std::string> Run::earlier_run(EarlierRun policy) const {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  const std::string& metrics = outputs_->metrics_path;
  if (fs::exists(metrics, ec) && fs::file_size(metrics, ec) > 0) files.push_back(metrics);
  const CheckpointDirectory& directory = *outputs_->checkpoints;
  const std::vector<std::string> checkpoints = directory.checkpoints();
  files.insert(files.end(), checkpoints.begin(), checkpoints.end());
  if (directory.has_latest()) files.push_back(directory.directory() + "/latest");
  if (files.empty() || policy == EarlierRun::replace) return files;
  std::ostringstream os;
  os << "tessera::Run: " << deck_.run.output_dir << " holds an earlier run (";
  if (files.front() == metrics) os << metrics << (checkpoints.empty() ? "" : ", ");
  if (!checkpoints.empty())
    os << checkpoints.size() << " checkpoint(s) in " << directory.directory() << ", the newest "
       << fs::path(checkpoints.back()).filename().string();
  os << "); a new run does not mix with it: continue it with --restart latest, write "
        "elsewhere with --set run.output_dir=DIR, or replace it with --overwrite";
  throw DeckError(os.str());
}

void Run::choose_layer_kernels(const KernelTable& kept, bool restart) {
  const Communicator& comm = *comm_;
  std::string table;
  agree(comm, [&] {
    if (comm.rank() != 0) return;
    const KernelChoice choice =
        choose_kernels(*model_, deck_.kernels, model_->execution_space(), kept);
    table = kernel_table_text(choice.table);
    kernels_ = kernel_description(deck_.kernels, choice);
    if (restart && kept.empty() && !choice.table.empty())
      kernels_ +=
          "\nnote: the checkpoint records no kernel options (an earlier Tessera wrote it): chosen "
          "as for a new run";
  });
  comm.broadcast(table);
  agree(comm, [&] {
    const KernelTable chosen = kernel_table_from_text(table);
    model_->set_kernels(chosen);
    for (const auto& replica : replicas_) replica->set_kernels(chosen);
  });
}

// Resume: every rank loads the same file, so the replicas stay equal.
Run::Restart Run::resume(const std::string& restart) {
  const Communicator& comm = *comm_;
  Outputs& out = *outputs_;
  const bool root = comm.rank() == 0;
  Restart resumed;
  resumed.requested = true;
  std::string& from = resumed.from;
  std::string saved_schedule;
  KernelTable saved_kernels;
  agree(comm, [&] {
    from = restart == "latest" ? out.checkpoints->resolve("latest") : resolve_checkpoint(restart);
    const CheckpointInfo saved = read_checkpoint_info(from);
    const auto mismatch = [&](const std::string& what, const std::string& then,
                              const std::string& now) {
      if (then != now)
        throw Error(
            from + ": written with " + what + " " + then + ", the deck has " + now +
            "; an exact restart needs the same (tessera-inspect shows the checkpoint's deck)");
    };
    mismatch("training.batch_size", std::to_string(saved.global_batch),
             std::to_string(deck_.training.batch_size));
    mismatch("run.seed", std::to_string(saved.seed), std::to_string(deck_.training.seed));
    if (OptimizerSharding* sharding = trainer_->sharding()) {
      // The file holds the whole state: each rank keeps its shard of it,
      // whatever the rank count that wrote it.
      const auto whole = make_optimizer(deck_.optimizer);
      load_checkpoint(from, *model_, *whole);
      sharding->take_state(*whole, model_->parameters());
    } else {
      load_checkpoint(from, *model_, *optimizer_);
    }
    // A checkpoint of a run without dynamic loss scaling leaves the
    // deck's initial scale.
    if (saved.has_loss_scale && deck_.training.loss_scaling.dynamic)
      trainer_->set_loss_scale(LossScaleState{saved.loss_scale, saved.loss_scale_good_steps});
    cursor_ = saved.cursor;
    saved_schedule = saved.schedule;
    saved_kernels = saved.kernels;
    resumed.lr_before = saved.lr;
    if (root) out.history = saved.metrics;
  });
  // The checkpoint's kernels again, for the bits of a run never interrupted.
  choose_layer_kernels(saved_kernels, true);
  replay_evaluations();
  require_same_weights_on_every_rank(comm, model_->parameters().values(),
                                     "the weights loaded with --restart",
                                     "give every rank the same --restart");
  trainer_->set_step(cursor_.step);
  std::ostringstream os;
  os << "resuming from " << from << ": epoch " << cursor_.epoch + 1 << ", step " << cursor_.batch
     << " of " << steps_per_epoch() << " in it, " << cursor_.step << " optimizer steps taken";
  // A restart with other epochs (or samples, or schedule settings)
  // moves the schedule under the run: the learning rate jumps. Said, and
  // recorded, never silent.
  if (!saved_schedule.empty() && saved_schedule != schedule_text()) {
    const std::int64_t steps = steps_per_epoch();
    resumed.other_schedule = saved_schedule;
    resumed.lr_after =
        deck_.training.schedule.lr(cursor_.step, steps, deck_.training.total_steps(steps));
    os << std::setprecision(4) << "\nnote: the deck's schedule (" << schedule_text()
       << ") is not the checkpoint's (" << saved_schedule << "): the learning rate goes from "
       << resumed.lr_before << " at the checkpoint's last step to " << resumed.lr_after
       << " at step " << cursor_.step + 1
       << " (the schedule spans training.epochs; restart with the checkpoint's settings to "
          "continue it unchanged)";
  }
  if (early_stop_ && early_stop_->exhausted())
    os << "\nnote: the run had ended: " << early_stop_->reason() << "; it trains no further";
  resumed_ = os.str();
  return resumed;
}

// The run is valid: only now is anything written. Rank 0 removes an earlier
// run's files it was told to replace, creates the output folder and opens
// the metrics file; a restart into a new folder starts that file with the
// history the checkpoint carries.
void Run::open_outputs(const std::vector<std::string>& earlier, const Restart& resumed) {
  const Communicator& comm = *comm_;
  Outputs& out = *outputs_;
  const bool root = comm.rank() == 0;
  agree(comm, [&] {
    if (!root) return;
    for (const std::string& file : earlier) std::filesystem::remove(file);
    std::error_code made;
    std::filesystem::create_directories(deck_.run.output_dir, made);
    const bool fresh = !std::filesystem::exists(out.metrics_path) ||
                       std::filesystem::file_size(out.metrics_path) == 0;
    if (!made) out.metrics.open(out.metrics_path, std::ios::app);
    if (made || !out.metrics)
      throw DeckError("tessera::Run: cannot write metrics to " + out.metrics_path + ": " +
                      (made ? made.message() : std::string("cannot open the file")) +
                      " (set run.output_dir to a writable directory)");
    if (fresh && !out.history.empty()) out.metrics << out.history << std::flush;
  });
  record(json{{"type", "run"},
              {"deck", deck_.path},
              {"overrides", deck_.overrides},
              {"build", build_description()},
              {"ranks", comm.size()},
              {"epochs", deck_.training.epochs},
              {"batch_size", deck_.training.batch_size},
              {"accumulation_steps", deck_.training.accumulation_steps},
              {"seed", deck_.training.seed},
              {"kernels", kernels_json(model_->kernels())}}
             .dump());
  if (resumed.requested) {
    json line{{"type", "restart"},
              {"from", resumed.from},
              {"step", cursor_.step},
              {"epoch", cursor_.epoch},
              {"ranks", comm.size()}};
    if (!resumed.other_schedule.empty())
      line["schedule_changed"] = {{"from", resumed.other_schedule},
                                  {"to", schedule_text()},
                                  {"lr_before", resumed.lr_before},
                                  {"lr_after", resumed.lr_after}};
    record(line.dump());
  }
}

std::string Run::schedule_text() const {
  const LrSchedule& s = deck_.training.schedule;
  std::ostringstream os;
  os << "type=" << schedule_name(s.type) << " lr=" << s.base_lr
     << " warmup_steps=" << s.warmup_steps << " steps_per_epoch=" << steps_per_epoch()
     << " epochs=" << deck_.training.epochs;
  return os.str();
}

std::string Run::metrics_path() const { return outputs_->metrics_path; }

void Run::record(const std::string& json_line) {
  Outputs& out = *outputs_;
  if (!out.metrics.is_open()) return;
  out.metrics << json_line << "\n";
  out.metrics.flush();
  out.history += json_line + "\n";
}

// After a barrier, rank 0 writes (parameters are replicated); every rank
// learns whether it worked.
void Run::save(const TrainingCursor& at) {
  Outputs& out = *outputs_;
  if (at.step == out.last_checkpoint) return;
  const Communicator& comm = *comm_;
  // A sharded optimizer's parameters may still be on their way.
  trainer_->settle_parameters();
  comm.barrier();
  // Sharded optimizer state is gathered whole on rank 0 for the file, and
  // a pipeline's stages' weights too.
  std::unique_ptr<Optimizer> whole;
  if (const OptimizerSharding* sharding = trainer_->sharding()) {
    if (sharding->root()) whole = make_optimizer(deck_.optimizer);
    sharding->gather_state(whole.get(), model_->parameters());
  }
  trainer_->gather_model();
  std::string written;
  try {
    agree(comm, [&] {
      if (comm.rank() != 0) return;
      CheckpointInfo info;
      info.deck_path = deck_.path;
      info.deck_text = deck_.text;
      info.deck_overrides = deck_.overrides;
      info.seed = deck_.training.seed;
      info.cursor = at;
      info.world_size = comm.size();
      info.global_batch = deck_.training.batch_size;
      info.lr = trainer_->lr();
      info.schedule = schedule_text();
      info.metrics = out.history;
      if (deck_.training.loss_scaling.dynamic) {
        info.has_loss_scale = true;
        info.loss_scale = trainer_->loss_scale().scale;
        info.loss_scale_good_steps = trainer_->loss_scale().good_steps;
      }
      written = out.checkpoints->commit(*model_, whole ? *whole : *optimizer_, info);
    });
  } catch (const CollectiveError& e) {
    throw CollectiveError(std::string("cannot write a checkpoint: ") + e.what() +
                          "; the previous checkpoints are untouched");
  }
  out.last_checkpoint = at.step;
  out.last_checkpoint_time = std::chrono::steady_clock::now();
  record(json{{"type", "checkpoint"}, {"path", written}, {"step", at.step}}.dump());
}

// Rank 0 reads the epoch records' evaluation losses from the checkpoint's
// metrics history and every rank observes them in order.
void Run::replay_evaluations() {
  if (!early_stop_) return;
  const std::string key = std::string(validation_.size() > 0 ? "validation" : "test") + "_loss";
  std::string evaluations;  // "epoch loss" lines from rank 0's history
  if (comm_->rank() == 0) {
    std::istringstream lines(outputs_->history);
    std::ostringstream os;
    os << std::setprecision(17);
    for (std::string line; std::getline(lines, line);) {
      const json r = json::parse(line, nullptr, false);
      if (r.is_object() && r.value("type", "") == "epoch" && r.contains(key))
        os << r["epoch"].get<int>() << " " << r[key].get<double>() << "\n";
    }
    evaluations = os.str();
  }
  comm_->broadcast(evaluations);
  std::istringstream in(evaluations);
  int epoch = 0;
  double loss = 0;
  while (in >> epoch >> loss) early_stop_->observe(loss, epoch - 1);
}

// Wall-clock checkpoints: rank 0's clock decides for every rank.
bool Run::minutes_due() {
  const float minutes = deck_.run.checkpoint.every_minutes;
  if (minutes <= 0) return false;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                       outputs_->last_checkpoint_time)
                             .count();
  int due = elapsed >= 60.0 * minutes;
  comm_->broadcast(due);
  return due != 0;
}

}  // namespace tessera
