"""e2e.repl_socket: the [repl] listen service and maestro-repl against a real
tiny_mllm run. While it trains: a client that never speaks, binary garbage
and a 10 MiB line before the token, a wrong token (refused, logged, the next
attempt within a second rate-limited), two clients at once, a 10 MiB line
after the token, detach (the run goes on), then quit: exit 0 with a
checkpoint and losses equal to an uninterrupted run's. A non-loopback listen
without a token file is refused at start-up (exit 2).
usage: repl_socket_test.py MAESTRO_RUN MAESTRO_REPL (from the source root)"""
import json, os, random, socket, subprocess, sys, tempfile, time

RUN, CLIENT = sys.argv[1], sys.argv[2]
MODEL = "models/tiny_mllm.sect"
work = tempfile.mkdtemp()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def config(name, listen, extra=""):
    path = os.path.join(work, name + ".toml")
    with open(path, "w") as f:
        f.write(f'[runtime]\nthreads = 2\n[checkpoint]\ndir = "{work}/{name}"\n[repl]\nlisten = "{listen}"\n{extra}')
    return path


def answer(sock):
    data = b""
    while not data.endswith(b"\n\n") and data != b"\n":
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data.decode()


def client(port, token, lines):
    r = subprocess.run([CLIENT, f"127.0.0.1:{port}", "--token", token], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=60)
    return r


# a non-loopback address without a token file: refused at start-up
r = subprocess.run([RUN, MODEL, "--steps", "1", "--quiet", "--config", config("open", "0.0.0.0:4242")],
                   capture_output=True, text=True, timeout=60)
if r.returncode != 2 or "not on loopback" not in r.stderr:
    fail(f"non-loopback listen without token file: exit {r.returncode}: {r.stderr}")

port = free_port()
steps = 400  # long enough for the checks; quit stops it. The reference: the same schedule's first 20 steps
ref = subprocess.run([RUN, MODEL, "--steps", str(steps), "--stop-after", "20", "--json", "--quiet", "--config", config("ref", "")],
                     capture_output=True, text=True, timeout=120)
ref = json.loads(ref.stdout.splitlines()[-1])
run = subprocess.Popen([RUN, MODEL, "--steps", str(steps), "--json", "--quiet", "--config", config("run", f"127.0.0.1:{port}")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
token_file = f"{work}/run.repl-token"
for _ in range(100):
    if os.path.exists(token_file):
        break
    time.sleep(0.05)
time.sleep(0.3)
if oct(os.stat(token_file).st_mode & 0o777) != "0o600":
    fail(f"token file mode {oct(os.stat(token_file).st_mode)}")
token = open(token_file).read().strip()

silent = socket.create_connection(("127.0.0.1", port))  # never speaks
garbage = socket.create_connection(("127.0.0.1", port))
rng = random.Random(15)
garbage.sendall(bytes(rng.randrange(256) for _ in range(65536)) + b"\n")
if "wrong token" not in (answer(garbage) or ""):
    fail("garbage before the token was not refused")
huge = socket.create_connection(("127.0.0.1", port))
time.sleep(1.1)
try:
    huge.sendall(b"a" * (10 << 20) + b"\n")
except OSError:
    pass  # dropped mid-line: fine
time.sleep(1.1)

wrong = client(port, "not-the-token", ["topology"])
if wrong.returncode != 1 or "wrong token" not in wrong.stderr:
    fail(f"wrong token: exit {wrong.returncode}: {wrong.stderr}")
limited = client(port, token, ["topology"])
if limited.returncode != 1 or "too many token attempts" not in limited.stderr:
    fail(f"no rate limit right after a wrong token: {limited.returncode} {limited.stderr}")
time.sleep(1.1)

# two clients at once, one sending a 10 MiB line
a = socket.create_connection(("127.0.0.1", port))
b = socket.create_connection(("127.0.0.1", port))
for s in (a, b):
    s.sendall(f"token {token}\n".encode())
    if answer(s) != "ok\n\n":
        fail("a right token was refused")
b.sendall(b"x" * (10 << 20) + b"\n")
a.sendall(b"stats --json\n")
sa = answer(a)
sb = answer(b)
if not sb or not sb.startswith("error: line too long"):
    fail(f"10 MiB line: {sb!r}")
if not sa or json.loads(sa)["step"] < 0:
    fail(f"stats: {sa!r}")
b.sendall(b"detach\n")
answer(b)
a.sendall(b"topology --json\n")
topo = json.loads(answer(a))
if topo["count"] != 13:  # tiny_mllm on this CPU plan: see e2e.repl for the count from the plan
    fail(f"topology over the socket: {topo['count']} actors")

# The losses are compared over the first 10 steps at least: wait until the
# run has done them (a loaded machine steps slowly; a fixed sleep once saw 8).
deadline = time.time() + 120
while True:
    a.sendall(b"stats --json\n")
    if json.loads(answer(a))["step"] >= 12:
        break
    if time.time() > deadline:
        fail("the run did not reach step 12 within 120 s")
    time.sleep(0.1)

# detach keeps the run going; quit stops it with a checkpoint
d = client(port, token, ["pause", "detach"])
if d.returncode != 0 or "detached" not in d.stdout:
    fail(f"detach: {d.returncode} {d.stdout} {d.stderr}")
q = client(port, token, ["wave", "quit"])
if q.returncode != 0 or "quitting" not in q.stdout:
    fail(f"quit: {q.returncode} {q.stdout} {q.stderr}")
out, err = run.communicate(timeout=60)
if run.returncode != 0:
    fail(f"the run: exit {run.returncode}: {err}")
if "wrong token from 127.0.0.1" not in err:
    fail(f"the wrong token was not logged: {err}")
summary = json.loads(out.splitlines()[-1])
if not summary["checkpoint"] or not os.path.isdir(summary["checkpoint"]):
    fail(f"quit left no checkpoint: {summary}")
n = min(len(ref["losses"]), len(summary["losses"]))
if n < 10 or summary["losses"][:n] != ref["losses"][:n] or summary["steps"] >= steps:
    fail(f"losses differ from the uninterrupted run or the run did not stop early: {summary['steps']} steps")
silent.close()
print(f"PASS: quit after {summary['steps']} steps with {os.path.basename(summary['checkpoint'])}; losses unchanged")
