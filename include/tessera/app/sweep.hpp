// Hyperparameter sweeps from a deck and a sweep file (deck/sweep.hpp): the
// trials of a grid, of seeded random draws or of successive halving, run
// concurrently on groups of ranks_per_trial MPI ranks, each trial a
// tessera::Run with its own output directory, metrics and checkpoints.
//
// Scheduling is static: the j-th trial of a rung runs on group j mod G.
// A trial's arithmetic depends only on its deck and its rank count, never
// on the group that runs it or on timing, so the results are the same
// whatever the number of groups; successive halving is synchronous (every
// trial of a rung finishes before the next rung is chosen), because the
// asynchronous promotions of ASHA depend on which trial finishes first.
//
// World rank 0 alone writes the sweep directory's files: the log
// (sweep.jsonl, one JSON object per line: the sweep's starts, each trial's
// start and outcome, each rung's promotions) and the results. Group leaders
// send their records to it as they happen. A sweep started again with the
// same deck and sweep file reads the log, keeps every outcome in it, and
// runs only what is missing; a trial that was cut short resumes from the
// latest checkpoint in its directory. A trial that fails on every rank of
// its group (a non-finite loss, a deck value or shape the model refuses) is
// recorded as failed and the sweep goes on.
#pragma once

#include <tessera/app/run.hpp>
#include <tessera/deck/sweep.hpp>

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

// One assignment of the swept parameters.
struct Trial {
  int index = 0;
  std::vector<SweepValue> values;  // one per parameter, in the sweep file's order
};

// The trials of a grid (every combination, the first parameter changing
// slowest; successive halving without sweep.trials) or of sweep.trials
// draws from counter-based random numbers of (seed, parameter, trial).
std::vector<Trial> plan_trials(const SweepSpec& spec);

// "optimizer.lr=0.01", one per parameter: what a trial adds to the deck.
std::vector<std::string> trial_overrides(const SweepSpec& spec, const Trial& trial);

// A rung: the trials it trains, and to how many epochs of their run.
struct Rung {
  int epochs = 0;
  int trials = 0;
};
// Grid and random: one rung of every trial at the deck's epochs. Successive
// halving: min_epochs * reduction^k epochs while below the deck's epochs,
// then the deck's epochs; each rung keeps the best 1 / reduction of the
// trials before it (at least one).
std::vector<Rung> sweep_rungs(const SweepSpec& spec, int trials);

// Where a trial stands after one job.
enum class TrialState {
  paused,    // trained to an intermediate rung's epochs
  finished,  // trained to the deck's epochs
  failed
};
inline constexpr EnumNames<TrialState, 3> trial_states{"trial state",
                                                       {{TrialState::paused, "paused"},
                                                        {TrialState::finished, "finished"},
                                                        {TrialState::failed, "failed"}}};
inline const char* state_name(TrialState s) { return trial_states.name(s); }

struct TrialOutcome {
  int trial = 0;
  int rung = 0;
  TrialState state = TrialState::failed;
  int epochs = 0;         // epochs of its run done
  Evaluation validation;  // after its last epoch
  Evaluation test;        // finished trials only
  std::string error;      // failed trials
  double seconds = 0;     // the job's wall time (the log has it; tables do not)
};

// The spec's objective of an outcome (validation accuracy or loss).
double objective(const SweepSpec& spec, const TrialOutcome& outcome);
// Whether `a` ranks before `b`: outcomes that did not fail first, then
// those that went further (more epochs), then the better objective, then
// the lower trial number, so a ranking never depends on timing.
bool ranks_before(const SweepSpec& spec, const TrialOutcome& a, const TrialOutcome& b);
// The trials a rung promotes: the best `keep` that did not fail.
std::vector<int> promote(const SweepSpec& spec, std::vector<TrialOutcome> rung, int keep);
// Every trial's furthest outcome, ranked.
std::vector<TrialOutcome> standings(const SweepSpec& spec, const std::vector<TrialOutcome>& all);
// Epochs the sweep trained: the furthest epoch of every trial (a resumed
// trial continues its run rather than starting again).
int epochs_trained(const std::vector<TrialOutcome>& all);

// The results tables (markdown, CSV): the standings with each trial's
// values; no timings, so a resumed sweep's tables equal an uninterrupted
// one's. `all` gives the epochs trained.
std::string results_markdown(const SweepSpec& spec, const std::vector<Trial>& trials,
                             const std::vector<TrialOutcome>& all);
std::string results_csv(const SweepSpec& spec, const std::vector<Trial>& trials,
                        const std::vector<TrialOutcome>& all);

// The directory of a trial, relative to the sweep's: "trials/t007".
std::string trial_directory(int trial, int trials);

// The log. Identity: a hash of the deck (text and overrides) and the sweep
// file's text; a log of another sweep is never appended to.
std::string sweep_identity(const Deck& deck, const SweepSpec& spec);
std::string outcome_record(const SweepSpec& spec, const TrialOutcome& outcome);
struct SweepLog {
  std::vector<TrialOutcome> outcomes;  // in the order they were logged
  int starts = 0;                      // sweep records: how often the sweep was started
  std::size_t complete = 0;            // bytes of whole lines; a torn last line is left out
};
// Reads a log's text; throws Error naming path:line for a line that is not
// a record (but the last, which a kill may have cut short) or a sweep
// record of another identity.
SweepLog read_sweep_log(const std::string& text, const std::string& path,
                        const std::string& identity);

// The tessera-train command line that trains `trial` alone, as the sweep
// trained it (the deck's --set options, the sweep's `set`, the trial's values),
// into `output_dir` (its run.output_dir, and its checkpoint.directory's parent)
// rather than into the deck's own folder.
std::string reproduce_command(const Deck& deck, const SweepSpec& spec, const Trial& trial,
                              const std::string& output_dir);

struct SweepCallbacks {
  // World rank 0: a line per trial outcome and per rung.
  std::function<void(const std::string&)> log;
};

struct SweepSummary {
  std::vector<Trial> trials;
  std::vector<TrialOutcome> outcomes;  // every job's, logged earlier or now
  std::vector<TrialOutcome> ranked;    // standings
  int jobs_run = 0;                    // jobs this run of the sweep trained
  int epochs_trained = 0;
  int epochs_full = 0;  // every trial trained to the deck's epochs
};

class Sweep {
 public:
  // Splits `world` into groups of spec.ranks_per_trial consecutive ranks
  // and checks that every rank has the same deck and sweep file; throws
  // CollectiveError on every rank (ranks_per_trial at its file:line:column
  // when it does not divide the world).
  Sweep(SweepSpec spec, Deck deck, MPI_Comm world = MPI_COMM_WORLD);
  ~Sweep();
  Sweep(const Sweep&) = delete;
  Sweep& operator=(const Sweep&) = delete;

  int groups() const { return groups_; }
  const std::vector<Trial>& trials() const { return trials_; }
  const std::string& output_dir() const { return spec_.output_dir; }

  // Creates the sweep directory and reads its log when there is one (the
  // sweep resumes). Throws CollectiveError on every rank for a directory
  // that cannot be written or a log of another sweep.
  void prepare();
  // "resuming the sweep in <dir> (started 1 time before): 5 trial outcomes
  // logged, 4 finished, 1 failed"; empty for a new sweep.
  const std::string& resumed_from() const { return resumed_; }

  // Runs every job the log lacks, rung by rung, and (world rank 0) writes
  // results.md and results.csv. A failure outside a trial on world rank 0
  // (the log cannot be written) throws CollectiveError on every rank; one
  // inside a trial on one rank of a group of several ends the job.
  SweepSummary run(const SweepCallbacks& callbacks = {});

 private:
  struct Messenger;
  // The steps of prepare().
  void lock_output_dir();
  std::string open_log();
  void post_sweep_record(bool resumed);
  // One trial's job at a rung, on this rank's group.
  TrialOutcome run_job(const Trial& trial, int rung, int epochs, bool last);
  void post_trial_start(const Trial& trial, int rung, int epochs, bool resume);
  Deck checked_trial_deck(const std::vector<std::string>& overrides) const;
  void train_trial(const std::string& dir, const std::vector<std::string>& overrides, bool resume,
                   int epochs, TrialOutcome& outcome, int& epochs_done);
  // The steps of run().
  void log_outcomes(const std::function<void(const std::string&)>& log);
  void run_rung(const std::vector<int>& jobs, int rung, int epochs, bool last, int& expected);
  std::vector<TrialOutcome> gather_rung_outcomes(int expected);
  std::vector<int> promote_rung(const std::vector<TrialOutcome>& outcomes, int rung,
                                const Rung& now, const Rung& next, bool ran,
                                const SweepCallbacks& callbacks);
  void publish_results(const SweepSummary& summary);

  SweepSpec spec_;
  Deck deck_;
  std::vector<Trial> trials_;
  std::string identity_;
  std::unique_ptr<Communicator> world_;  // a duplicate: the sweep's own messages
  std::unique_ptr<Communicator> group_;  // this rank's trial group
  int rank_ = 0, ranks_ = 1, group_index_ = 0, groups_ = 1;
  std::unique_ptr<Messenger> messenger_;
  DatasetCache data_;  // a group reads each data file once for all its trials
  std::vector<TrialOutcome> logged_;
  std::string resumed_;
  bool prepared_ = false;
};

}  // namespace tessera
