"""A small real training job: logistic regression with numpy on synthetic data.

It reports loss and accuracy every step through `starforge.report`, writes a checkpoint into
FORGE_OUT_DIR every few steps, and resumes from the latest checkpoint when one exists (so a paused
or retried run continues where it stopped instead of starting again from step 0).
"""

import json
import os
import pathlib
import sys
import time

import numpy as np
import starforge

config = json.loads(pathlib.Path(os.environ["FORGE_CONFIG"]).read_text()) if os.environ.get("FORGE_CONFIG") else {}
steps = int(config.get("steps", 60))
lr = float(config.get("lr", 0.5))
step_seconds = float(config.get("step_seconds", 0.05))
checkpoint_every = int(config.get("checkpoint_every", 10))

rng = np.random.default_rng(0)
n, d = 4000, 20
true_w = rng.normal(size=d)
x = rng.normal(size=(n, d))
y = (x @ true_w + 0.5 * rng.normal(size=n) > 0).astype(np.float64)

ckpt_dir = pathlib.Path(os.environ.get("FORGE_OUT_DIR", "out")) / "checkpoints"
ckpt_dir.mkdir(parents=True, exist_ok=True)
w = np.zeros(d)
start = 0
latest = sorted(ckpt_dir.glob("step-*.npz"), key=lambda p: int(p.stem.split("-")[1]))
if latest:
    state = np.load(latest[-1])
    w, start = state["w"], int(state["step"])
    print(f"resuming from {latest[-1].name} (step {start})", flush=True)
else:
    print(f"training logistic regression: {n} samples, {d} features, {steps} steps", flush=True)

for step in range(start + 1, steps + 1):
    p = 1.0 / (1.0 + np.exp(-(x @ w)))
    loss = float(-np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)))
    acc = float(np.mean((p > 0.5) == y))
    w -= lr * (x.T @ (p - y)) / n
    starforge.report(step=step, loss=loss, accuracy=acc)
    print(f"step {step:3d}  loss {loss:.4f}  accuracy {acc:.3f}", flush=True)
    if step % checkpoint_every == 0 or step == steps:
        np.savez(ckpt_dir / f"step-{step}.npz", w=w, step=step)
    time.sleep(step_seconds)

print(f"done: final loss {loss:.4f}, accuracy {acc:.3f}; checkpoint in {ckpt_dir}", flush=True)
sys.exit(0)
