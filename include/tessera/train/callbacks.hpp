// Callbacks: what a training loop does around its steps and epochs besides
// training (evaluation, metrics, checkpoints, early stopping), as objects
// a run composes in a list (the LBANN model). tessera::Run builds its list
// from the deck; a loop of one's own over Trainer::step (docs/examples/
// custom_loop.cpp) can run one too.
//
// Every rank holds the same list and runs it in the same order. A
// callback that calls collectives (an evaluation, a checkpoint, the check
// that the ranks' weights agree) says so: it must run on every rank, and
// the list's one order gives every rank the same sequence of collectives.
// A callback that does not may do its work on some ranks only (rank 0's
// metrics file).
#pragma once

#include <tessera/train/trainer.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

// One epoch as the run saw it; the epoch's callbacks fill in what comes
// after training (the evaluation) for those after them.
struct EpochSummary {
  EpochReport report;      // training: losses, times, communication
  int epochs = 0;          // in the whole run
  bool last = false;       // the run's last epoch (its end, a pause or max_steps)
  bool evaluated = false;  // evaluated after this epoch (run.eval_every, or the last one)
  std::string set;         // "validation" or "test"
  Evaluation evaluation;
  // Set by a callback that ends the run after this epoch (early stopping),
  // with the reason; the callbacks after it see the epoch as the last.
  bool stop = false;
  std::string stop_reason;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual std::string name() const = 0;
  // Whether it calls collectives: then it runs on every rank.
  virtual bool collective() const = 0;
  // After every optimizer step.
  virtual void on_step(const StepReport& /*report*/) {}
  // After every epoch's training.
  virtual void on_epoch(EpochSummary& /*summary*/) {}
};

// A callback made of functions (either may be empty).
class FunctionCallback final : public Callback {
 public:
  FunctionCallback(std::string name, bool collective, std::function<void(const StepReport&)> step,
                   std::function<void(EpochSummary&)> epoch)
      : name_(std::move(name)),
        collective_(collective),
        step_(std::move(step)),
        epoch_(std::move(epoch)) {}
  std::string name() const override { return name_; }
  bool collective() const override { return collective_; }
  void on_step(const StepReport& report) override {
    if (step_) step_(report);
  }
  void on_epoch(EpochSummary& summary) override {
    if (epoch_) epoch_(summary);
  }

 private:
  std::string name_;
  bool collective_;
  std::function<void(const StepReport&)> step_;
  std::function<void(EpochSummary&)> epoch_;
};

// The list a run composes, run in order.
class CallbackList {
 public:
  CallbackList& add(std::unique_ptr<Callback> callback);
  CallbackList& add(std::string name, bool collective, std::function<void(const StepReport&)> step,
                    std::function<void(EpochSummary&)> epoch = {});
  void on_step(const StepReport& report) const;
  // Once a callback stops the run, those after it see summary.last.
  void on_epoch(EpochSummary& summary) const;
  std::size_t size() const { return list_.size(); }
  const Callback& operator[](std::size_t i) const { return *list_.at(i); }
  // "evaluation (collective), metrics, ...": the list in order.
  std::string describe() const;

 private:
  std::vector<std::unique_ptr<Callback>> list_;
};

// Ends the run once `patience` evaluations in a row have not lowered the
// evaluation loss below the best so far by more than min_delta. It decides
// from the evaluation every rank holds, so every rank decides the same
// without communicating. Its state is what the evaluations so far make it:
// a restart rebuilds it by observing the evaluations the run recorded.
class EarlyStopping final : public Callback {
 public:
  EarlyStopping(int patience, double min_delta);
  std::string name() const override { return "early stopping"; }
  bool collective() const override { return false; }
  void on_epoch(EpochSummary& summary) override;
  // One evaluation's loss after epoch `epoch` (0-based).
  void observe(double loss, int epoch);
  // Whether the patience is used up.
  bool exhausted() const { return waited_ >= patience_; }
  // Why the run stops: the best loss, its epoch, the evaluations since.
  std::string reason() const;

 private:
  int patience_;
  double min_delta_;
  double best_ = 0;
  int best_epoch_ = -1;  // none yet
  int waited_ = 0;       // evaluations since the best
};

}  // namespace tessera
