"""strategic-ml's own code (PyPI ``strategic-ml`` 0.1.0) on the people of
analyses/strategic_blobs.py, for analyses/results/strategic_blobs.md.

Run by an interpreter that has ``strategic-ml`` (and its ``pytorch-lightning``), not by
the project's: analyses/strategic_blobs_reference.sh makes the people and runs this.

    PYTHON analyses/strategic_blobs_reference.py PEOPLE_CSV OUT_CSV

PEOPLE_CSV (``python analyses/strategic_blobs.py --export``): per seed, the 5,000
truthful training rows and each round's applicants before they respond, with what the
bundled ``strategic_blobs`` scenario deployed. Everything below is their library's: the
model (``LinearModel``), the response (``LinearStrategicDelta`` with an L2 cost: the
rejected move to the boundary plus their safety margin of 0.01 along w when that costs
less than 2), the strategic hinge loss, their L2 regularisation and ``ModelSuit``'s loss
computation and optimiser; only the plain model's two losses are written here (their
blob test defines its loss in the test file itself). The training loop is
``ModelSuit``'s under a Lightning ``Trainer`` (zero_grad, loss, backward, step per batch
of 32 in the file's order, the negatives first where their generator puts the positives
first; early stopping on the validation zero-one loss with patience 16, as their blob
test sets it),
written out here as a plain loop: it runs ``ModelSuit._calculate_loss_and_predictions``
and ``configure_optimizers`` themselves, and the first arm is checked against a real
``Trainer`` run before anything is written. Accuracy under response is measured with
their response on each round's applicants (``sign(model(delta(x))) == y``; sign 0 is
wrong, as in their zero-one loss): their ``ModelSuit`` reports the s-hinge model's test
zero-one loss on the unmoved rows.

Arms (``arm`` column of OUT_CSV; round r: the seed's round-r applicants):
- ``s_hinge_early_stop``: their blob test's Stackelberg model (weights (1, 0), bias -10
  to start, Adam lr 0.005, L2 regularisation 0.0003, early stopping), round 1.
- ``s_hinge_100_epochs``: the same run to its 100 epochs, no early stopping.
- ``s_hinge_lbfgs``: their s-hinge risk (with the same regularisation) minimised
  full-batch by L-BFGS from the same start: what their loss itself asks for.
- ``ours_under_their_response``: the project's deployed model, under their response.
- ``plain``: the non-strategic model of their blob test (its loss: binary cross-entropy
  of (s + 1)/2 against (y + 1)/2; torch's default start, Adam lr 0.01, early stopping),
  trained on the truthful rows; ``plain_exact``: that loss's minimiser (L-BFGS on from
  there). Then repeated retraining (their library has no retraining loop): each round
  the deployed model meets the round's applicants, who respond by their delta, and is
  retrained on their responded rows alone; ``rrm_warm``: 10 epochs of the same loop,
  warm-started, from ``plain``; ``rrm_exact``: to convergence (full-batch L-BFGS), from
  ``plain_exact``. ``plain_logistic``, ``plain_logistic_exact``, ``rrm_logistic_warm``
  and ``rrm_logistic_exact``: the same with the ordinary logistic loss (cross-entropy
  of s). A round's row is the model deployed in that round.

Columns: seed, arm, round, acc_under_response, coef_1, coef_2, intercept, epochs (the
epoch their early stopping stopped at, or 100), trainer_check (the largest difference
of θ between the plain loop and a real ``Trainer``, 3 epochs of the first arm),
run_wall_s and run_cpu_s (the whole run's).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings

import numpy as np
import pandas as pd
import strategic_ml as sml
import torch
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

warnings.filterwarnings("ignore")
logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
torch.set_num_threads(1)

BATCH, PATIENCE, MAX_EPOCHS, RRM_EPOCHS = 32, 16, 100, 10


class PlusOneBCE(nn.Module):
    """Their blob test's loss: cross-entropy with logits of (s + 1)/2 against (y + 1)/2."""

    def forward(self, score: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits((score + 1) / 2, (y + 1) / 2)


class LogisticBCE(nn.Module):
    """The ordinary logistic loss of the score s, labels ±1."""

    def forward(self, score: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(score, (y + 1) / 2)


def tensors(rows: pd.DataFrame) -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.tensor(rows[["x1", "x2"]].to_numpy(), dtype=torch.float32)
    y = torch.tensor(2.0 * rows.y.to_numpy() - 1.0, dtype=torch.float32)[:, None]
    return X, y


def loader(X: torch.Tensor, y: torch.Tensor) -> DataLoader:
    return DataLoader(TensorDataset(X, y), batch_size=BATCH, shuffle=False)


def suit(model, delta, loss_fn, train, val, lr: float, regularised: bool) -> sml.ModelSuit:
    return sml.ModelSuit(
        model=model,
        delta=delta,
        loss_fn=loss_fn,
        linear_regularization=[sml.LinearL2Regularization(0.0003)] if regularised else None,
        train_loader=loader(*train),
        validation_loader=loader(*val),
        test_loader=loader(*val),
        training_params={"optimizer_class": optim.Adam, "optimizer_params": {"lr": lr}},
    )


def zero_one(model, X, y) -> float:
    """Their validation zero-one loss: on the rows as they are."""
    with torch.no_grad():
        return float((torch.sign(model(X)) != y).float().mean())


def accuracy_under_response(model, X, y) -> float:
    """Share right after everyone rejected responds by their delta."""
    delta = sml.LinearStrategicDelta(cost=sml.CostNormL2(dim=1), strategic_model=model)
    with torch.no_grad():
        return float((torch.sign(model(delta(X))) == y).float().mean())


def train_loop(s: sml.ModelSuit, epochs: int, val=None, on_epoch=None, stop=True) -> int | None:
    """ModelSuit's automatic optimisation, epoch by epoch; with `val`, their early stopping
    (no improvement of the validation zero-one loss in PATIENCE epochs: the run ends
    there, or with `stop` False goes on to `epochs`). Returns the epoch early stopping
    stopped at (None: not within `epochs`)."""
    opt = s.configure_optimizers()
    best, wait, stopped = np.inf, 0, None
    for epoch in range(1, epochs + 1):
        for i, (x, y) in enumerate(s.train_dataloader()):
            opt.zero_grad()
            loss, _ = s._calculate_loss_and_predictions(x=x, y=y, batch_idx=i, mode=s._Mode.TRAIN)
            loss.backward()
            opt.step()
        if val is not None and stopped is None:
            loss01 = zero_one(s.model, *val)
            best, wait = (loss01, 0) if loss01 < best else (best, wait + 1)
            if wait >= PATIENCE:
                stopped = epoch
        if on_epoch is not None:
            on_epoch(epoch, stopped)
        if stop and stopped is not None:
            break
    return stopped


def lbfgs(s: sml.ModelSuit, X, y) -> None:
    """Their loss (ModelSuit's computation) on all of (X, y) at once, minimised by L-BFGS."""
    opt = optim.LBFGS(
        s.model.parameters(),
        max_iter=500,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure():
        opt.zero_grad()
        loss, _ = s._calculate_loss_and_predictions(x=X, y=y, batch_idx=0, mode=s._Mode.TRAIN)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)


def theta(model) -> tuple[float, float, float]:
    w, b = model.get_weight_and_bias()
    return float(w[0, 0]), float(w[0, 1]), float(b[0])


def s_hinge(start=((1.0, 0.0), -10.0)):
    model = sml.LinearModel(2, weight=torch.tensor([start[0]]), bias=torch.tensor([start[1]]))
    delta = sml.LinearStrategicDelta(cost=sml.CostNormL2(dim=1), strategic_model=model)
    return model, delta, sml.StrategicHingeLoss(model, delta)


def check_against_trainer(train, val, epochs: int = 3) -> float:
    """The plain loop equals a real Lightning Trainer on ModelSuit (first arm's set-up):
    the largest difference of θ after `epochs` epochs."""
    import pytorch_lightning as pl

    thetas = []
    for lightning in (True, False):
        model, delta, loss = s_hinge()
        s = suit(model, delta, loss, train, val, lr=0.005, regularised=True)
        if lightning:
            pl.Trainer(
                max_epochs=epochs,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                accelerator="cpu",
                devices=1,
            ).fit(s)
        else:
            train_loop(s, epochs)
        thetas.append(np.array(theta(model)))
    return float(np.abs(thetas[0] - thetas[1]).max())


def run_seed(people: pd.DataFrame, seed: int) -> list[dict]:
    rows = []
    train = tensors(people[people.part == "train"])
    rounds = sorted(int(p) for p in people.part.unique() if p != "train")
    cohorts = {r: people[people.part == str(r)] for r in rounds}
    val = tensors(cohorts[2])  # their early stopping watches another cohort: round 2's

    def record(arm, model, r, epochs=None):
        X, y = tensors(cohorts[r])
        rows.append(
            {
                "seed": seed,
                "arm": arm,
                "round": r,
                "acc_under_response": accuracy_under_response(model, X, y),
                "coef_1": theta(model)[0],
                "coef_2": theta(model)[1],
                "intercept": theta(model)[2],
                "epochs": epochs,
            }
        )

    # the Stackelberg model, their blob test's loop; its state at the early stop kept
    model, delta, loss = s_hinge()
    s = suit(model, delta, loss, train, val, lr=0.005, regularised=True)

    def at_epoch(epoch, stopped):
        if stopped == epoch:
            record("s_hinge_early_stop", model, 1, epoch)

    stopped = train_loop(s, MAX_EPOCHS, val=val, on_epoch=at_epoch, stop=False)
    if stopped is None:
        record("s_hinge_early_stop", model, 1, MAX_EPOCHS)
    record("s_hinge_100_epochs", model, 1, MAX_EPOCHS)
    model, delta, loss = s_hinge()
    lbfgs(suit(model, delta, loss, train, val, lr=0.005, regularised=True), *train)
    record("s_hinge_lbfgs", model, 1)
    ours = cohorts[1].iloc[0]
    model = sml.LinearModel(
        2,
        weight=torch.tensor([[ours.ours_coef_1, ours.ours_coef_2]], dtype=torch.float32),
        bias=torch.tensor([ours.ours_intercept], dtype=torch.float32),
    )
    record("ours_under_their_response", model, 1)

    # the plain model and repeated retraining with each loss
    for name, loss_fn in (("", PlusOneBCE()), ("_logistic", LogisticBCE())):
        torch.manual_seed(seed)
        model = sml.LinearModel(2)
        identity = sml.IdentityDelta(cost=None, strategic_model=model)
        s = suit(model, identity, loss_fn, train, val, 0.01, False)
        epochs = train_loop(s, MAX_EPOCHS, val=val)
        record(f"plain{name}", model, 1, epochs or MAX_EPOCHS)
        starts = {"warm": theta(model)}
        lbfgs(s, *train)  # on from there to the minimiser
        record(f"plain{name}_exact", model, 1)
        starts["exact"] = theta(model)
        for rule, start in starts.items():
            model = sml.LinearModel(
                2, weight=torch.tensor([start[:2]]), bias=torch.tensor([start[2]])
            )
            identity = sml.IdentityDelta(cost=None, strategic_model=model)
            for r in rounds:
                record(f"rrm{name}_{rule}", model, r)  # the model deployed in round r
                X, y = tensors(cohorts[r])
                moved = sml.LinearStrategicDelta(cost=sml.CostNormL2(dim=1), strategic_model=model)
                with torch.no_grad():
                    X_moved = moved(X)
                s = suit(model, identity, loss_fn, (X_moved, y), val, 0.01, False)
                if rule == "warm":
                    train_loop(s, RRM_EPOCHS)
                else:
                    lbfgs(s, X_moved, y)
    return rows


def main(people_csv: str, out_csv: str) -> None:
    wall, cpu = time.perf_counter(), time.process_time()
    people = pd.read_csv(people_csv, dtype={"part": str})
    first = people[people.seed == people.seed.min()]
    gap = check_against_trainer(
        tensors(first[first.part == "train"]), tensors(first[first.part == "2"])
    )
    assert gap < 1e-5, f"the plain loop differs from Lightning's by {gap}"
    rows = []
    for seed in sorted(people.seed.unique()):
        rows += run_seed(people[people.seed == seed], int(seed))
        print(f"seed {seed}: {time.process_time() - cpu:.0f} s CPU so far", flush=True)
    out = pd.DataFrame(rows)
    out["trainer_check"] = gap
    out["run_wall_s"] = time.perf_counter() - wall
    out["run_cpu_s"] = time.process_time() - cpu
    out.to_csv(out_csv, index=False, float_format="%.6g")
    print(f"wrote {out_csv} ({out.run_wall_s[0]:.0f} s wall, {out.run_cpu_s[0]:.0f} s CPU)")


if __name__ == "__main__":
    main(*sys.argv[1:3])
