// A whole training run from a deck, as tessera-train performs it, on every
// rank of a communicator: the model, the data (with a validation split),
// the optimizer, the epoch loop with its evaluation, checkpoint and metrics
// cadence, restarts, and the checks that keep every rank's replica the same.
//
// Each stage that can fail on one rank alone ends in a collective verdict:
// every rank throws the same CollectiveError carrying the first failing
// rank's message, so no rank is left waiting. Errors raised by one rank
// during training (the other ranks wait in a collective) propagate as they
// are; the caller ends the job (Communicator::abort).
//
// Rank 0 alone writes metrics (<run.output_dir>/metrics.jsonl, one JSON
// object per line) and checkpoints. The Run prints nothing: the strings and
// callbacks below give the caller what to show.
#pragma once

#include <tessera/data/dataset.hpp>
#include <tessera/deck/deck.hpp>
#include <tessera/io/checkpoint.hpp>
#include <tessera/parallel/communicator.hpp>
#include <tessera/train/callbacks.hpp>
#include <tessera/train/trainer.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace tessera {

struct RunResult {
  Evaluation test;  // on the test set, after the deck's last epoch (not when paused)
  // The last evaluation, after the last epoch trained: on the validation
  // split when there is one, else on the test set.
  Evaluation evaluation;
  std::string set;      // "validation" or "test"
  int epochs = 0;       // epochs of the run done, counting those before a restart
  bool paused = false;  // stopped before the deck's last epoch (train's pause_after)
  // Why the run ended before the deck's last epoch (early stopping); empty
  // when it did not.
  std::string stopped;
};

// The files of the deck's training set (training) or test set, in the
// order its format's reader takes them.
std::vector<std::string> data_set_files(const Deck& deck, bool training);
// The deck's training or test set, read whole (a stream with
// data.streaming) by its format's reader, as a run reads it; the samples
// are normalised, not yet cut to data.train_samples or test_samples.
Dataset read_data_set(const Deck& deck, bool training);

// Datasets read once and shared by the runs of one process that read the
// same files the same way (the trials of a sweep): a run holds its data
// only by reference-counted views, and never writes to it.
class DatasetCache {
 public:
  // The dataset stored under `key`, loaded with `load` the first time.
  Dataset get(const std::string& key, const std::function<Dataset()>& load);
  std::size_t size() const { return entries_.size(); }

 private:
  std::map<std::string, Dataset> entries_;
};

// Hooks into a run; each may be empty.
struct RunCallbacks {
  // Every rank, before it reads its data files; an exception here fails the
  // data stage like an unreadable file (tests make one rank fail).
  std::function<void(int rank)> before_data;
  // Every rank, after every optimizer step.
  std::function<void(const StepReport&)> on_step;
  // Rank 0, after every epoch (and its evaluation).
  std::function<void(const EpochSummary&)> on_epoch;
  // Rank 0: a progress line every training.log_every steps.
  std::function<void(const std::string&)> log;
  // Rank 0, after every batch of an evaluation: the set ("validation" or
  // "test"), the samples evaluated so far and the set's size.
  std::function<void(const std::string& set, std::int64_t done, std::int64_t total)> evaluating;
};

// What a new run (no restart) does when its output folder holds an earlier
// run's metrics.jsonl or checkpoints: refuses to start (the message names
// the folder and the choices), or removes those files once the run is known
// to be valid, before it writes anything.
enum class EarlierRun { refuse, replace };

class Run {
 public:
  // Builds the model the deck describes and compiles it for this rank's
  // share of a micro-batch (TrainOptions::max_shard), and checks that every
  // rank runs the same deck and --set options. Throws CollectiveError on
  // every rank: a shape the model cannot take is reported at its layer's
  // file:line:column.
  explicit Run(Deck deck, MPI_Comm comm = MPI_COMM_WORLD);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const Deck& deck() const { return deck_; }
  Model& model() { return *model_; }
  const Communicator& comm() const { return *comm_; }

  // The model table, the optimizer and schedule, and the data-parallel
  // setting: what a run states before it starts.
  std::string description() const;
  // Every layer with its options as the deck resolved them, one a line.
  std::string layer_options() const;

  // The device memory this rank's run holds for training, by part. The
  // optimizer state is what the deck's optimizer keeps for this rank's
  // parameters (its slice with ZeRO-1, its stage's in a pipeline); the
  // activations are held once per micro-batch a pipeline stage keeps in
  // flight. The data sets and the 16-bit products' float scratch (which
  // grows during the first step) are not included.
  struct Memory {
    std::int64_t parameters = 0, gradients = 0, state = 0, optimizer = 0;
    ActivationMemory activations;  // of one copy of the workspace
    std::int64_t copies = 1;       // workspaces: 1, or a stage's micro-batches in flight
    std::int64_t total(BufferPlan plan) const {
      return parameters + gradients + state + optimizer + copies * activations.total(plan);
    }
    std::int64_t total() const { return total(activations.plan); }
    std::int64_t total_blocks() const {
      return parameters + gradients + state + optimizer + copies * activations.total_blocks();
    }
  };
  Memory memory() const;
  // memory() as a line of MiB, with the totals under the other buffer plan
  // and with recompute = "blocks"; of `m`, computed already.
  std::string memory_description() const;
  std::string memory_description(const Memory& m) const;

  // Reads the data files (the training file split into training and
  // validation when data.validation_split is set), makes every rank's
  // weights rank 0's, and with `restart` not empty resumes from the
  // checkpoint it names: a file, a directory (its latest), or "latest" in
  // the deck's checkpoint directory. A new run's output folder must not hold
  // an earlier run (see EarlierRun). Only when all of that holds does it
  // create the output folder and open the metrics file: a run that fails
  // here writes nothing. Throws CollectiveError on every rank for a bad
  // data file, output directory or checkpoint; a data failure's message
  // starts with "data error: ". With a cache, data files read before by
  // this process are not read again.
  void prepare(const std::string& restart = "", const RunCallbacks& callbacks = {},
               DatasetCache* cache = nullptr, EarlierRun earlier = EarlierRun::refuse);

  // "data: 60000 training, 0 validation and 10000 test samples of shape
  // [784]; 209.6 MiB held in device memory"
  std::string data_description() const;
  std::string metrics_path() const;
  // Where a restart resumed ("resuming from <file>: epoch 2, step 0 of 235,
  // 235 optimizer steps taken"), with a second line "note: ..." when the
  // deck's schedule is not the checkpoint's and the learning rate jumps;
  // empty without a restart.
  const std::string& resumed_from() const { return resumed_; }
  // How prepare() chose the layers' kernels, on rank 0: "kernels: conv2d =
  // \"measured\" (...): stem threads, s1b1_conv1 winograd, ...", with a
  // second line "note: ..." where one is due; empty for a model without a
  // kernel choice.
  const std::string& kernels() const { return kernels_; }

  // Trains the epochs the deck has left, evaluating, checkpointing and
  // recording metrics as it asks, and evaluates the test set at the end.
  // Evaluation, the weights check, early stopping, metrics, the caller's
  // callbacks and checkpoints run as a CallbackList (train/callbacks.hpp),
  // in that order on every rank (callbacks() describes it). A run that early
  // stopping ended stays ended: a restart from its checkpoints trains no
  // further.
  // With pause_after between the first epoch and the deck's last, it stops
  // after that many epochs of the run instead: evaluates, commits a
  // checkpoint whatever the deck's cadence, and leaves the test set alone,
  // so that prepare("latest") later continues exactly as if it had never
  // stopped (the schedule still spans the deck's training.epochs).
  RunResult train(const RunCallbacks& callbacks = {}, int pause_after = 0);

  std::int64_t steps_per_epoch() const;
  // "evaluation (collective), weights check (collective), ...": the run's
  // callbacks in the order they run.
  std::string callbacks();
  const Dataset& training_data() const { return train_; }
  // The epoch training resumes in (0 without a restart); the deck's epoch
  // count or more when a checkpoint has finished them all.
  int first_epoch() const { return cursor_.epoch; }

 private:
  // What a restart resumed from, for the metrics' restart record.
  struct Restart {
    bool requested = false;
    std::string from;  // the checkpoint file
    // The checkpoint's schedule where the deck's differs (empty otherwise),
    // and the learning rates of its last step and of the next.
    std::string other_schedule;
    float lr_before = 0, lr_after = 0;
  };
  void load_data(const RunCallbacks& callbacks, DatasetCache* cache);
  void shape_data();
  std::vector<std::string> earlier_run(EarlierRun policy) const;
  Restart resume(const std::string& restart);
  // Rank 0 chooses every layer's kernel option by the deck, keeping those of
  // `kept` (a restart's checkpoint's) that run here; every rank and replica
  // then runs the table.
  void choose_layer_kernels(const KernelTable& kept, bool restart);
  void open_outputs(const std::vector<std::string>& earlier, const Restart& resumed);
  // The schedule as a checkpoint records it: type, lr, warmup, steps per
  // epoch and epochs.
  std::string schedule_text() const;
  void record(const std::string& json_line);
  std::string step_record(const StepReport& r) const;
  std::string epoch_record(const EpochSummary& summary) const;
  void save(const TrainingCursor& at);
  bool minutes_due();
  // The run's callbacks in order; `evaluate` evaluates on the validation
  // split (or the test set) and says which.
  CallbackList compose(const RunCallbacks& callbacks,
                       const std::function<Evaluation(bool held_out)>& evaluate, bool pausing);
  // The checkpoint callback: by steps or minutes after a step, by the
  // cadence after an epoch.
  void checkpoint_after_step(const StepReport& r);
  void checkpoint_after_epoch(const EpochSummary& summary, bool pausing);
  // Early stopping's state as the run's recorded evaluations make it (a
  // restart: rank 0 reads them from the checkpoint's metrics history).
  void replay_evaluations();
  // Whether the run has taken training.max_steps optimizer steps.
  bool steps_done() const;

  Deck deck_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Model> model_;
  // parallel.pipeline_stages > 1: this rank's stage, and replicas of the
  // model for the micro-batches it holds at once.
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<std::unique_ptr<Model>> replicas_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<EarlyStopping> early_stop_;  // training.early_stop_patience > 0
  Dataset train_, validation_, test_;
  // Device memory the data sets take as read, before any cut or split
  // (which are views of them): data_description().
  std::int64_t data_bytes_ = 0;
  struct Outputs;
  std::unique_ptr<Outputs> outputs_;  // metrics file, history, checkpoint directory and clock
  TrainingCursor cursor_;
  std::string resumed_;
  std::string kernels_;
  bool prepared_ = false;
};

// "epoch 3/10: train loss 0.3123, ..., 4.1 s, 14612 samples/s (data ..., forward ...)"
std::string epoch_line(const EpochSummary& epoch, int ranks);

}  // namespace tessera
