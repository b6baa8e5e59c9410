// Running a sweep: trial groups on sub-communicators, rungs in step, and
// world rank 0 as the one writer of the sweep directory. Group leaders post
// their records to rank 0 with non-blocking sends, and rank 0 takes them in
// between its own training steps, so no group waits for another before the
// end of a rung.
#include <tessera/app/sweep.hpp>
#include <tessera/core/profiling.hpp>
#include <tessera/core/runtime.hpp>
#include <tessera/data/dataset.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <sstream>

#include "../io/checkpoint_file.hpp"

namespace tessera {

using json = nlohmann::json;

namespace {

constexpr int record_tag = 16;

// The results go through the checkpoints' atomic publication (temporary
// file, fsync, rename): a kill leaves the previous version whole.
void replace_file(const std::string& path, const std::string& text) {
  impl::publish_atomically(path, "tessera::Sweep", [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error("tessera::Sweep: cannot write " + temporary);
  });
}

std::string shell_word(const std::string& word) {
  if (word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "_-+=.,/:@%") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The --set options that put a run's output, its checkpoints included,
// into `dir` whatever the deck says (a trial's folder, the best trial's).
std::vector<std::string> output_overrides(const std::string& dir) {
  return {"run.output_dir=" + dir, "checkpoint.directory=" + dir + "/checkpoints"};
}

// "resuming the sweep in <dir> (started 1 time before): 5 trial outcomes
// logged, 4 finished, 1 failed", for a log of earlier starts.
std::string resuming_line(const std::string& dir, const SweepLog& log) {
  int finished = 0, failed = 0;
  for (const auto& o : log.outcomes) {
    finished += o.state == TrialState::finished;
    failed += o.state == TrialState::failed;
  }
  std::ostringstream os;
  os << "resuming the sweep in " << dir << " (started " << log.starts
     << (log.starts > 1 ? " times" : " time") << " before): " << log.outcomes.size()
     << " trial outcomes logged, " << finished << " finished, " << failed << " failed";
  return os.str();
}

// Opens a trial's train.log in `dir` for appending, and writes the build
// and the run's description (and where it resumed from) into it.
void open_trial_log(std::ofstream& log, const std::string& dir, const Run& run) {
  log.open(dir + "/train.log", std::ios::app);
  log << build_description() << "\n" << run.description() << run.data_description() << "\n";
  if (!run.resumed_from().empty()) log << run.resumed_from() << "\n";
  if (!run.kernels().empty()) log << run.kernels() << "\n";
  log.flush();
}

// "trial 3 (2 this run): optimizer.lr=0.01: finished after 4 epochs,
// accuracy 0.87 (12.3 s)": the progress line of trial `trial`'s outcome
// record, the `seen`-th outcome of this run of the sweep.
std::string outcome_line(const json& record, int trial, int seen,
                         const std::vector<std::string>& overrides, const std::string& metric) {
  std::ostringstream os;
  os << "trial " << trial << " (" << seen << " this run):";
  for (const auto& o : overrides) os << " " << o;
  os << ": " << record.at("state").get<std::string>() << " after " << record.at("epochs").get<int>()
     << " epochs";
  if (record.contains("objective"))
    os << ", " << metric << " " << record.at("objective").get<double>();
  if (record.contains("error")) os << ": " << record.at("error").get<std::string>();
  os << " (" << std::fixed << std::setprecision(1) << record.at("seconds").get<double>() << " s)";
  return os.str();
}

// A rung's jobs: its candidates without a logged outcome at the rung.
std::vector<int> unlogged_jobs(const std::vector<int>& candidates,
                               const std::vector<TrialOutcome>& outcomes, int rung) {
  std::vector<int> jobs;
  for (int t : candidates) {
    bool logged = false;
    for (const auto& o : outcomes) logged = logged || (o.trial == t && o.rung == rung);
    if (!logged) jobs.push_back(t);
  }
  return jobs;
}

}  // namespace

// The sweep log's one writer (world rank 0) and its senders (group leaders).
struct Sweep::Messenger {
  const Communicator* comm = nullptr;  // the sweep's world
  int rank = 0;
  // World rank 0.
  std::string path;
  std::ofstream log;
  int lock = -1;              // <output_dir>/.lock, held while the sweep runs
  std::string failure;        // the first error writing the log; reported at the rung's end
  int received = 0;           // records from other ranks
  std::string rung_outcomes;  // outcome records of the rung in progress, one a line
  std::function<void(const json&)> on_record;
  // The others.
  std::deque<std::string> outbox;
  Requests sending;

  void post(const std::string& line) {
    if (rank == 0) return write(line);
    outbox.push_back(line);
    sending.add(comm->start_send(outbox.back(), 0, record_tag));
  }

  void write(const std::string& line) {
    if (failure.empty()) {
      log << line << '\n';
      log.flush();
      if (!log) failure = "tessera::Sweep: cannot write the sweep log " + path;
    }
    const json record = json::parse(line);
    if (record.at("type") == "trial" && record.at("state") != "started")
      rung_outcomes += line + "\n";
    if (on_record) on_record(record);
  }

  void receive(const std::string& line) {
    ++received;
    write(line);
  }

  // World rank 0: the records that have arrived.
  void poll() {
    std::string line;
    while (comm->poll_text(record_tag, line)) receive(line);
  }

  // World rank 0: waits until `total` records have come from other ranks.
  void await(int total) {
    while (received < total) receive(comm->receive_text(record_tag));
  }

  // The others: every record sent is received.
  void settle() {
    if (!sending.empty()) sending.wait_all();
    sending.clear();
    outbox.clear();
  }
};

Sweep::Sweep(SweepSpec spec, Deck deck, MPI_Comm world)
    : spec_(std::move(spec)), deck_(std::move(deck)) {
  const Communicator ranks(world);
  rank_ = ranks.rank();
  ranks_ = ranks.size();
  // Every rank computes the same verdict from the same numbers.
  if (ranks_ % spec_.ranks_per_trial != 0)
    throw CollectiveError(spec_.location("sweep.ranks_per_trial") +
                          ": sweep.ranks_per_trial: " + std::to_string(spec_.ranks_per_trial) +
                          " ranks per trial do not divide the job's " + std::to_string(ranks_) +
                          " ranks; start it on a multiple of " +
                          std::to_string(spec_.ranks_per_trial) + " ranks");
  identity_ = sweep_identity(deck_, spec_);
  trials_ = plan_trials(spec_);
  require_same_on_every_rank(ranks, content_hash(identity_), "the deck and sweep file",
                             "start every rank with the same deck, sweep file and --set options");
  world_ = std::make_unique<Communicator>(ranks.duplicate());
  groups_ = ranks_ / spec_.ranks_per_trial;
  group_index_ = rank_ / spec_.ranks_per_trial;
  group_ = std::make_unique<Communicator>(world_->split(group_index_, rank_));
  messenger_ = std::make_unique<Messenger>();
  messenger_->comm = world_.get();
  messenger_->rank = rank_;
}

Sweep::~Sweep() {
  if (messenger_ && messenger_->lock >= 0) ::close(messenger_->lock);
  // The group's communicator, then the sweep's world (each frees its MPI_Comm).
  group_.reset();
  world_.reset();
}

void Sweep::prepare() {
  TESSERA_REQUIRE(!prepared_, "tessera::Sweep::prepare: called twice");
  const Communicator& world = *world_;
  Messenger& m = *messenger_;
  m.path = spec_.output_dir + "/sweep.jsonl";
  std::string text, failure;
  if (rank_ == 0) {
    try {
      lock_output_dir();
      text = open_log();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  world.agree(failure);
  world.broadcast(text);
  const SweepLog log = read_sweep_log(text, m.path, identity_);
  logged_ = log.outcomes;
  if (log.starts > 0) resumed_ = resuming_line(spec_.output_dir, log);
  if (rank_ == 0) post_sweep_record(log.starts > 0);
  prepared_ = true;
}

// World rank 0: creates the sweep directory and takes its lock. One writer
// per sweep directory: a second sweep started on it, or ranks of a killed
// job still running, would interleave the log.
void Sweep::lock_output_dir() {
  std::error_code made;
  std::filesystem::create_directories(spec_.output_dir, made);
  if (made)
    throw DeckError(spec_.location("sweep.output_dir") + ": sweep.output_dir: cannot create " +
                    spec_.output_dir + ": " + made.message() +
                    " (set sweep.output_dir or --output-dir to a writable directory)");
  Messenger& m = *messenger_;
  const std::string lock = spec_.output_dir + "/.lock";
  m.lock = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (m.lock >= 0 && ::flock(m.lock, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    throw DeckError(spec_.location("sweep.output_dir") +
                    ": sweep.output_dir: another tessera-sweep is "
                    "running in " +
                    spec_.output_dir + " (it holds " + lock +
                    "); wait for it to end, or end it first");
}

// World rank 0: the text of the sweep log the directory holds (empty for a
// new sweep), checked against this sweep's identity; then opens the log
// for appending.
std::string Sweep::open_log() {
  Messenger& m = *messenger_;
  std::string text;
  if (std::ifstream in{m.path}) {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const SweepLog log = read_sweep_log(text, m.path, identity_);
    // A line cut short by a kill goes; the records before it stay.
    if (log.complete < text.size()) {
      text.resize(log.complete);
      std::filesystem::resize_file(m.path, log.complete);
    }
  }
  m.log.open(m.path, std::ios::app);
  if (!m.log) throw Error("tessera::Sweep: cannot write the sweep log " + m.path);
  return text;
}

// World rank 0: the log's record of this start of the sweep.
void Sweep::post_sweep_record(bool resumed) {
  json keys = json::array();
  for (const auto& p : spec_.parameters)
    keys.push_back({{"key", p.key}, {"distribution", distribution_name(p.distribution)}});
  messenger_->post(json{{"type", "sweep"},
                        {"version", 1},
                        {"identity", identity_},
                        {"name", spec_.name},
                        {"deck", deck_.path},
                        {"deck_overrides", deck_.overrides},
                        {"sweep", spec_.path},
                        {"strategy", strategy_name(spec_.strategy)},
                        {"trials", trials_.size()},
                        {"parameters", keys},
                        {"metric", spec_.metric},
                        {"goal", spec_.maximize ? "maximize" : "minimize"},
                        {"max_epochs", spec_.max_epochs},
                        {"ranks", ranks_},
                        {"ranks_per_trial", spec_.ranks_per_trial},
                        {"groups", groups_},
                        {"resumed", resumed},
                        {"build", build_description()}}
                       .dump());
}

TrialOutcome Sweep::run_job(const Trial& trial, int rung, int epochs, bool last) {
  ScopedRegion region("tessera::Sweep::trial");
  const Communicator& group = *group_;
  const bool leader = group.rank() == 0;
  const int trials = static_cast<int>(trials_.size());
  const std::string dir = spec_.output_dir + "/" + trial_directory(trial.index, trials);
  std::vector<std::string> overrides = trial_overrides(spec_, trial);
  for (auto& o : output_overrides(dir)) overrides.push_back(std::move(o));
  const auto start = std::chrono::steady_clock::now();

  // A trial cut short goes on from its latest checkpoint (its leader's view
  // of the directory decides for the group), else replaces what it left.
  int resume = leader && std::filesystem::exists(dir + "/checkpoints/latest");
  group.broadcast(resume);
  if (leader) post_trial_start(trial, rung, epochs, resume != 0);

  TrialOutcome outcome;
  outcome.trial = trial.index;
  outcome.rung = rung;
  int epochs_done = 0;
  try {
    train_trial(dir, overrides, resume != 0, last ? 0 : epochs, outcome, epochs_done);
  } catch (const std::exception& e) {
    // A failure every rank of the group saw (a CollectiveError) or one of a
    // group of one: the trial failed, the sweep goes on. One rank of several
    // alone: the others wait for it in a collective, so the job ends.
    if (!dynamic_cast<const CollectiveError*>(&e) && group.size() > 1) {
      std::cerr << "tessera-sweep: rank " << rank_ << ": trial " << trial.index
                << ": error: " << e.what() << "; stopping every rank" << std::endl;
      world_->abort(1);
    }
    outcome.state = TrialState::failed;
    outcome.error = e.what();
    outcome.epochs = epochs_done;
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (leader) messenger_->post(outcome_record(spec_, outcome));
  return outcome;
}

// The group leader: the log's record of a trial's start at `rung`.
void Sweep::post_trial_start(const Trial& trial, int rung, int epochs, bool resume) {
  const int trials = static_cast<int>(trials_.size());
  json values = json::array();
  for (const auto& v : trial.values) values.push_back(v.label);
  messenger_->post(json{
      {"type", "trial"},
      {"trial", trial.index},
      {"rung", rung},
      {"state", "started"},
      {"target_epochs", epochs},
      {"group", group_index_},
      {"values", values},
      {"directory", trial_directory(trial.index, trials)},
      {"resume",
       resume}}.dump());
}

// The trial's deck (the sweep's deck with `overrides`) and its data files,
// checked on every rank of the group; a failure on any of them throws
// CollectiveError on all.
Deck Sweep::checked_trial_deck(const std::vector<std::string>& overrides) const {
  Deck deck;
  std::string failure;
  try {
    deck = trial_deck(deck_, spec_, overrides);
    check_data_files(deck);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  group_->agree(failure);
  return deck;
}

// Trains a trial's run on the group, from its latest checkpoint when
// `resume`, to `epochs` epochs of it (0: the deck's), and fills `outcome`;
// `epochs_done` follows the run's epochs, for an outcome that fails. The
// leader appends each epoch's line to the trial's train.log, and world
// rank 0 takes the records that arrive between its steps.
void Sweep::train_trial(const std::string& dir, const std::vector<std::string>& overrides,
                        bool resume, int epochs, TrialOutcome& outcome, int& epochs_done) {
  const Communicator& group = *group_;
  Run run(checked_trial_deck(overrides), group.comm());
  run.prepare(resume ? "latest" : "", {}, &data_, EarlierRun::replace);
  epochs_done = run.first_epoch();
  std::ofstream trial_log;
  if (group.rank() == 0) open_trial_log(trial_log, dir, run);
  RunCallbacks hooks;
  hooks.on_step = [&](const StepReport&) {
    if (rank_ == 0) messenger_->poll();
  };
  hooks.on_epoch = [&](const EpochSummary& e) {
    epochs_done = e.report.epoch + 1;
    trial_log << epoch_line(e, group.size()) << std::endl;
  };
  const RunResult result = run.train(hooks, epochs);
  outcome.state = result.paused ? TrialState::paused : TrialState::finished;
  outcome.epochs = result.epochs;
  outcome.validation = result.evaluation;
  outcome.test = result.test;
}

SweepSummary Sweep::run(const SweepCallbacks& callbacks) {
  TESSERA_REQUIRE(prepared_, "tessera::Sweep::run: call prepare() first");
  ScopedRegion region("tessera::Sweep::run");
  SweepSummary summary;
  summary.trials = trials_;
  const int trials = static_cast<int>(summary.trials.size());
  const std::vector<Rung> rungs = sweep_rungs(spec_, trials);
  summary.outcomes = logged_;
  summary.epochs_full = trials * spec_.max_epochs;
  if (rank_ == 0 && callbacks.log) log_outcomes(callbacks.log);

  std::vector<int> candidates(static_cast<std::size_t>(trials));
  for (int t = 0; t < trials; ++t) candidates[static_cast<std::size_t>(t)] = t;
  int expected = 0;  // rank 0: records from other groups so far
  for (std::size_t k = 0; k < rungs.size(); ++k) {
    const int rung = static_cast<int>(k);
    const bool last = k + 1 == rungs.size();
    const std::vector<int> jobs = unlogged_jobs(candidates, summary.outcomes, rung);
    run_rung(jobs, rung, rungs[k].epochs, last, expected);
    summary.jobs_run += static_cast<int>(jobs.size());
    for (const auto& o : gather_rung_outcomes(expected)) summary.outcomes.push_back(o);
    if (last) break;
    candidates =
        promote_rung(summary.outcomes, rung, rungs[k], rungs[k + 1], !jobs.empty(), callbacks);
  }
  summary.ranked = standings(spec_, summary.outcomes);
  summary.epochs_trained = epochs_trained(summary.outcomes);
  publish_results(summary);
  return summary;
}

// World rank 0: a progress line to `log` (the caller's, which outlives the
// run) for each trial outcome, as its record arrives.
void Sweep::log_outcomes(const std::function<void(const std::string&)>& log) {
  messenger_->on_record = [this, &log, seen = 0](const json& record) mutable {
    if (record.at("type") != "trial" || record.at("state") == "started") return;
    const int t = record.at("trial");
    ++seen;
    log(outcome_line(record, t, seen,
                     trial_overrides(spec_, trials_.at(static_cast<std::size_t>(t))),
                     spec_.metric));
  };
}

// Runs this group's share of a rung's jobs (the j-th on group j mod G),
// the rung's outcome records starting afresh; `expected` counts the
// records world rank 0 is to receive from the other groups.
void Sweep::run_rung(const std::vector<int>& jobs, int rung, int epochs, bool last, int& expected) {
  messenger_->rung_outcomes.clear();
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const int group = static_cast<int>(j % static_cast<std::size_t>(groups_));
    if (group != 0) expected += 2;  // its start and its outcome
    if (group != group_index_) continue;
    run_job(trials_[static_cast<std::size_t>(jobs[j])], rung, epochs, last);
  }
}

// The rung's outcomes, as rank 0 logged them, on every rank, once rank 0
// has the `expected` records of the other groups; a failure writing the
// log throws CollectiveError on every rank.
std::vector<TrialOutcome> Sweep::gather_rung_outcomes(int expected) {
  const Communicator& world = *world_;
  Messenger& m = *messenger_;
  if (rank_ == 0)
    m.await(expected);
  else
    m.settle();
  world.agree(rank_ == 0 ? m.failure : "");
  std::string outcomes = rank_ == 0 ? m.rung_outcomes : "";
  world.broadcast(outcomes);
  return read_sweep_log(outcomes, m.path, identity_).outcomes;
}

// The trials `rung` promotes to the next rung; world rank 0 logs the
// promotion (when the rung ran jobs) and reports it to `callbacks`.
std::vector<int> Sweep::promote_rung(const std::vector<TrialOutcome>& outcomes, int rung,
                                     const Rung& now, const Rung& next, bool ran,
                                     const SweepCallbacks& callbacks) {
  std::vector<TrialOutcome> at_rung;
  for (const auto& o : outcomes)
    if (o.rung == rung) at_rung.push_back(o);
  const std::vector<int> promoted = promote(spec_, at_rung, next.trials);
  if (rank_ == 0 && ran)
    messenger_->post(json{
        {"type", "rung"},
        {"rung", rung},
        {"epochs", now.epochs},
        {"trials", at_rung.size()},
        {"promoted", promoted},
        {"next_epochs",
         next.epochs}}.dump());
  if (rank_ == 0 && callbacks.log) {
    std::ostringstream os;
    os << "rung " << rung << " (" << now.epochs << " epochs): " << at_rung.size()
       << " trials; trials";
    for (int t : promoted) os << " " << t;
    os << " go on to " << next.epochs << " epochs";
    callbacks.log(os.str());
  }
  return promoted;
}

// World rank 0 writes results.md, results.csv and the log's last record; a
// failure there, or earlier in writing the log, throws CollectiveError on
// every rank.
void Sweep::publish_results(const SweepSummary& summary) {
  std::string failure;
  if (rank_ == 0) {
    Messenger& m = *messenger_;
    try {
      replace_file(spec_.output_dir + "/results.md",
                   results_markdown(spec_, summary.trials, summary.outcomes));
      replace_file(spec_.output_dir + "/results.csv",
                   results_csv(spec_, summary.trials, summary.outcomes));
      json done{{"type", "done"},
                {"jobs_run", summary.jobs_run},
                {"epochs_trained", summary.epochs_trained},
                {"epochs_full", summary.epochs_full}};
      if (!summary.ranked.empty() && summary.ranked.front().state != TrialState::failed)
        done["best"] = summary.ranked.front().trial;
      m.post(done.dump());
      if (!m.failure.empty()) failure = m.failure;
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  world_->agree(failure);
}

std::string reproduce_command(const Deck& deck, const SweepSpec& spec, const Trial& trial,
                              const std::string& output_dir) {
  std::string command = "tessera-train " + shell_word(deck.path);
  std::vector<std::string> overrides = deck.overrides;
  overrides.insert(overrides.end(), spec.set.begin(), spec.set.end());
  for (const auto& o : trial_overrides(spec, trial)) overrides.push_back(o);
  for (auto& o : output_overrides(output_dir)) overrides.push_back(std::move(o));
  for (const auto& o : overrides) command += " --set " + shell_word(o);
  return command;
}

}  // namespace tessera
