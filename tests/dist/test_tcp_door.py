#!/usr/bin/env python3
"""test_tcp_door.py — who may join a job of the `tcp` communicator
(runtime/comm_tcp.c, runtime/comm_handshake.c; docs/comm.md, "Security").

Real processes on loopback only (127.0.0.1), with small timeouts:
  rogues      a silent socket, 4 KiB of garbage, a hello with rank 2^31-1
              and a second hello for rank 1 (a duplicate) while a 3-rank
              job of comm_driver starts: the job completes, correctly and
              quickly, and rank 0 warns about each stranger;
  other job   job B's rank 1 on job A's port (another TORCHELASTIC_RUN_ID)
              is refused, both sides naming both ids, and job A completes
              with its own rank 1; the same with another SHARDC_JOB_TOKEN:
              "authentication failed" on both sides; a token on one side
              only; the same token: the job runs;
  token       a fake rank 0 records rank 1's hello: the token is not in it;
              a rogue that claims the token without knowing it is refused;
  program     `shardc train --comm tcp` with --dim batch=4 on rank 0 and
              batch=2 on rank 1: refused, both sides naming both hashes;
  bind        with MASTER_ADDR=127.0.0.1, rank 0's socket and a rank's own
              listening socket are bound to 127.0.0.1 (/proc/net/tcp), to
              every interface with SHARDC_BIND_ALL=1;
  reasons     a rank that never comes: rank 0 and the rank waiting for the
              table both name the missing rank.
"""
import os
import random
import socket
import struct
import subprocess
import sys
import shutil
import tempfile
import time

SRC = os.environ.get("SC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("SC_BINARY_DIR", os.path.join(SRC, "build"))
SHARDC = os.environ.get("SHARDC", os.path.join(BIN, "shardc"))
DRIVER = os.path.join(BIN, "tests", "comm_driver")
TMP = tempfile.mkdtemp()

# the handshake's hello (runtime/comm_handshake.c): magic, rank, arg,
# version, size, flags, job[160], program[72], nonce[32]
MAGIC, VERSION = 0x53435443, 2
HELLO = struct.Struct("<IiiIiI160s72s32s")
REPLY = struct.Struct("<IIiiII160s72s32s32s320s")
MSG = struct.Struct("<II32s320s")

fails = 0


def check(ok, what, detail=""):
    global fails
    if ok:
        print(f"ok: {what}")
    else:
        fails += 1
        print(f"FAIL: {what}" + (f": {detail}" if detail else ""))


def free_port():
    while True:
        p = random.randint(20000, 30000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
            return p
        except OSError:
            pass
        finally:
            s.close()


class Rank:
    """One process of a job: env RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT."""

    def __init__(self, name, rank, size, port, argv=None, env=None, limit=40):
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), SHARDC_TEST_COMM="tcp", SHARDC_COMM_TIMEOUT="20")
        for k in ("SHARDC_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                  "OMPI_MCA_ess_base_jobid", "SHARDC_BIND_ALL"):
            e.pop(k, None)
        e.update(env or {})
        self.out = open(os.path.join(TMP, f"{name}.out"), "w+")
        self.err = open(os.path.join(TMP, f"{name}.err"), "w+")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(["timeout", str(limit)] + (argv or [DRIVER, "collectives"]),
                                  env=e, stdout=self.out, stderr=self.err)
        self.rc = None
        self.seconds = None

    def wait(self):
        if self.rc is None:
            self.rc = self.p.wait()
            self.seconds = time.monotonic() - self.t0
        return self.rc

    def text(self, which="err"):
        f = self.err if which == "err" else self.out
        f.seek(0)
        return f.read()


def connect(port):
    for _ in range(100):
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nobody listens on {port}")


def hello(rank, size, job=b"", program=b"", flags=0):
    return HELLO.pack(MAGIC, rank, 0, VERSION, size, flags, job, program, os.urandom(32))


def read_exactly(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            break
        b += k
    return b


def reply_of(s):
    b = read_exactly(s, REPLY.size)
    if len(b) < REPLY.size:
        return None
    f = REPLY.unpack(b)
    return {"status": f[5], "reason": f[10].split(b"\0")[0].decode()}


def wait_all(ranks):
    for r in ranks:
        r.wait()


# ---- rogues do not stop a real job ----
def test_rogues():
    port = free_port()
    env = {"SHARDC_COMM_HANDSHAKE_TIMEOUT": "3"}
    r0 = Rank("rogue0", 0, 3, port, env=env)
    silent = connect(port)  # says nothing, stays open
    garbage = connect(port)
    garbage.sendall(os.urandom(4096))
    big = connect(port)  # a well-formed hello for rank 2^31-1
    big.sendall(hello(2**31 - 1, 3))
    big_answer = reply_of(big)
    t1 = time.monotonic()
    r1 = Rank("rogue1", 1, 3, port, env=env)
    time.sleep(1.0)  # rank 1 has joined: a second rank 1 comes
    dup = connect(port)
    dup.sendall(hello(1, 3))
    dup_answer = reply_of(dup)
    r2 = Rank("rogue2", 2, 3, port, env=env)
    ranks = [r0, r1, r2]
    wait_all(ranks)
    took = time.monotonic() - t1
    for s in (silent, garbage, big, dup):
        s.close()
    out = "".join(r.text("out") for r in ranks)
    ok = all(r.rc == 0 for r in ranks) and all(f"rank {k}: ok" in out for k in range(3))
    check(ok and took < 8, "a 3-rank job completes past a silent socket, garbage, rank 2^31-1 "
          f"and a duplicate rank 1 ({took:.1f} s)",
          f"rcs {[r.rc for r in ranks]} after {took:.1f} s: {r0.text()[-600:]} | "
          f"{r1.text()[-300:]} | {r2.text()[-300:]}")
    check(big_answer is not None and big_answer["status"] == 1 and
          "rank 2147483647" in big_answer["reason"],
          "rank 2^31-1 is refused with the reason", str(big_answer))
    check(dup_answer is not None and dup_answer["status"] == 1 and
          "rank 1 has joined already" in dup_answer["reason"],
          "a duplicate rank 1 is refused with the reason", str(dup_answer))
    e0 = r0.text()
    check("bad magic" in e0 and "rank 2147483647" in e0 and "joined already" in e0,
          "rank 0 warns about every stranger", e0[-800:])


# ---- another job on the same port ----
def other_job(name, env_a, env_b, want_both, limit_b=5):
    """Job A's rank 0, then job B's rank 1 on its port (refused), then job
    A's rank 1: job A completes; both sides' messages contain want_both."""
    port = free_port()
    a0 = Rank(f"{name}_a0", 0, 2, port, env=env_a)
    b1 = Rank(f"{name}_b1", 1, 2, port, env=env_b)
    b1.wait()
    a1 = Rank(f"{name}_a1", 1, 2, port, env=env_a)
    wait_all([a0, a1])
    a_ok = a0.rc == 0 and a1.rc == 0 and "rank 0: ok" in a0.text("out")
    eb, ea = b1.text(), a0.text()
    check(b1.rc != 0 and b1.seconds < limit_b and "rank 1: ok" not in b1.text("out") and
          all(w in eb for w in want_both),
          f"{name}: the other job's rank 1 is refused within {limit_b} s naming the cause",
          f"rc {b1.rc} after {b1.seconds:.1f} s: {eb[-500:]}")
    check(all(w in ea for w in want_both), f"{name}: rank 0 warns naming the cause", ea[-500:])
    check(a_ok, f"{name}: job A then completes with its own rank 1",
          f"{a0.rc} {a1.rc}: {ea[-300:]} | {a1.text()[-300:]}")


def test_other_jobs():
    other_job("run id", {"TORCHELASTIC_RUN_ID": "jobA"}, {"TORCHELASTIC_RUN_ID": "jobB"},
              ["job id differs", "TORCHELASTIC_RUN_ID=jobA", "TORCHELASTIC_RUN_ID=jobB"])
    other_job("token", {"SHARDC_JOB_TOKEN": "token-of-job-A-0123456789"},
              {"SHARDC_JOB_TOKEN": "token-of-job-B-9876543210"}, ["authentication failed"])
    other_job("token on one side", {"SHARDC_JOB_TOKEN": "token-of-job-A-0123456789"}, {},
              ["SHARDC_JOB_TOKEN"])
    port = free_port()
    tok = {"SHARDC_JOB_TOKEN": "a-shared-secret-" + "x" * 80}  # longer than a block
    ranks = [Rank(f"tok{r}", r, 3, port, env=tok) for r in range(3)]
    wait_all(ranks)
    check(all(r.rc == 0 for r in ranks), "3 ranks with the same token run",
          " | ".join(r.text()[-200:] for r in ranks))


# ---- the token never travels; a claim without it fails ----
def test_token_not_sent():
    token = "Sup3r-S3cret-Token-4242"
    port = free_port()
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(4)
    ls.settimeout(10)
    r1 = Rank("fake0_r1", 1, 2, port, env={"SHARDC_JOB_TOKEN": token, "SHARDC_COMM_TIMEOUT": "3"})
    c, _ = ls.accept()
    c.settimeout(5)
    got = read_exactly(c, HELLO.size)
    # answer as a rank 0 that does not know the token
    c.sendall(REPLY.pack(MAGIC, VERSION, 0, 2, 1, 0, b"SHARDC_JOB_TOKEN", b"", os.urandom(32),
                         os.urandom(32), b""))
    rest = read_exactly(c, MSG.size)
    r1.wait()
    c.close()
    ls.close()
    sent = got + rest
    check(len(got) == HELLO.size and token.encode() not in sent and
          token[:8].encode() not in sent, "the token is not in what a rank sends", repr(got[:64]))
    check(r1.rc != 0 and "authentication failed" in r1.text(),
          "a rank 0 without the token fails authentication", r1.text()[-300:])
    # a rogue that claims the token to a real rank 0
    port = free_port()
    r0 = Rank("claim0", 0, 2, port, env={"SHARDC_JOB_TOKEN": token})
    s = connect(port)
    s.sendall(hello(1, 2, b"SHARDC_JOB_TOKEN", b"", 1))
    rep = reply_of(s)
    s.sendall(MSG.pack(MAGIC, 0, os.urandom(32), b""))
    verdict = read_exactly(s, MSG.size)
    s.close()
    r1 = Rank("claim1", 1, 2, port, env={"SHARDC_JOB_TOKEN": token})
    wait_all([r0, r1])
    v = MSG.unpack(verdict) if len(verdict) == MSG.size else None
    check(rep is not None and rep["status"] == 0 and v is not None and v[1] == 1 and
          b"authentication failed" in v[3], "a rogue claiming the token is refused", str(v))
    check(r0.rc == 0 and r1.rc == 0, "the real rank 1 then joins", r0.text()[-300:])


# ---- another program ----
def test_program():
    r = random.Random(3)
    import numpy as np
    np.save(os.path.join(TMP, "ids.npy"), np.array([[r.randrange(1000) for _ in range(16)]
                                                     for _ in range(8)], dtype=np.int64))
    args = [SHARDC, "train", os.path.join(SRC, "samples", "gpt2.onnx"), "--data",
            "input_ids=" + os.path.join(TMP, "ids.npy"), "--labels",
            os.path.join(TMP, "ids.npy"), "--optimizer", "adamw", "--threads", "1", "--quiet",
            "--steps", "2", "--mesh", "dp=2", "--comm", "tcp"]
    port = free_port()
    env = {"SHARDC_COMM_TIMEOUT": "6"}
    r0 = Rank("prog0", 0, 2, port, args + ["--dim", "batch=4"], env=env, limit=60)
    r1 = Rank("prog1", 1, 2, port, args + ["--dim", "batch=2"], env=env, limit=60)
    wait_all([r0, r1])
    e0, e1 = r0.text(), r1.text()
    import re
    hashes = lambda t: set(re.findall(r"program ([0-9a-f]{16})", t) +
                           re.findall(r"runs ([0-9a-f]{16})", t))
    check(r0.rc != 0 and r1.rc != 0 and "program differs" in e1 and len(hashes(e1)) == 2,
          "another program (--dim batch=2 against batch=4) is refused naming both hashes",
          f"{r0.rc} {r1.rc}: {e1[-400:]}")
    check("program differs" in e0 and hashes(e0) == hashes(e1),
          "rank 0 names the same two hashes", e0[-400:])


# ---- where rank 0 and the ranks listen ----
def listeners(pid):
    """(address, port) of the listening TCP sockets of process pid."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    out = []
    for line in open(f"/proc/{pid}/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            a, p = f[1].split(":")
            ip = socket.inet_ntoa(struct.pack("<I", int(a, 16)))
            out.append((ip, int(p, 16)))
    return out


def driver_pid(r):
    """The comm_driver under `timeout`."""
    for _ in range(100):
        try:
            kids = open(f"/proc/{r.p.pid}/task/{r.p.pid}/children").read().split()
            if kids:
                return int(kids[0])
        except OSError:
            pass
        time.sleep(0.05)
    return r.p.pid


def test_bind():
    for bind_all in (False, True):
        port = free_port()
        env = {"SHARDC_COMM_TIMEOUT": "3"}
        if bind_all:
            env["SHARDC_BIND_ALL"] = "1"
        r0 = Rank("bind0", 0, 3, port, env=env)
        r1 = Rank("bind1", 1, 3, port, env=env)  # waits for rank 2: its listener is up
        time.sleep(1.0)
        l0, l1 = listeners(driver_pid(r0)), listeners(driver_pid(r1))
        wait_all([r0, r1])
        want = "0.0.0.0" if bind_all else "127.0.0.1"
        what = "SHARDC_BIND_ALL=1: every interface" if bind_all else \
            "MASTER_ADDR=127.0.0.1: rank 0 listens on 127.0.0.1 only, and so does rank 1"
        check((want, port) in l0 and all(a == want for a, _ in l0) and len(l1) == 1 and
              l1[0][0] == want, what, f"rank 0 {l0}, rank 1 {l1}")


# ---- every rank names the cause ----
def test_reasons():
    port = free_port()
    env = {"SHARDC_COMM_TIMEOUT": "3"}
    r0 = Rank("miss0", 0, 3, port, env=env)
    r1 = Rank("miss1", 1, 3, port, env=env)
    wait_all([r0, r1])
    e0, e1 = r0.text(), r1.text()
    check(r0.rc != 0 and r1.rc != 0 and "missing: rank 2" in e0 and "missing: rank 2" in e1 and
          r1.seconds < 8, "rank 2 never comes: rank 0 and rank 1 both name it",
          f"{e0[-300:]} | {e1[-300:]}")


for t in (test_rogues, test_other_jobs, test_token_not_sent, test_program, test_bind,
          test_reasons):
    t0 = time.monotonic()
    try:
        t()
    except Exception as e:  # a broken test is a failure, not a hang
        check(False, t.__name__, repr(e))
    print(f"   ({t.__name__}: {time.monotonic() - t0:.1f} s)")
if os.environ.get("SC_KEEP_TMP"):
    print(f"outputs kept in {TMP}")
else:
    shutil.rmtree(TMP, ignore_errors=True)
print("all ok" if not fails else f"{fails} failure(s)")
sys.exit(1 if fails else 0)
