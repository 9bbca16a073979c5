#!/usr/bin/env bash
# König et al.'s own code on one setting, for analyses/results/performative_recourse.md:
# their repository gcskoenig/performative-recourse-experiments (commit 290169f), LAdd, a
# decision tree, seed 40, their search settings (1,000 samples, DEAP population 25 over 25
# generations, recourse threshold 0.9) but 40 rejected applicants instead of 5,000 (their
# search takes about 2 s of CPU per applicant here: 215 s for the three runs), for CE, CR
# (individualised, acceptance) and ICR (individualised, improvement); then their own
# post-processing (scripts/run_visualization.py: process_folder, 10 refits) gives the
# acceptance of the recourse implementers before and after the refit.
#
#   analyses/performative_recourse_reference.sh CHECKOUT PYTHON [OUT]
#
# CHECKOUT: an unpacked copy of their repository (its recourse/applications.py is replaced
# by an empty registry: it downloads the two real-data applications on import, which are
# not run here); PYTHON: an interpreter with numpy, pandas, scikit-learn, torch, pyro-ppl,
# deap, networkx, cloudpickle, matplotlib and seaborn; OUT: a work folder (default
# /tmp/performative_reference). Writes analyses/results/performative_recourse_their_code.csv.
set -euo pipefail
checkout=$(cd "$1" && pwd)
python=$2
out=${3:-/tmp/performative_reference}
results=$(cd "$(dirname "$0")" && pwd)/results
mkdir -p "$out/cfg"
printf 'application_scms = {}\nshortnames_applications = {}\n' > "$checkout/recourse/applications.py"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH="$checkout"
cd "$checkout"
for run in "ce acc" "ind acc" "ind imp"; do
  set -- $run
  "$python" scripts/run_simulation.py --scm_name binomial_linear_additive --N_REC 40 \
    --goal "$2" --approach "$1" --N_SAMPLES 1000 --pop_size 25 --ngen 25 --cxpb 0.5 \
    --mutpb 0.5 --folder_name "$out/cfg/binomial_linear_additive_$2_$1" --model tree \
    --seed 40 --thresh_pred 0.5 --thresh_recourse 0.9 --N_fit 100000 > "$out/log_$1_$2.txt" 2>&1
done
"$python" - "$out/cfg" "$results/performative_recourse_their_code.csv" <<'EOF'
import glob
import json
import sys

sys.path.insert(0, "scripts")
import pandas as pd
from run_visualization import process_folder

cfg, target = sys.argv[1], sys.argv[2]
params = {"seed": 40, "N_Rec": 40, "thresh_pred": 0.5, "model": "tree", "N_SAMPLES": 1000}
with open(f"{cfg}/params.json", "w") as f:
    json.dump(params, f)
rows = []
for run in sorted(glob.glob(f"{cfg}/binomial_*")):
    process_folder(cfg, run)
    rows.append(pd.read_csv(f"{run}/plots/result_table_row.csv"))
columns = ["scm_name", "goal", "approach", "rec_orig", "rec_refit", "rec_orig_std",
           "rec_refit_std", "int_causes", "int_any"]
pd.concat(rows)[columns].to_csv(target, index=False, float_format="%.6g")
EOF
