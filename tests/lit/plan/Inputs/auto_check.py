"""Checks of `shardc plan [--train] --auto --json` (tests/lit/plan/auto.test,
auto_infer.test, auto_cp.test, auto_cp_compose.test, auto_cp_padding.test,
auto_ep.test).

  auto_check.py check SHARDC MODEL AUTO.json TMP
      the chosen plan is exact ("simulated", the path of plan --train --mesh)
      and fits its memory; the candidates evaluated exactly ("exact": true,
      at least two) have simulated figures, and the chosen one is the
      fastest of them that fits; the others are the block model's
      estimates, best first; the counts are there. Then the chosen
      plan's options given to `plan --train --cluster C --mesh ... --json`
      predict the same object, and the plan file written from
      auto.chosen.plan replayed with --plan (and the recompute and training
      options, which the plan file does not hold) predicts it again.
      A --reduce-dtype in the replay is in the plan file
      (training.reduce_dtype), and so is a pipeline's cut, its
      --stage-boundaries (pipeline.boundaries, auto.chosen.boundaries).
  auto_check.py infer SHARDC MODEL AUTO.json TMP
      an inference search (no --train): the same checks of the chosen plan
      and of the exactly evaluated ones, by the objective (latency: the
      step; throughput: the step per dp replica), every candidate an
      inference plan (no fsdp, no ZeRO, GPipe, no recompute); the replay
      through --mesh and through the plan file with --plan predicts the
      chosen object again.
  auto_check.py cp SHARDC MODEL AUTO.json TMP
      a long sequence where only context parallelism fits the budget: the
      chosen plan has cp > 1 (auto.chosen.mesh.cp, its plan file's mesh
      axes naming cp), fits the limit exactly, its simulated step has
      exposed cp communication (the ring's sends), and it replays through --mesh
      and through its plan file with --plan to the same prediction; its
      estimate equals `plan --train --estimate` of the same options; every
      candidate without cp, compiled exactly (`plan --train --mesh` of its
      options where the search only estimated it), is over the limit.
  auto_check.py ep SHARDC MODEL AUTO.json TMP
      a mixture-of-experts model where expert parallelism wins: the chosen
      plan has ep > 1 (auto.chosen.mesh.ep, its plan file's mesh axes
      naming ep), fits the limit exactly, its simulated step and its
      estimate both have ep communication (the all-to-alls), it replays
      through --mesh and through its plan file with --plan to the same
      prediction, and its estimate equals `plan --train --estimate` of the
      same options; every candidate without ep, compiled exactly, is over
      the limit or slower than the chosen plan, and so is (when the chosen
      mesh is ep alone) each mesh giving ep's ranks to dp, fsdp (ZeRO 1,
      2, 3) or tp.
  auto_check.py etp SHARDC MODEL AUTO.json TMP
      a mixture-of-experts model whose experts fit only split over tp as
      well: the chosen plan has tp > 1 and expert tensor parallelism
      (auto.chosen.expert_tensor_parallel, --expert-tensor-parallel in its
      options, tensor_parallel.expert_tensor_parallel in its plan file),
      fits the limit exactly, replays through --mesh and through its plan
      file with --plan to the same prediction, and its estimate equals
      `plan --train --estimate` of the same options; the same options
      without --expert-tensor-parallel, and every candidate without it,
      compiled exactly, are over the limit or slower.
  auto_check.py composed SHARDC MODEL AUTO.json TMP KIND
      cp composed with another axis among the candidates evaluated
      exactly: KIND cp (cp > 1, beside anything: a padded sequence's),
      pp_cp (pp > 1 and cp > 1) or tp_cp_sp (tp > 1 and
      cp > 1 with sequence parallelism), or ep (ep > 1, an inference
      search's); at least one such, each with simulated figures, exposed
      communication on cp (ep), that `plan [--train] --mesh` of its options
      (the chosen plan's replay with its options in place of the
      chosen's) predicts again, field for field.
  auto_check.py replayed A.json B.json
      two `plan --json` outputs (a plan and its replay through --plan)
      predict the same object.
  auto_check.py dense AUTO.json
      a model without experts: no candidate (nor the chosen plan) has
      ep > 1, and none was pruned for ep.
  auto_check.py faster A.json B.json
      B's report compares its chosen plan with the best on half its GPUs
      (auto.fewer_devices: exact against exact when that cluster's plans
      were compiled, else estimates): "slower" exactly when the chosen
      plan is predicted slower than that best, with the reason. B's chosen
      plan (more GPUs, the same batch) is predicted no slower than A's, or
      B's report says why (fewer_devices.slower).
  auto_check.py same A.json B.json
      the same command twice: the same JSON apart from the time fields
      (the choice does not depend on the machine's load).
"""
import json
import shlex
import subprocess
import sys


def load(path):
    with open(path) as f:
        return json.load(f)["auto"]


def predicted_of(shardc, model, args):
    out = subprocess.run([shardc, "plan", model] + args + ["--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["predicted"]


def replays(shardc, model, ch, tmp):
    """The chosen plan's mesh and options given by --mesh predict its
    object; so does its plan file replayed with --plan and the training
    options (which the plan file does not hold). Returns the replay's
    arguments."""
    p = ch["predicted"]
    replay = shlex.split(ch["replay"])
    got = predicted_of(shardc, model, replay)
    assert got == p, (got, p)
    with open(tmp + ".plan.json", "w") as f:
        json.dump(ch["plan"], f)
    train = []
    skip = {"--cluster", "--mesh", "--zero", "--schedule", "--virtual-stages",
            "--microbatches", "--reduce-dtype", "--stage-boundaries"}
    i = 0
    while i < len(replay):
        if replay[i] == "--reduce-dtype":  # the plan file holds it
            assert ch["plan"]["training"]["reduce_dtype"] == replay[i + 1], ch["plan"]["training"]
        if replay[i] == "--stage-boundaries":  # so does it the pipeline's cut
            cut = ch["plan"]["pipeline"]["boundaries"]
            assert cut == ch["boundaries"] == replay[i + 1].split(","), (cut, ch["boundaries"])
        if replay[i] in skip:
            i += 2
            continue
        if replay[i] in ("--sequence-parallel", "--expert-tensor-parallel"):
            i += 1  # the plan file holds them
            continue
        train.append(replay[i])
        i += 1
    got = predicted_of(shardc, model, ["--plan", tmp + ".plan.json"] + train)
    assert got == p, (got, p)
    return replay


def chosen_with(axis, shardc, model, path, tmp):
    """The chosen plan has axis > 1 (in auto.chosen.mesh and its plan
    file's mesh axes), fits the limit exactly, its simulated step has
    exposed communication on axis, it replays through --mesh and --plan,
    and its estimate equals `plan --train --estimate` of its options.
    Returns (auto, chosen, its prediction, the limit)."""
    a = load(path)
    ch, limit = a["chosen"], a["memory_limit_bytes"]
    p = ch["predicted"]
    assert ch["mesh"][axis] > 1, ch["mesh"]
    assert "%s=%d" % (axis, ch["mesh"][axis]) in ch["plan"]["mesh"]["axes"], ch["plan"]["mesh"]
    assert p["source"] == "simulated" and p["fits"] and 0 < p["peak_bytes_per_rank"] <= limit, p
    assert p["step_time_s"] > 0 and p["breakdown"]["exposed_comm_s"].get(axis, 0) > 0, p
    replay = replays(shardc, model, ch, tmp)
    out = subprocess.run([shardc, "plan", model, "--estimate"] + replay + ["--json"],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["estimate"] == ch["estimate"], (json.loads(out)["estimate"],
                                                          ch["estimate"])
    return a, ch, p, limit


def cp(shardc, model, path, tmp):
    # the simulated ring: its shifted sends cost time on the cp group's queue
    a, ch, p, limit = chosen_with("cp", shardc, model, path, tmp)
    # every candidate without cp, compiled exactly, is over the limit
    least = None
    for c in a["candidates"]:
        if c["mesh"]["cp"] > 1:
            continue
        peak = c["predicted"]["peak_bytes_per_rank"]
        if not c["exact"]:
            args = shlex.split(ch["replay"].replace(ch["options"], c["options"]))
            peak = predicted_of(shardc, model, args)["peak_bytes_per_rank"]
        assert peak > limit, (c["options"], peak, limit)
        least = peak if least is None else min(least, peak)
    assert least is not None, "no candidate without cp"
    print("cp ok: %s, %d bytes a rank, limit %d; without cp at least %d"
          % (ch["options"], p["peak_bytes_per_rank"], limit, least))


def ep(shardc, model, path, tmp):
    # the all-to-alls, simulated and estimated
    a, ch, p, limit = chosen_with("ep", shardc, model, path, tmp)
    assert ch["estimate"]["breakdown"]["exposed_comm_s"].get("ep", 0) > 0, ch["estimate"]
    # every candidate without ep, compiled exactly, is over the limit or slower
    others = 0
    for c in a["candidates"]:
        if c["mesh"]["ep"] > 1:
            continue
        q = c["predicted"]
        if not c["exact"]:
            args = shlex.split(ch["replay"].replace(ch["options"], c["options"]))
            q = predicted_of(shardc, model, args)
        assert q["peak_bytes_per_rank"] > limit or q["step_time_s"] > p["step_time_s"], (
            c["options"], q["peak_bytes_per_rank"], q["step_time_s"], limit, p["step_time_s"])
        others += 1
    # and the meshes that give ep's ranks to dp, fsdp (each ZeRO stage)
    # or tp, where the chosen mesh is ep alone (the search may have pruned
    # them by its bound)
    m = ch["mesh"]
    if all(m[k] == 1 for k in m if k != "ep"):
        tail = ch["options"][len("--mesh ep=%d" % m["ep"]):]
        for alt in ("dp", "fsdp --zero 1", "fsdp --zero 2", "fsdp --zero 3", "tp"):
            name, _, zero = alt.partition(" ")
            opts = "--mesh %s=%d %s%s" % (name, m["ep"], zero + " " if zero else "", tail.strip())
            args = shlex.split(ch["replay"].replace(ch["options"], opts))
            q = predicted_of(shardc, model, args)
            assert q["peak_bytes_per_rank"] > limit or q["step_time_s"] > p["step_time_s"], (
                opts, q["peak_bytes_per_rank"], q["step_time_s"], limit, p["step_time_s"])
            others += 1
    assert others > 0, "no candidate without ep"
    print("ep ok: %s, %.6f s, %d bytes a rank, limit %d; %d plans without ep slower or over"
          % (ch["options"], p["step_time_s"], p["peak_bytes_per_rank"], limit, others))


def etp(shardc, model, path, tmp):
    a = load(path)
    ch, limit = a["chosen"], a["memory_limit_bytes"]
    p = ch["predicted"]
    assert ch["mesh"]["tp"] > 1 and ch["expert_tensor_parallel"], ch
    assert "--expert-tensor-parallel" in shlex.split(ch["options"]), ch["options"]
    assert ch["plan"]["tensor_parallel"]["expert_tensor_parallel"] is True, ch["plan"]
    assert p["source"] == "simulated" and p["fits"] and 0 < p["peak_bytes_per_rank"] <= limit, p
    replay = replays(shardc, model, ch, tmp)
    out = subprocess.run([shardc, "plan", model, "--estimate"] + replay + ["--json"],
                         check=True, capture_output=True, text=True).stdout
    assert json.loads(out)["estimate"] == ch["estimate"], (json.loads(out)["estimate"],
                                                          ch["estimate"])
    # the same plan with the experts whole over tp, and every candidate
    # without the option, compiled exactly: over the limit or slower
    whole = ch["options"].replace(" --expert-tensor-parallel", "")
    others = [whole] + [c["options"] for c in a["candidates"]
                        if not c["expert_tensor_parallel"]]
    for opts in others:
        args = shlex.split(ch["replay"].replace(ch["options"], opts))
        q = predicted_of(shardc, model, args)
        assert q["peak_bytes_per_rank"] > limit or q["step_time_s"] > p["step_time_s"], (
            opts, q["peak_bytes_per_rank"], q["step_time_s"], limit, p["step_time_s"])
    q = predicted_of(shardc, model, shlex.split(ch["replay"].replace(ch["options"], whole)))
    print("etp ok: %s, %.6f s, %d bytes a rank, limit %d; without the option %.6f s, %d "
          "bytes; %d plans without it over or slower"
          % (ch["options"], p["step_time_s"], p["peak_bytes_per_rank"], limit,
             q["step_time_s"], q["peak_bytes_per_rank"], len(others)))


def composed(shardc, model, path, tmp, kind):
    a = load(path)
    ch = a["chosen"]

    axis = "ep" if kind == "ep" else "cp"

    def of_kind(c):
        m = c["mesh"]
        if kind == "ep":
            return m["ep"] > 1
        if kind == "cp":
            return m["cp"] > 1
        if kind == "pp_cp":
            return m["pp"] > 1 and m["cp"] > 1
        return m["tp"] > 1 and m["cp"] > 1 and c["sequence_parallel"]

    listed = [c for c in a["candidates"] if of_kind(c)]
    assert listed, [(c["options"], c["exact"]) for c in a["candidates"]]
    found = [c for c in listed if c["exact"]]
    if not found and kind == "tp_cp_sp":
        # searched, but ranked by the estimate below the meshes compiled:
        # built as plan --train --mesh builds it, the ring on the cp queue
        c = listed[0]
        args = shlex.split(ch["replay"].replace(ch["options"], c["options"]))
        p = predicted_of(shardc, model, args)
        assert p["source"] == "simulated" and p["step_time_s"] > 0, p
        assert p["breakdown"]["exposed_comm_s"].get(axis, 0) > 0, p
        print("%s ok (listed, built by --mesh): %s, step %.6g s, %d bytes a rank" % (
            kind, c["options"], p["step_time_s"], p["peak_bytes_per_rank"]))
        return
    assert found, [(c["options"], c["exact"]) for c in a["candidates"]]
    for c in found:
        p = c["predicted"]
        assert p["source"] == "simulated" and p["step_time_s"] > 0, p
        assert p["breakdown"]["exposed_comm_s"].get(axis, 0) > 0, p
        args = shlex.split(ch["replay"].replace(ch["options"], c["options"]))
        got = predicted_of(shardc, model, args)
        assert got == p, (c["options"], got, p)
        print("%s ok: %s, step %.6g s, %d bytes a rank" % (
            kind, c["options"], p["step_time_s"], p["peak_bytes_per_rank"]))


def replayed(pa, pb):
    with open(pa) as f:
        a = json.load(f)["predicted"]
    with open(pb) as f:
        b = json.load(f)["predicted"]
    assert a == b and a["step_time_s"] > 0, (a, b)
    print("replayed: step %.6g s" % a["step_time_s"])


def dense(path):
    a = load(path)
    for c in a["candidates"] + [a["chosen"]]:
        assert c["mesh"]["ep"] == 1, c["options"]
        assert "ep=" not in c["options"], c["options"]
    assert a["pruned"]["ep"] == 0, a["pruned"]
    print("dense ok: %d candidates, none with ep" % len(a["candidates"]))


def check(shardc, model, path, tmp):
    a = load(path)
    for k in ("time_s", "search_time_s", "exact_time_s", "candidates_evaluated",
              "candidates_pruned"):
        assert k in a, k
    assert a["candidates_evaluated"] > 0 and a["candidates_pruned"] > 0, a
    assert sum(a["pruned"].values()) == a["candidates_pruned"], a["pruned"]
    ch, cands = a["chosen"], a["candidates"]
    p = ch["predicted"]
    assert p["source"] == "simulated", p
    assert p["fits"] and 0 < p["peak_bytes_per_rank"] <= a["memory_limit_bytes"], p
    assert p["step_time_s"] > 0 and 0 < p["mfu"] < 1, p
    assert set(ch["mesh"]) == {"dp", "fsdp", "tp", "pp", "cp", "ep"}, ch["mesh"]
    assert ch["estimate"]["source"] == "estimate"
    first = [c for c in cands if c["why"] == "chosen"]
    assert len(first) == 1 and first[0]["predicted"] == p, first
    assert first[0]["options"] == ch["options"]
    assert first[0]["exact"], first
    # the exactly evaluated ones: their figures simulated, their estimate
    # beside them; the chosen one is the exact fastest of those that fit
    exact = [c for c in cands if c["exact"]]
    assert 2 <= len(exact) == a["exact_evaluated"], (len(exact), a["exact_evaluated"])
    for c in exact:
        assert c["predicted"]["source"] == "simulated", c
        assert c["estimate"]["source"] == "estimate", c
        if c["predicted"]["peak_bytes_per_rank"] <= a["memory_limit_bytes"]:
            assert p["step_time_s"] <= c["predicted"]["step_time_s"], (ch["options"], c["options"])
    est = [c for c in cands if not c["exact"]]
    assert est and all(c["predicted"]["source"] == "estimate" for c in est)
    steps = [c["predicted"]["step_time_s"] for c in est]
    assert steps == sorted(steps), steps
    replays(shardc, model, ch, tmp)
    print("auto ok: %s, %d evaluated, %d pruned" % (ch["options"], a["candidates_evaluated"],
                                                    a["candidates_pruned"]))


def offload(shardc, model, path, tmp):
    """--auto chose activation offloading where only it fits: the chosen
    plan offloads, fits the memory limit exactly, replays through --mesh
    and through its plan file with --plan (and the training options, which
    hold --offload-activations) to the same prediction, and the same plan
    compiled without offloading does not fit; every candidate without
    offloading is over by the estimate."""
    a = load(path)
    ch = a["chosen"]
    limit = a["memory_limit_bytes"]
    p = ch["predicted"]
    assert ch["offload_activations"] is True and "--offload-activations" in ch["options"], ch
    assert ch["host_bytes"] > 0, ch
    assert p["source"] == "simulated" and p["fits"] and p["peak_bytes_per_rank"] <= limit, p
    replay = shlex.split(ch["replay"])
    assert predicted_of(shardc, model, replay) == p
    with open(tmp + ".plan.json", "w") as f:
        json.dump(ch["plan"], f)
    skip = {"--cluster", "--mesh", "--zero", "--schedule", "--virtual-stages", "--microbatches"}
    train, i = [], 0
    while i < len(replay):
        if replay[i] in skip:
            i += 2
            continue
        train.append(replay[i])
        i += 1
    assert "--offload-activations" in train, train
    assert predicted_of(shardc, model, ["--plan", tmp + ".plan.json"] + train) == p
    plain = predicted_of(shardc, model, [x for x in replay if x != "--offload-activations"])
    assert plain["peak_bytes_per_rank"] > limit, (plain, limit)
    for c in a["candidates"]:
        if not c["offload_activations"]:
            assert not c["predicted"]["fits"], c["options"]
    print("offload ok: %s, %d bytes exact against %d without offloading, limit %d"
          % (ch["options"], p["peak_bytes_per_rank"], plain["peak_bytes_per_rank"], limit))


def infer(shardc, model, path, tmp):
    a = load(path)
    assert a["objective"] in ("latency", "throughput"), a["objective"]
    assert a["candidates_evaluated"] > 0, a
    assert sum(a["pruned"].values()) == a["candidates_pruned"], a["pruned"]
    ch, cands = a["chosen"], a["candidates"]
    p = ch["predicted"]
    assert p["source"] == "simulated", p
    assert p["fits"] and 0 < p["peak_bytes_per_rank"] <= a["memory_limit_bytes"], p
    assert p["step_time_s"] > 0 and p["tokens_per_s"] > 0, p

    def objective(c):
        t = c["predicted"]["step_time_s"]
        return t / c["mesh"]["dp"] if a["objective"] == "throughput" else t

    for c in cands + [ch]:
        m = c["mesh"]
        assert m["fsdp"] == 1 and c["zero"] == 0 and c["recompute"] == "none", c
        assert c["schedule"] == "gpipe", c
        assert "--zero" not in c["options"] and "--recompute" not in c["options"], c["options"]
    first = [c for c in cands if c["why"] == "chosen"]
    assert len(first) == 1 and first[0]["predicted"] == p and first[0]["exact"], first
    exact = [c for c in cands if c["exact"]]
    assert 2 <= len(exact) == a["exact_evaluated"], (len(exact), a["exact_evaluated"])
    for c in exact:
        assert c["predicted"]["source"] == "simulated", c
        if c["predicted"]["peak_bytes_per_rank"] <= a["memory_limit_bytes"]:
            assert objective(first[0]) <= objective(c), (ch["options"], c["options"])
    est = [c for c in cands if not c["exact"]]
    objs = [objective(c) for c in est]
    assert objs == sorted(objs), objs
    replay = shlex.split(ch["replay"])
    assert "--train" not in replay, replay
    got = predicted_of(shardc, model, replay)
    assert got == p, (got, p)
    with open(tmp + ".plan.json", "w") as f:
        json.dump(ch["plan"], f)
    dims = [replay[i + 1]
            for i in range(len(replay) - 1) if replay[i] == "--dim"]
    args = ["--plan", tmp + ".plan.json", "--no-weights"]
    for d in dims:
        args += ["--dim", d]
    got = predicted_of(shardc, model, args)
    assert got == p, (got, p)
    print("auto %s ok: %s, batch %s, %d evaluated, %d pruned" % (
        a["objective"], ch["options"], dims, a["candidates_evaluated"], a["candidates_pruned"]))


def faster(pa, pb):
    a, bj = load(pa)["chosen"]["predicted"], load(pb)
    b, f = bj["chosen"]["predicted"], bj["fewer_devices"]
    assert f["searched"] and f["why"], f
    # the report's comparison: exact against exact when the smaller
    # cluster's plans were compiled, else estimate against estimate
    if f["basis"] == "exact":
        other = f["exact_best"]["predicted"]
        assert other["source"] == "simulated" and f["exact_compiled"] >= 1, f
        assert f["slower"] == (b["step_time_s"] > other["step_time_s"]), f
    else:
        assert f["slower"] == (f["chosen_estimate_s"] > f["best"]["predicted"]["step_time_s"]), f
    if f["slower"]:
        assert "slower than the best on %d devices" % f["devices"] in f["why"], f["why"]
        assert "examples a GPU" in f["why"], f["why"]
    # more GPUs: no slower, or the report says why
    assert b["step_time_s"] <= a["step_time_s"] or f["slower"], (a["step_time_s"],
                                                                 b["step_time_s"], f["why"])
    print("more GPUs: %.6f s against %.6f s; %s" % (b["step_time_s"], a["step_time_s"], f["why"]))


def strip_times(o):
    if isinstance(o, dict):
        return {k: strip_times(v) for k, v in o.items() if not k.endswith("time_s")}
    if isinstance(o, list):
        return [strip_times(v) for v in o]
    return o


def same(pa, pb):
    a, b = strip_times(load(pa)), strip_times(load(pb))
    assert a == b, [k for k in a if a[k] != b.get(k)]
    print("same choice: " + a["chosen"]["options"])


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check(*sys.argv[2:6])
    elif sys.argv[1] == "cp":
        cp(*sys.argv[2:6])
    elif sys.argv[1] == "ep":
        ep(*sys.argv[2:6])
    elif sys.argv[1] == "etp":
        etp(*sys.argv[2:6])
    elif sys.argv[1] == "composed":
        composed(*sys.argv[2:7])
    elif sys.argv[1] == "replayed":
        replayed(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "dense":
        dense(sys.argv[2])
    elif sys.argv[1] == "offload":
        offload(*sys.argv[2:6])
    elif sys.argv[1] == "infer":
        infer(*sys.argv[2:6])
    elif sys.argv[1] == "faster":
        faster(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3])
    else:
        sys.exit("unknown command " + sys.argv[1])
