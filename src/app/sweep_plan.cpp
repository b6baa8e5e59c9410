// What a sweep decides without running anything: its trials, its rungs,
// which trials a rung promotes, the ranking, the results tables and the
// log's records. Every decision is a function of the sweep file, the deck
// and the outcomes, never of timing or of the number of ranks.
#include <tessera/app/sweep.hpp>
#include <tessera/core/random.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <map>
#include <sstream>

namespace tessera {

using json = nlohmann::json;

std::vector<Trial> plan_trials(const SweepSpec& spec) {
  std::vector<Trial> trials;
  const bool enumerated = spec.strategy == SweepStrategy::grid ||
                          (spec.strategy == SweepStrategy::halving && spec.trials == 0);
  if (enumerated) {
    std::size_t count = 1;
    for (const auto& p : spec.parameters) count *= p.values.size();
    for (std::size_t i = 0; i < count; ++i) {
      Trial t;
      t.index = static_cast<int>(i);
      t.values.resize(spec.parameters.size());
      // The last parameter changes fastest, as in nested loops in file order.
      std::size_t rest = i;
      for (std::size_t p = spec.parameters.size(); p-- > 0;) {
        const auto& values = spec.parameters[p].values;
        t.values[p] = values[rest % values.size()];
        rest /= values.size();
      }
      trials.push_back(std::move(t));
    }
    return trials;
  }
  for (int i = 0; i < spec.trials; ++i) {
    Trial t;
    t.index = i;
    for (const auto& p : spec.parameters) {
      // A parameter's stream is its key, so adding or reordering parameters
      // leaves the others' draws as they were.
      const std::uint64_t bits =
          counter_hash(spec.seed, fnv1a64(p.key.data(), p.key.size()), static_cast<unsigned>(i));
      t.values.push_back(p.draw(static_cast<double>(bits >> 11) * 0x1.0p-53));
    }
    trials.push_back(std::move(t));
  }
  return trials;
}

std::vector<std::string> trial_overrides(const SweepSpec& spec, const Trial& trial) {
  std::vector<std::string> out;
  for (std::size_t p = 0; p < spec.parameters.size(); ++p)
    out.push_back(spec.parameters[p].key + "=" + trial.values[p].text);
  return out;
}

std::vector<Rung> sweep_rungs(const SweepSpec& spec, int trials) {
  std::vector<Rung> rungs;
  int kept = trials;
  if (spec.strategy == SweepStrategy::halving) {
    // Rungs end once one trial is left: it goes straight to the last rung.
    for (long epochs = spec.min_epochs; epochs < spec.max_epochs && kept > 1;
         epochs *= spec.reduction) {
      rungs.push_back({static_cast<int>(epochs), kept});
      kept = std::max(1, kept / spec.reduction);
    }
  }
  rungs.push_back({spec.max_epochs, kept});
  return rungs;
}

double objective(const SweepSpec& spec, const TrialOutcome& outcome) {
  return spec.metric == "validation_loss" ? outcome.validation.loss : outcome.validation.accuracy;
}

bool ranks_before(const SweepSpec& spec, const TrialOutcome& a, const TrialOutcome& b) {
  const bool a_failed = a.state == TrialState::failed, b_failed = b.state == TrialState::failed;
  if (a_failed != b_failed) return b_failed;
  if (!a_failed) {
    if (a.epochs != b.epochs) return a.epochs > b.epochs;
    const double x = objective(spec, a), y = objective(spec, b);
    if (x != y) return spec.maximize ? x > y : x < y;
  }
  return a.trial < b.trial;
}

std::vector<int> promote(const SweepSpec& spec, std::vector<TrialOutcome> rung, int keep) {
  std::sort(rung.begin(), rung.end(),
            [&](const TrialOutcome& a, const TrialOutcome& b) { return ranks_before(spec, a, b); });
  std::vector<int> promoted;
  for (const auto& o : rung)
    if (o.state != TrialState::failed && static_cast<int>(promoted.size()) < keep)
      promoted.push_back(o.trial);
  return promoted;
}

std::vector<TrialOutcome> standings(const SweepSpec& spec, const std::vector<TrialOutcome>& all) {
  std::map<int, TrialOutcome> furthest;
  for (const auto& o : all) {
    auto it = furthest.find(o.trial);
    if (it == furthest.end() || o.rung >= it->second.rung) furthest[o.trial] = o;
  }
  std::vector<TrialOutcome> ranked;
  for (const auto& [trial, o] : furthest) ranked.push_back(o);
  std::sort(ranked.begin(), ranked.end(),
            [&](const TrialOutcome& a, const TrialOutcome& b) { return ranks_before(spec, a, b); });
  return ranked;
}

int epochs_trained(const std::vector<TrialOutcome>& all) {
  std::map<int, int> furthest;
  for (const auto& o : all) furthest[o.trial] = std::max(furthest[o.trial], o.epochs);
  int total = 0;
  for (const auto& [trial, epochs] : furthest) total += epochs;
  return total;
}

std::string trial_directory(int trial, int trials) {
  const int width =
      std::max<int>(3, static_cast<int>(std::to_string(std::max(0, trials - 1)).size()));
  std::ostringstream os;
  os << "trials/t" << std::setw(width) << std::setfill('0') << trial;
  return os.str();
}

namespace {

// How a ranked trial ended: finished, stopped after a rung, or failed.
std::string standing_state(const TrialOutcome& o) {
  return o.state == TrialState::paused ? "stopped" : state_name(o.state);
}

// Round-trip text for the CSV: the exact double, as the log holds it.
std::string exact(double value) { return json(value).dump(); }

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

const Trial& trial_of(const std::vector<Trial>& trials, int index) {
  TESSERA_REQUIRE(index >= 0 && index < static_cast<int>(trials.size()),
                  "tessera::Sweep: trial " << index << " is not one of the " << trials.size()
                                           << " trials of the sweep");
  return trials[static_cast<std::size_t>(index)];
}

}  // namespace

std::string results_markdown(const SweepSpec& spec, const std::vector<Trial>& trials,
                             const std::vector<TrialOutcome>& all) {
  const auto ranked = standings(spec, all);
  std::ostringstream os;
  os << "# Sweep " << spec.name << "\n\n"
     << "Strategy " << strategy_name(spec.strategy) << ", " << trials.size() << " trials, "
     << spec.ranks_per_trial << " rank" << (spec.ranks_per_trial > 1 ? "s" : "")
     << " per trial; objective " << spec.metric << " (" << (spec.maximize ? "maximize" : "minimize")
     << "). " << epochs_trained(all) << " epochs trained; every trial to " << spec.max_epochs
     << " epochs would take " << spec.max_epochs * static_cast<int>(trials.size())
     << ".\n\n| rank | trial |";
  for (const auto& p : spec.parameters) os << " " << p.key << " |";
  os << " state | epochs | validation accuracy | validation loss | test accuracy | test loss |\n|";
  for (std::size_t c = 0; c < spec.parameters.size() + 8; ++c) os << "---|";
  os << "\n" << std::fixed << std::setprecision(4);
  std::vector<const TrialOutcome*> failures;
  for (std::size_t r = 0; r < ranked.size(); ++r) {
    const TrialOutcome& o = ranked[r];
    os << "| " << r + 1 << " | " << o.trial << " |";
    for (const auto& v : trial_of(trials, o.trial).values) os << " " << v.label << " |";
    os << " " << standing_state(o) << " | " << o.epochs << " |";
    if (o.state == TrialState::failed) {
      os << " | | | |\n";
      failures.push_back(&o);
      continue;
    }
    os << " " << o.validation.accuracy << " | " << o.validation.loss << " |";
    if (o.state == TrialState::finished)
      os << " " << o.test.accuracy << " | " << o.test.loss << " |\n";
    else
      os << " | |\n";
  }
  if (!failures.empty()) os << "\n";
  for (const auto* o : failures) os << "Trial " << o->trial << " failed: " << o->error << "\n";
  return os.str();
}

std::string results_csv(const SweepSpec& spec, const std::vector<Trial>& trials,
                        const std::vector<TrialOutcome>& all) {
  const auto ranked = standings(spec, all);
  std::ostringstream os;
  os << "rank,trial,directory";
  for (const auto& p : spec.parameters) os << "," << csv_field(p.key);
  os << ",state,epochs,validation_accuracy,validation_loss,test_accuracy,test_loss,error\n";
  for (std::size_t r = 0; r < ranked.size(); ++r) {
    const TrialOutcome& o = ranked[r];
    os << r + 1 << "," << o.trial << ","
       << trial_directory(o.trial, static_cast<int>(trials.size()));
    for (const auto& v : trial_of(trials, o.trial).values) os << "," << csv_field(v.label);
    os << "," << standing_state(o) << "," << o.epochs << ",";
    if (o.state != TrialState::failed)
      os << exact(o.validation.accuracy) << "," << exact(o.validation.loss);
    else
      os << ",";
    os << ",";
    if (o.state == TrialState::finished)
      os << exact(o.test.accuracy) << "," << exact(o.test.loss);
    else
      os << ",";
    os << "," << csv_field(o.error) << "\n";
  }
  return os.str();
}

std::string sweep_identity(const Deck& deck, const SweepSpec& spec) {
  std::string text = deck.text;
  for (const auto& o : deck.overrides) text += "\n--set " + o;
  text += "\n--sweep\n" + spec.text;
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << content_hash(text);
  return os.str();
}

std::string outcome_record(const SweepSpec& spec, const TrialOutcome& o) {
  json record{{"type", "trial"},    {"trial", o.trial},
              {"rung", o.rung},     {"state", state_name(o.state)},
              {"epochs", o.epochs}, {"seconds", o.seconds}};
  if (o.state == TrialState::failed) {
    record["error"] = o.error;
  } else {
    record["objective"] = objective(spec, o);
    record["validation_accuracy"] = o.validation.accuracy;
    record["validation_loss"] = o.validation.loss;
    if (o.state == TrialState::finished) {
      record["test_accuracy"] = o.test.accuracy;
      record["test_loss"] = o.test.loss;
    }
  }
  return record.dump();
}

SweepLog read_sweep_log(const std::string& text, const std::string& path,
                        const std::string& identity) {
  SweepLog log;
  std::size_t start = 0;
  int line = 0;
  std::map<std::pair<int, int>, std::size_t> seen;  // (trial, rung) -> index in outcomes
  while (start < text.size()) {
    ++line;
    const auto end = text.find('\n', start);
    // A kill can cut the last line short; it is not part of the log.
    if (end == std::string::npos) break;
    const std::string where = path + ":" + std::to_string(line) + ": ";
    const std::string content = text.substr(start, end - start);
    start = end + 1;
    if (content.empty()) {
      log.complete = start;
      continue;
    }
    json record;
    try {
      record = json::parse(content);
      const std::string type = record.at("type");
      if (type == "sweep") {
        const std::string theirs = record.at("identity");
        if (theirs != identity)
          throw Error(where +
                      "this directory holds a sweep of another deck or sweep file (identity " +
                      theirs + ", this sweep's " + identity +
                      "); give this sweep another sweep.output_dir (or --output-dir), or remove "
                      "the directory to start it over");
        ++log.starts;
      } else if (type == "trial" && record.at("state") != "started") {
        TrialOutcome o;
        o.trial = record.at("trial");
        o.rung = record.at("rung");
        const std::string state = record.at("state");
        // An unknown state: "<path>:<line>: unknown trial state '...'; allowed: ...".
        o.state = trial_states.value(state, (path + ":" + std::to_string(line)).c_str());
        o.epochs = record.at("epochs");
        o.seconds = record.at("seconds");
        if (o.state == TrialState::failed) {
          o.error = record.at("error");
        } else {
          o.validation.accuracy = record.at("validation_accuracy");
          o.validation.loss = record.at("validation_loss");
          if (o.state == TrialState::finished) {
            o.test.accuracy = record.at("test_accuracy");
            o.test.loss = record.at("test_loss");
          }
        }
        // A job logged twice (it cannot be, but a log edited by hand can
        // say so) counts once: the later record.
        const auto key = std::make_pair(o.trial, o.rung);
        if (const auto it = seen.find(key); it != seen.end()) {
          log.outcomes[it->second] = o;
        } else {
          seen[key] = log.outcomes.size();
          log.outcomes.push_back(o);
        }
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(where + "not a sweep log record (" + e.what() +
                  "); the log was edited or damaged");
    }
    log.complete = start;
  }
  return log;
}

}  // namespace tessera
