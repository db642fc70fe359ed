// worker_sim: runs WorkerSim (pool/worker_sim.h) for the three strategies and prints the table
// of docs/benchmarks.md ("Worker pool simulation"). Options (all optional):
//   --workers N --slots N --domains N --candidates N --builds N --warmup N --warm-per-worker N
//   --min-idle S --seed N --utilization U
//   --sweep FILE   also sweep the offered load 0.40..0.90 and write a CSV (for bench/worker_sim.sh)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pool/worker_sim.h"

namespace {

void Row(const kiln::SimConfig& cfg, const kiln::SimResult& r) {
  char moved[32] = "-";
  if (r.churn_moved >= 0) std::snprintf(moved, sizeof moved, "%.1f %%", 100 * r.churn_moved);
  std::printf("| %s | %.1f %% | %.1f | %.1f | %.2fx | %.1f | %.3f | %.0f %% | %s | %.1f %% |\n",
              kiln::SimStrategyName(cfg.strategy), 100 * r.hit_rate, r.wait_p50_s, r.wait_p99_s,
              r.wait_p99_s / r.build_mean_s, r.build_mean_s, r.jain, 100 * r.utilization, moved,
              100.0 * static_cast<double>(r.spilled) / static_cast<double>(r.measured));
}

}  // namespace

int main(int argc, char** argv) {
  kiln::SimConfig base;
  std::string sweep;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--workers")
      base.workers = std::strtoul(v, nullptr, 10);
    else if (k == "--slots")
      base.slots = std::strtoul(v, nullptr, 10);
    else if (k == "--domains")
      base.domains = std::strtoul(v, nullptr, 10);
    else if (k == "--candidates")
      base.candidates = std::strtoul(v, nullptr, 10);
    else if (k == "--builds")
      base.builds = std::strtoul(v, nullptr, 10);
    else if (k == "--warmup")
      base.warmup = std::strtoul(v, nullptr, 10);
    else if (k == "--warm-per-worker")
      base.warm_per_worker = std::strtoul(v, nullptr, 10);
    else if (k == "--min-idle")
      base.min_idle_s = std::strtod(v, nullptr);
    else if (k == "--seed")
      base.seed = std::strtoull(v, nullptr, 10);
    else if (k == "--utilization")
      base.utilization = std::strtod(v, nullptr);
    else if (k == "--sweep")
      sweep = v;
    else {
      std::fprintf(stderr, "worker_sim: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf(
      "%zu workers x %zu slots, %zu domains, %zu candidates, %zu builds, offered load %.0f %%, "
      "seed %llu\n\n",
      base.workers, base.slots, base.domains, base.candidates, base.builds, 100 * base.utilization,
      static_cast<unsigned long long>(base.seed));
  std::printf(
      "| strategy | warm hits | wait p50 s | wait p99 s | p99 / mean build | mean build s | Jain | "
      "utilization | moved at churn | spills |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto s : {kiln::SimStrategy::kAffinity, kiln::SimStrategy::kRandom,
                 kiln::SimStrategy::kContextHash}) {
    kiln::SimConfig cfg = base;
    cfg.strategy = s;
    Row(cfg, kiln::RunSim(cfg));
  }
  if (sweep.empty()) return 0;
  FILE* f = std::fopen(sweep.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "worker_sim: cannot write %s\n", sweep.c_str());
    return 1;
  }
  std::fprintf(f, "# offered strategy hit_rate p99_over_mean_build utilization jain\n");
  for (int u = 40; u <= 90; u += 5) {
    for (int s = 0; s < 3; ++s) {
      kiln::SimConfig cfg = base;
      cfg.strategy = static_cast<kiln::SimStrategy>(s);
      cfg.utilization = u / 100.0;
      auto r = kiln::RunSim(cfg);
      std::fprintf(f, "%d %d %.4f %.4f %.4f %.4f\n", u, s, r.hit_rate,
                   r.wait_p99_s / r.build_mean_s, r.utilization, r.jain);
    }
  }
  std::fclose(f);
  return 0;
}
