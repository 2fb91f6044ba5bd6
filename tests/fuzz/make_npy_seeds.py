"""make_npy_seeds.py — writes the seed .npy files of fuzz_npy into a folder.

Every dtype runtime/npy.h reads (both byte orders where it has two, '=' and
'|' spellings), ranks 0 to 3 including empty dims, a version 2.0 header, a
fortran-order file (rejected: it makes the fuzzer reach that branch) and an
object-array-like descr (rejected). Values are seeded random, never zeros.
Usage: make_npy_seeds.py OUT_DIR"""
import os
import sys

import numpy as np


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1234)
    dtypes = ["<f4", ">f4", "<f8", ">f8", "<f2", "|i1", "<i2", ">i2", "<i4", "<i8", ">i8",
              "|u1", "<u2", "<u4", "<u8", "|b1", "=f4", "=i4"]
    shapes = [(), (3,), (2, 3), (2, 1, 4), (0,), (2, 0, 3)]
    for i, dt in enumerate(dtypes):
        for j, shape in enumerate(shapes):
            if (i + j) % 2 and shape:  # every dtype at rank 0 and a few others
                continue
            x = rng.standard_normal(shape) * 50 + 1
            a = (x > 1) if dt.endswith("b1") else x.astype(np.dtype(dt))
            np.save(os.path.join(out, f"s{i:02d}_{j}.npy"), np.asarray(a, dtype=np.dtype(dt)))
    a = rng.standard_normal((2, 3)).astype("<f4")
    with open(os.path.join(out, "v2.npy"), "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    with open(os.path.join(out, "v3.npy"), "wb") as f:
        np.lib.format.write_array(f, a, version=(3, 0))
    np.save(os.path.join(out, "fortran.npy"), np.asfortranarray(rng.standard_normal((3, 2))))
    with open(os.path.join(out, "complex.npy"), "wb") as f:
        np.lib.format.write_array(f, (rng.standard_normal(3) + 1j).astype("<c8"))


if __name__ == "__main__":
    main()
