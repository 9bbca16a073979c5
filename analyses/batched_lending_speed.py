"""Steps per second of Lending-v1 in the native batched env against the synchronous loop
it replaced (a `SyncVectorEnv` of B `RecourseEnv`), measured in one run.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python analyses/batched_lending_speed.py [--worlds 16]

Both play the same B worlds (seeds 0..B-1) through one 20-round episode of the same
random actions after a reset (resets are not timed), in `pairs` interleaved blocks of
rounds, so that a loaded machine slows both alike. Prints env steps per second (every
world's step counted) by wall clock and by the process's CPU time, and their ratios.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from recourse_sim.env import RecourseEnv
from recourse_sim.env.batched import BatchedRecourseEnv

SCENARIO = "lending_fico_controlled"  # recourse_sim/Lending-v1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=16, help="B, worlds stepped together")
    parser.add_argument("--blocks", type=int, default=4, help="interleaved blocks of rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    B = args.worlds
    batched = BatchedRecourseEnv(B, SCENARIO)
    sync = gym.vector.SyncVectorEnv([lambda: RecourseEnv(SCENARIO) for _ in range(B)])
    rounds = batched.envs[0].scenario.rounds
    actions = np.random.default_rng(0).uniform(-1, 1, (rounds, *batched.action_space.shape))
    actions = actions.astype(np.float32)
    batched.reset(seed=0)
    sync.reset(seed=0)
    spent = {"batched": [0.0, 0.0], "sync": [0.0, 0.0]}  # wall, CPU seconds
    for block in np.array_split(np.arange(rounds), args.blocks):
        for name, venv in (("batched", batched), ("sync", sync)):
            wall, cpu = time.perf_counter(), time.process_time()
            for t in block:
                venv.step(actions[t])
            spent[name][0] += time.perf_counter() - wall
            spent[name][1] += time.process_time() - cpu
    steps = rounds * B
    rate = {name: (steps / w, steps / c) for name, (w, c) in spent.items()}
    print(f"Lending-v1, B = {B} worlds x {rounds} rounds ({steps} env steps each)")
    for name, (w, c) in rate.items():
        print(f"  {name:>8}: {w:8.1f} steps/s wall, {c:8.1f} steps/s CPU")
    print(
        f"  speed-up: {rate['batched'][0] / rate['sync'][0]:.1f}x wall, "
        f"{rate['batched'][1] / rate['sync'][1]:.1f}x CPU"
    )
    print(
        f"  time: wall {sum(w for w, _ in spent.values()):.1f} s, "
        f"CPU {sum(c for _, c in spent.values()):.1f} s"
    )


if __name__ == "__main__":
    main()
