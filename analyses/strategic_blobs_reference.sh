#!/usr/bin/env bash
# strategic-ml's own code (PyPI strategic-ml 0.1.0) on the same people as
# analyses/strategic_blobs.py, for analyses/results/strategic_blobs.md: the project's
# python exports each seed's training rows and applicants, strategic-ml's interpreter
# trains and scores its models on them (analyses/strategic_blobs_reference.py), then the
# report is written again with their numbers beside ours.
#
#   analyses/strategic_blobs_reference.sh PYTHON [WORK]
#
# PYTHON: an interpreter with strategic-ml 0.1.0 and pytorch-lightning (and torch,
# numpy, pandas): the committed run used a copy of the project's virtualenv plus
# `pip install --no-deps strategic-ml==0.1.0 pytorch-lightning==2.6.6 torchmetrics==1.9.0
# lightning-utilities==0.15.3` (torch 2.13 CPU as installed); `python` on PATH: the
# project's (recourse-sim installed). WORK: a work
# folder (default /tmp/strategic_blobs_reference). Writes
# analyses/results/strategic_blobs_their_code.csv, strategic_blobs.csv and .md.
set -euo pipefail
reference_python=$1
work=${2:-/tmp/strategic_blobs_reference}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
python "$here/strategic_blobs.py" --export "$work/people.csv"
OMP_NUM_THREADS=1 "$reference_python" "$here/strategic_blobs_reference.py" \
  "$work/people.csv" "$here/results/strategic_blobs_their_code.csv"
python "$here/strategic_blobs.py"
