#!/usr/bin/env bash
# König et al.'s own code beside ours, for analyses/results/performative_recourse.md: their
# repository gcskoenig/performative-recourse-experiments (commit 290169f), their decision
# tree and search settings (1,000 samples, DEAP population 25 over 25 generations, recourse
# threshold 0.9) but 40 or 30 rejected applicants a run instead of 5,000 (their search
# takes about 2 s of CPU an applicant and approach here), for CE, CR (individualised,
# acceptance) and ICR (individualised, improvement); then their own post-processing
# (scripts/run_visualization.py: process_folder, 10 refits) gives the acceptance of the
# held-out half of the recourse implementers before and after the refit. Beside their
# table's columns, from the run's own files (all of its applicants): changed_any, the share
# whose recourse changed some feature's value; true_fav_before and true_fav_after, the share
# whose true label (their fn_l of y) is favourable before and after acting on it;
# applicants, the run's number of rejected applicants.
#
# Settings, seeds and applicants: RUNS below (their --scm_name values: LAdd, NLAdd, LMult,
# NLMult, LCubic). Every setting on seeds 40, 41 and 42; 30 applicants for NLMult and
# LCubic (CPU: the machine is shared).
#
#   JOBS=2 analyses/performative_recourse_reference.sh CHECKOUT PYTHON [OUT]
#
# CHECKOUT: an unpacked copy of their repository (its recourse/applications.py is replaced
# by an empty registry: it downloads the two real-data applications on import, which are
# not run here); PYTHON: an interpreter with numpy, pandas, scikit-learn, torch, pyro-ppl,
# deap, networkx, cloudpickle, matplotlib and seaborn (the committed CSV: Python 3.11,
# pandas 3.1.1, scikit-learn 1.9.1, torch 2.13.0, pyro-ppl 1.9.2, deap 1.4); OUT: a work
# folder (default /tmp/performative_reference), where a run whose folder already holds its
# results is not run (or post-processed) again. JOBS (environment, default 1): how many of
# their runs at once. Each run's wall and CPU seconds go to OUT/times.tsv. Writes
# analyses/results/performative_recourse_their_code.csv.
set -euo pipefail
checkout=$(cd "$1" && pwd)
python=$2
out=${3:-/tmp/performative_reference}
jobs=${JOBS:-1}
results=$(cd "$(dirname "$0")" && pwd)/results
RUNS=(  # setting, seed, rejected applicants
  "binomial_linear_additive 40 40"
  "binomial_linear_additive 41 40"
  "binomial_linear_additive 42 40"
  "binomial_nonlinear_additive 40 40"
  "binomial_nonlinear_additive 41 40"
  "binomial_nonlinear_additive 42 40"
  "binomial_linear_multiplicative 40 40"
  "binomial_linear_multiplicative 41 40"
  "binomial_linear_multiplicative 42 40"
  "binomial_nonlinear_multiplicative 40 30"
  "binomial_nonlinear_multiplicative 41 30"
  "binomial_nonlinear_multiplicative 42 30"
  "binomial_linear_invertiblepolynomial 40 30"
  "binomial_linear_invertiblepolynomial 41 30"
  "binomial_linear_invertiblepolynomial 42 30"
)
mkdir -p "$out"
out=$(cd "$out" && pwd)
printf 'application_scms = {}\nshortnames_applications = {}\n' > "$checkout/recourse/applications.py"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH="$checkout"
cd "$checkout"

# One run of their simulation: SCM SEED APPLICANTS APPROACH GOAL.
one_run() {
  local folder="$out/cfg_seed-$2/$1_$5_$4"
  [[ -f "$folder/epss.csv" ]] && return 0  # the last file a run writes
  mkdir -p "$folder"
  /usr/bin/time -f "$1	$2	$4	$5	%e	%U	%S" -a -o "$out/times.tsv" \
    "$python" scripts/run_simulation.py --scm_name "$1" --N_REC "$3" --goal "$5" \
    --approach "$4" --N_SAMPLES 1000 --pop_size 25 --ngen 25 --cxpb 0.5 --mutpb 0.5 \
    --folder_name "$folder" --model tree --seed "$2" --thresh_pred 0.5 \
    --thresh_recourse 0.9 --N_fit 100000 > "$out/log_$1_$2_$4_$5.txt" 2>&1
}
export -f one_run
export out python
for run in "${RUNS[@]}"; do
  for approach_goal in "ce acc" "ind acc" "ind imp"; do
    echo "$run $approach_goal"
  done
done | xargs -P "$jobs" -L 1 bash -c 'one_run "$@"' _

"$python" - "$out" "$results/performative_recourse_their_code.csv" "${RUNS[@]}" <<'EOF'
import json
import os
import sys

sys.path.insert(0, "scripts")
import pandas as pd
from run_visualization import process_folder

out, target, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for run in runs:
    scm_name, seed, n_rec = run.split()
    cfg = f"{out}/cfg_seed-{seed}"
    for goal, approach in [("acc", "ce"), ("acc", "ind"), ("imp", "ind")]:
        folder = f"{cfg}/{scm_name}_{goal}_{approach}"
        # process_folder reads the seed and the number of applicants from here
        params = {"seed": int(seed), "N_Rec": int(n_rec), "thresh_pred": 0.5, "model": "tree",
                  "N_SAMPLES": 1000}
        with open(f"{cfg}/params.json", "w") as f:
            json.dump(params, f)
        if not os.path.exists(f"{folder}/plots/result_table_row.csv"):
            process_folder(cfg, folder)
        row = pd.read_csv(f"{folder}/plots/result_table_row.csv")
        row.insert(1, "seed", int(seed))
        before = pd.read_csv(f"{folder}/obss_rej.csv")
        after = pd.read_csv(f"{folder}/new_observations.csv")
        recs = pd.read_csv(f"{folder}/recs.csv")
        changed = (recs - before[recs.columns]).abs().fillna(0) > 0
        row["changed_any"] = changed.any(axis=1).mean()
        row["true_fav_before"] = before["l"].mean()
        row["true_fav_after"] = after["l"].mean()
        row["applicants"] = int(n_rec)
        rows.append(row)
columns = ["scm_name", "seed", "goal", "approach", "rec_orig", "rec_refit", "rec_orig_std",
           "rec_refit_std", "int_causes", "int_any", "changed_any", "true_fav_before",
           "true_fav_after", "applicants"]
pd.concat(rows)[columns].to_csv(target, index=False, float_format="%.6g")
EOF
