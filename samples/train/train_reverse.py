"""train_reverse.py — the tiny reverse-digits transformer of `make demo`,
trained from Python (docs/python.md shows this file). argv[1]: the folder
samples/train/make_reverse.py wrote."""
import sys

import numpy as np

import shardc

d = sys.argv[1]
xs, ys = np.load(f"{d}/train_x.npy"), np.load(f"{d}/train_y.npy")
m = shardc.load(f"{d}/reverse.onnx", dims={"batch": 32})
print(m.summary())

# AdamW, a warm-up of 30 steps then cosine decay: `shardc train --optimizer
# adamw --lr 3e-3 --weight-decay 0 --lr-schedule cosine --warmup-steps 30`
cfg = shardc.TrainConfig(optimizer="adamw", lr=3e-3, weight_decay=0.0, schedule="cosine",
                         warmup_steps=30, total_steps=600)
exe = shardc.compile(m, train=cfg)
B, losses = 32, []
for step in range(600):
    i = step * B % len(xs)           # the CLI's batches: examples i .. i+B-1
    out = exe.step({"x": xs[i:i + B]}, labels=ys[i:i + B])
    losses.append(out.loss)
    if out.step in (1, 10, 50, 100, 200, 300, 400, 500, 600):
        print(f"step {out.step:3d}  loss {out.loss:.4f}  lr {out.lr:.2e}  "
              f"grad_norm {out.grad_norm:.3f}  {out.time * 1e3:.2f} ms")

exe.save(f"{d}/py_checkpoint")        # safetensors, as `shardc train --save`
exe.export(f"{d}/py_trained.onnx")    # the model with the trained weights

# the exported model, for inference: a dict of arrays in, a dict out
test_x, digits = np.load(f"{d}/test_x.npy"), np.load(f"{d}/test_digits.npy")
net = shardc.compile(shardc.load(f"{d}/py_trained.onnx", dims={"batch": len(test_x)}))
pred = net.run({"x": test_x})["logits"].argmax(-1)
for s, p in zip(digits, pred):
    ok = (p == s[::-1]).all()
    print(f"  {''.join(map(str, s))} -> {''.join(map(str, p))}  {'reversed' if ok else 'not yet'}")
right = sum(bool((p == s[::-1]).all()) for s, p in zip(digits, pred))
print(f"loss {losses[0]:.3f} at step 1, {np.mean(losses[-20:]):.4f} (mean of the last 20); "
      f"{right} of {len(digits)} unseen sequences reversed exactly")
sys.exit(0 if np.mean(losses[-20:]) < 0.5 * losses[0] else 1)
