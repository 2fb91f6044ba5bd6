"""Prints what a training bundle's program.json holds for the gradient norm
(grad_norm_multi_tensor.test): the kernel count, and each multi-tensor
reduction (a kernel whose segments have their own inner extents): its
segments, their elements in all, and whether each reads a tensor of that
many elements (its template's first param)."""
import json
import sys

with open(sys.argv[1]) as f:
    p = json.load(f)
kernels = p["kernels"]
print(f"kernels {len(kernels)}")
for k in kernels:
    sg = k.get("segments")
    if not sg or "inners" not in sg:
        continue
    inners, per = sg["inners"], sg["params"]
    reads = [k["params"][s * per]["numel"] for s in range(len(inners))]
    print(f"reduction {k['name']}: {len(inners)} segments, {sum(inners)} elements, "
          f"inner {k['inner']}, each its tensor's length: {reads == inners}")
