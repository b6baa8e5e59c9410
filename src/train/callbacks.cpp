// The callback list and early stopping (train/callbacks.hpp).
#include <tessera/train/callbacks.hpp>

#include <cmath>
#include <sstream>

namespace tessera {

CallbackList& CallbackList::add(std::unique_ptr<Callback> callback) {
  TESSERA_REQUIRE(callback != nullptr, "tessera::CallbackList::add: no callback");
  list_.push_back(std::move(callback));
  return *this;
}

CallbackList& CallbackList::add(std::string name, bool collective,
                                std::function<void(const StepReport&)> step,
                                std::function<void(EpochSummary&)> epoch) {
  return add(std::make_unique<FunctionCallback>(std::move(name), collective, std::move(step),
                                                std::move(epoch)));
}

void CallbackList::on_step(const StepReport& report) const {
  for (const auto& c : list_) c->on_step(report);
}

void CallbackList::on_epoch(EpochSummary& summary) const {
  for (const auto& c : list_) {
    c->on_epoch(summary);
    if (summary.stop) summary.last = true;
  }
}

std::string CallbackList::describe() const {
  std::string text;
  for (const auto& c : list_)
    text += (text.empty() ? "" : ", ") + c->name() + (c->collective() ? " (collective)" : "");
  return text;
}

EarlyStopping::EarlyStopping(int patience, double min_delta)
    : patience_(patience), min_delta_(min_delta) {
  TESSERA_REQUIRE(patience >= 1 && std::isfinite(min_delta) && min_delta >= 0,
                  "tessera::EarlyStopping: patience " << patience << " must be >= 1 and min_delta "
                                                      << min_delta << " finite and >= 0");
}

void EarlyStopping::observe(double loss, int epoch) {
  if (best_epoch_ < 0 || loss < best_ - min_delta_) {
    best_ = loss;
    best_epoch_ = epoch;
    waited_ = 0;
  } else {
    ++waited_;
  }
}

void EarlyStopping::on_epoch(EpochSummary& summary) {
  if (!summary.evaluated || summary.stop) return;
  observe(summary.evaluation.loss, summary.report.epoch);
  if (!exhausted() || summary.last) return;
  summary.stop = true;
  summary.stop_reason = reason();
}

std::string EarlyStopping::reason() const {
  std::ostringstream os;
  os << "early stopping: no evaluation loss below the best, " << best_ << " after epoch "
     << best_epoch_ + 1 << ", by more than " << min_delta_ << " in the " << waited_
     << " evaluation(s) since (training.early_stop_patience = " << patience_ << ")";
  return os.str();
}

}  // namespace tessera
