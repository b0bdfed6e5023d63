"""Crash, signal and hostile-state tests of maestro-run's checkpoints, through
the real binary. Usage: /usr/bin/python3 faults_test.py CASE MAESTRO_RUN
[SECONDS] (from the repository root); each CASE is one ctest (faults.CASE).

Every case compares against one uninterrupted run of a small model (6 steps,
a checkpoint every 2): whatever happened, `--resume DIR` must find a complete
checkpoint no older than the last one committed, and continue with losses
and final parameters bitwise equal to the uninterrupted run's."""
import fcntl
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

RUN = None
TMP = None
FAULT_EXIT = 86  # kFaultExitStatus (src/actors/checkpoint.h)
POINTS = ["sections-written", "staged", "swapped", "latest-staged", "latest", "committed"]


def maestro(*args, expect=0, env=None):
    p = subprocess.run([RUN, *args], capture_output=True, text=True, timeout=300,
                       env=None if env is None else {**os.environ, **env})
    if p.returncode != expect:
        raise AssertionError(f"maestro-run {' '.join(args)} {env or ''}: exit {p.returncode}, expected {expect}\n"
                             f"stdout:\n{p.stdout[-2000:]}\nstderr:\n{p.stderr[-2000:]}")
    return p


def summary(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def model(name="m.sect", steps=6, data_seed=7):
    text = open("models/tiny_mllm.sect").read()
    text = text.replace("global_batch = 32;", "global_batch = 8;")
    text = text.replace("steps = 40;", f'steps = {steps};\n  schedule = cosine(warmup: 2);\n'
                                       '  checkpoint { every = 2; dir = "unused"; }')
    text = text.replace("synthetic(seed: 7)", f"synthetic(seed: {data_seed})")
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def config(ckpt, keep=0):
    path = ckpt + ".toml"
    with open(path, "w") as f:
        f.write(f'[checkpoint]\ndir = "{ckpt}"\nkeep = {keep}\n')
    return path


def train(m, ckpt, *args, expect=0, env=None):
    return maestro(m, "--config", config(ckpt), "--quiet", "--json", *args, expect=expect, env=env)


def files(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d) if n.endswith(".safetensors")}


def reference(m):
    """The uninterrupted run: its losses and final checkpoint folder."""
    ref = os.path.join(TMP, "reference")
    s = summary(train(m, ref))
    assert len(s["losses"]) == 6, s
    return s["losses"], os.path.join(ref, "step-00000006")


def assert_resumes_exactly(m, ckpt, losses, final, at_least):
    """--resume ckpt finds a checkpoint at step >= at_least and finishes
    bitwise as the uninterrupted run; nothing of a dead run is left."""
    s = summary(train(m, ckpt, "--resume", ckpt))
    k = 6 - len(s["losses"])
    assert k >= at_least, f"resumed at step {k}, but step {at_least} had been committed"
    assert s["losses"] == losses[k:], (k, s["losses"], losses)
    assert files(os.path.join(ckpt, "step-00000006")) == files(final), "final parameters differ"
    left = [n for n in os.listdir(ckpt) if n.startswith(".") and n != ".lock"]
    assert not left, f"leftovers of dead runs: {left}"


def committed_step(ckpt):
    name = open(os.path.join(ckpt, "latest")).read().strip()
    return int(name[len("step-"):])


# --------------------------------------------------------------------- cases
def case_commit_faults():
    """A fault at every point of the commit, on a fresh step folder and when
    the step folder being written exists already (and is the one `latest`
    names: a re-run of the same steps)."""
    m = model()
    losses, final = reference(m)
    fresh, rerun = os.path.join(TMP, "base-fresh"), os.path.join(TMP, "base-rerun")
    train(m, fresh, "--stop-after", "2")
    train(m, rerun, "--stop-after", "4")
    for point in POINTS:
        # fresh: resume from step 2, die while committing step 4
        d = os.path.join(TMP, f"fresh-{point}")
        shutil.copytree(fresh, d)
        train(m, d, "--resume", d, expect=FAULT_EXIT, env={"MAESTRO_FAULT_AT": point})
        after = POINTS.index(point) >= POINTS.index("latest")
        assert_resumes_exactly(m, d, losses, final, 4 if after else 2)
        # re-run: latest names step-4; resume from step 2 and write step 4 again
        d = os.path.join(TMP, f"rerun-{point}")
        shutil.copytree(rerun, d)
        assert committed_step(d) == 4
        train(m, d, "--resume", os.path.join(d, "step-00000002"), expect=FAULT_EXIT, env={"MAESTRO_FAULT_AT": point})
        assert_resumes_exactly(m, d, losses, final, 4)


def spawn(m, ckpt, *args):
    # Append mode: the child's stdout shares this file's offset, which the
    # reads below seek; without O_APPEND a line the child writes just after
    # a seek(0) lands over the start of the file (seen once in CI: a
    # progress line over the first plan line).
    out = open(os.path.join(TMP, f"out-{time.monotonic_ns()}"), "a+")
    p = subprocess.Popen([RUN, m, "--config", config(ckpt), *args], stdout=out, stderr=subprocess.STDOUT, text=True)
    return p, out


def wait_for_steps(p, out, n, timeout=120):
    """Waits until the run printed n progress lines (or ended)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and p.poll() is None:
        out.seek(0)
        if len(re.findall(r"^step \d+/", out.read(), re.M)) >= n:
            return
        time.sleep(0.01)


def case_signals():
    """SIGINT, SIGTERM, SIGHUP: checkpoint, exit 128 + the signal; a second
    signal aborts at once, leaving the committed checkpoint intact."""
    m = model("long.sect", steps=6)
    losses, final = reference(m)
    for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
        d = os.path.join(TMP, f"sig-{sig}")
        p, out = spawn(m, d)
        wait_for_steps(p, out, 1)
        p.send_signal(sig)
        assert p.wait(120) == status, (sig, p.returncode, open(out.name).read())
        out.seek(0)
        text = out.read()
        assert "interrupted after" in text, text
        assert text.startswith("plan  ") and text.index("plan  ") < text.index("step 1/"), text  # plan first
        assert committed_step(d) >= 1
        assert_resumes_exactly(m, d, losses, final, committed_step(d))
    # twice: the second ends the run at once, whatever it was doing
    base = os.path.join(TMP, "sig-base")
    train(m, base, "--stop-after", "2")
    for delay in (0.0, 0.002, 0.01, 0.05):
        d = os.path.join(TMP, f"sig-twice-{delay}")
        shutil.copytree(base, d)
        p, out = spawn(m, d, "--resume", d)
        wait_for_steps(p, out, 1)
        p.send_signal(signal.SIGINT)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        assert p.wait(120) == 130, (p.returncode, open(out.name).read())
        assert_resumes_exactly(m, d, losses, final, 2)


def case_lock():
    """A second run on a checkpoint folder in use is refused, naming the holder."""
    m = model()
    d = os.path.join(TMP, "locked")
    os.makedirs(d)
    with open(os.path.join(d, ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(f"{os.getpid()}\n")
        f.flush()
        p = train(m, d, expect=2)
        assert p.stderr.startswith("maestro-run: error: ") and f"PID {os.getpid()}" in p.stderr, p.stderr
        assert p.stdout == "" and not [n for n in os.listdir(d) if n.startswith("step-")]
    train(m, d, "--stop-after", "2")  # released: runs


def dead_pid():
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def case_housekeeping():
    """Leftovers of dead runs are cleaned at start-up (never a live run's);
    [checkpoint] keep prunes old step folders, never the one latest names."""
    m = model()
    losses, final = reference(m)
    d = os.path.join(TMP, "house")
    os.makedirs(d)
    dead, live = dead_pid(), os.getpid()
    for name in (f".tmp-step-00000004-{dead}", f".old-step-00000002-{dead}", f".tmp-step-00000004-{live}"):
        os.makedirs(os.path.join(d, name))
    for name in (f".latest-{dead}", f".latest-{live}"):
        open(os.path.join(d, name), "w").write("step-00000004\n")
    train(m, d, "--stop-after", "2")
    assert sorted(n for n in os.listdir(d) if n.startswith(".")) == [
        ".latest-" + str(live), ".lock", f".tmp-step-00000004-{live}"], os.listdir(d)
    # keep = 2 with a checkpoint every 2 steps: step-4 and step-6 remain
    k = os.path.join(TMP, "keep")
    maestro(m, "--config", config(k, keep=2), "--quiet")
    assert sorted(n for n in os.listdir(k) if n.startswith("step-")) == ["step-00000004", "step-00000006"]
    # keep = 1 while latest names an older step than the newest folder
    maestro(m, "--config", config(k, keep=1), "--quiet", "--resume", os.path.join(k, "step-00000004"),
            "--stop-after", "4")
    with open(os.path.join(k, "latest"), "w") as f:
        f.write("step-00000004\n")
    maestro(m, "--config", config(k, keep=1), "--quiet", "--resume", k, "--stop-after", "6")
    assert sorted(n for n in os.listdir(k) if n.startswith("step-")) == ["step-00000006"], os.listdir(k)


def case_state():
    """state.json and the tensor files are checked before a resume."""
    m = model()
    base = os.path.join(TMP, "state-base")
    train(m, base, "--stop-after", "4")

    def damaged(name, edit):
        d = os.path.join(TMP, name)
        shutil.copytree(base, d)
        path = os.path.join(d, "step-00000004", "state.json")
        state = json.load(open(path))
        edit(d, state)
        json.dump(state, open(path, "w"))
        return d

    def refused(d, *words, resume=None):
        p = train(m, os.path.join(TMP, "elsewhere"), "--resume", resume or os.path.join(d, "step-00000004"), expect=2)
        first = p.stderr.splitlines()[0]
        assert first.startswith("maestro-run: error: --resume: "), p.stderr
        assert all(w in first for w in words), (words, p.stderr)
        assert p.stdout == ""

    refused(damaged("neg", lambda d, s: s.update(step=-5)), "'step'")
    big = damaged("big", lambda d, s: s.update(step=100, samples=800, losses=[1.0] * 100))
    refused(big, "'step'", "folder 'step-00000004'")
    os.rename(os.path.join(big, "step-00000004"), os.path.join(big, "step-00000100"))
    refused(big, "beyond", "100", resume=os.path.join(big, "step-00000100"))
    refused(damaged("samples", lambda d, s: s.update(samples=7)), "'samples'")
    refused(damaged("seed", lambda d, s: s.update(seed=-1)), "'seed'")
    refused(damaged("sched", lambda d, s: s.update(schedule="fast")), "schedule")
    refused(damaged("nofiles", lambda d, s: s.pop("files")), "checksum")

    def flip(d, s):
        path = os.path.join(d, "step-00000004", "llm.safetensors")
        data = bytearray(open(path, "rb").read())
        data[-1] ^= 1
        open(path, "wb").write(bytes(data))
    refused(damaged("flip", flip), "llm.safetensors", "checksum")
    # a changed data seed in the .sect
    p = train(model("seed8.sect", data_seed=8), os.path.join(TMP, "e2"), "--resume", base, expect=2)
    assert "data seed 7" in p.stderr and "seed 8" in p.stderr, p.stderr
    # a dangling latest falls back to the newest complete step folder
    d = os.path.join(TMP, "dangling")
    shutil.copytree(base, d)
    open(os.path.join(d, "latest"), "w").write("step-00000099\n")
    losses, final = reference(m)
    assert_resumes_exactly(m, d, losses, final, 4)
    # ... skipping a damaged newest one
    d = os.path.join(TMP, "dangling-damaged")
    shutil.copytree(base, d)
    os.remove(os.path.join(d, "latest"))
    os.remove(os.path.join(d, "step-00000004", "vision.safetensors"))
    s = summary(train(m, d, "--resume", d))
    assert s["losses"] == losses[2:], s["losses"]


def case_messages():
    """A missing weights file names its section once."""
    text = open("models/tiny_kd.sect").read().replace("mode     = frozen;", 'mode = frozen;\n  weights = "nope.safetensors";')
    path = os.path.join(TMP, "weights.sect")
    open(path, "w").write(text)
    p = maestro(path, "--steps", "1", "--quiet", expect=1)
    first = p.stderr.splitlines()[0]
    assert first.startswith("maestro-run: error: section 'teacher', replica 0: ") and first.count("teacher") == 1, first


def case_threads():
    """[runtime] threads = 64: the run's OS threads grow linearly (about 5 per
    thread: CAF's, the backends' pools, one per worker), not as N²."""
    m = model("threads.sect", steps=12)
    cfg = os.path.join(TMP, "threads.toml")
    with open(cfg, "w") as f:
        f.write(f'[runtime]\nthreads = 64\n[checkpoint]\ndir = "{TMP}/threads-ckpt"\n')
    p = subprocess.Popen([RUN, m, "--config", cfg, "--quiet"], stdout=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        try:
            peak = max(peak, len(os.listdir(f"/proc/{p.pid}/task")))
        except FileNotFoundError:
            break
        time.sleep(0.02)
    assert p.wait() == 0
    assert 64 < peak <= 8 * 64, f"{peak} OS threads at threads = 64"


def case_soak(seconds=None):
    """Random SIGINT/SIGTERM/kill -9 at random moments, then random resumes,
    until the run is done: every trajectory ends bitwise equal to the
    uninterrupted one. Bounded by SECONDS (default 40)."""
    seconds = float(seconds or 40)
    m = model()
    losses, final = reference(m)
    rng = random.Random(int(os.environ.get("MAESTRO_SOAK_SEED", "1")))
    end, runs, trajectories = time.monotonic() + seconds, 0, 0
    while time.monotonic() < end:
        d = os.path.join(TMP, f"soak-{trajectories}")
        trajectories += 1
        while time.monotonic() < end:
            resume = ["--resume", d] if os.path.exists(os.path.join(d, "latest")) else []
            p, out = spawn(m, d, "--quiet", *resume)
            time.sleep(rng.uniform(0, 0.6))
            sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL, None])
            if sig is not None and p.poll() is None:
                p.send_signal(sig)
            status = p.wait(120)
            runs += 1
            # -2/-15: the signal came before maestro-run installed its handlers
            assert status in (0, 130, 143, -9, -2, -15), (status, open(out.name).read())
            if status == 0 or (os.path.exists(os.path.join(d, "step-00000006", "state.json")) and
                               committed_step(d) == 6):
                break
        else:
            break
        state = json.load(open(os.path.join(d, "step-00000006", "state.json")))
        assert state["losses"] == losses, (state["losses"], losses)
        assert files(os.path.join(d, "step-00000006")) == files(final), f"{d}: final parameters differ"
        shutil.rmtree(d)
    print(f"soak: {runs} runs, {trajectories} trajectories in {seconds:.0f} s")
    assert runs >= 5, runs


if __name__ == "__main__":
    case, RUN = sys.argv[1], os.path.abspath(sys.argv[2])
    TMP = tempfile.mkdtemp(prefix=f"maestro-faults-{case}-")
    try:
        globals()["case_" + case](*sys.argv[3:])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    print(f"faults.{case}: ok")
