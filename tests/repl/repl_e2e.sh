#!/bin/bash
# e2e.repl: maestro-run --repl scripted through stdin against a real
# tiny_mllm run (docs/repl.md). Checks that
#  - topology lists every actor the run's plan implies (scheduler, loader,
#    checkpointer, tracer, and dp x pp replicas per section, from the plan
#    lines the run prints);
#  - pause holds the step counter still for 2 s, and after resume the losses
#    equal an uninterrupted run's;
#  - checkpoint writes one that --resume accepts (and continues exactly);
#  - quit exits 0 with a checkpoint;
#  - over 3 processes with the LLM at tp 2, topology shows each replica in
#    its process and the tp ranks, and the losses equal the first run's.
# usage: repl_e2e.sh MAESTRO_RUN (run from the source root)
set -u
RUN=$1
MODEL=models/tiny_mllm.sect
STEPS=12
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
config() { printf '[runtime]\nthreads = 2\n[checkpoint]\ndir = "%s"\n' "$W/$1" > "$W/$1.toml"; echo "$W/$1.toml"; }
py() { /usr/bin/python3 -c "$@"; }
# wait_for TEXT FILE: until FILE holds TEXT, at most 60 s.
wait_for() { for _ in $(seq 600); do grep -q "$1" "$2" 2>/dev/null && return; sleep 0.1; done; }

# the uninterrupted run
"$RUN" $MODEL --steps $STEPS --json --quiet --config "$(config ref)" > "$W/ref.out" || fail "reference run"
REF=$(tail -1 "$W/ref.out")

# pause: two stats 2 s apart show the same step; topology; resume. The
# first stats waits until the run says (log level info) that it is paused:
# on a loaded machine a step can outlast any fixed sleep.
{ echo pause; wait_for 'paused before step' "$W/pause.err"; echo 'stats --json'; sleep 2; echo 'stats --json'; echo 'topology --json'; echo 'actor llm/1 replica --json'; echo 'wave --json'; echo resume; } |
  "$RUN" $MODEL --steps $STEPS --json --repl --log-level info --config "$(config pause)" > "$W/pause.out" 2> "$W/pause.err" ||
  fail "paused run: $(cat "$W/pause.err")"
py '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ref = json.loads(sys.argv[2])
stats = [json.loads(l) for l in lines if l.startswith("{\"last_loss\"")]
assert len(stats) == 2, f"expected 2 stats answers, got {len(stats)}"
assert stats[0]["step"] == stats[1]["step"], ("the step moved while paused", stats)
assert stats[0]["step"] < ref["steps"], "paused only at the end"
assert stats[0]["step"] >= 1 and stats[0]["tokens_per_s"] > 0, stats[0]
reps = stats[0]["replicas"]
assert reps and all(r["memory_bytes"] > 0 for r in reps), ("every replica holds memory", reps)
assert sum(r["bytes_in"] for r in reps if r["section"] == "llm") > 0, ("the llm received its flows", reps)
assert sum(r["bytes_out"] for r in reps if r["section"] == "vision_proj") > 0, ("the projector sent its flows", reps)
topo = [json.loads(l) for l in lines if l.startswith("{\"actors\"")][0]
expected = 4  # scheduler, data loader, checkpointer, tracer
for l in lines:
    if l.startswith("plan  "):
        f = dict(kv.split(" ") for kv in l.split(": ", 1)[1].split(" (")[0].split(", "))
        expected += int(f["dp"]) * int(f["pp"])
assert topo["count"] == expected == len(topo["actors"]), ("topology count vs the plan", topo["count"], expected)
kinds = {a["kind"] for a in topo["actors"]}
assert {"scheduler", "loader", "checkpointer", "tracer", "section-replica"} <= kinds, kinds
for a in topo["actors"]:
    assert a["process"] > 0 and a["host"] and a["state"], a
one = [json.loads(l) for l in lines if l.startswith("{\"detail\"")][0]
assert one["name"] == "llm/1 replica" and one["section"] == "llm" and one["replica"] == 1 and one["state"] == "idle", one
wave = [json.loads(l) for l in lines if l.startswith("{\"state\"")][0]
assert wave["state"].startswith("paused before step") and wave["step"] == stats[0]["step"], wave
final = json.loads(lines[-1])
assert final["losses"] == ref["losses"], ("losses after pause/resume differ", final["losses"], ref["losses"])
print("pause held step", stats[0]["step"], "for 2 s; topology", topo["count"], "actors; losses identical")
' "$W/pause.out" "$REF" || fail "pause/topology"

# a 10 MiB line, binary garbage and a partial last line while training: refused, the losses unchanged
{ head -c 10485760 /dev/zero | tr '\0' 'a'; echo; py "import random, sys; random.seed(15); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(65536)))"; echo; echo 'stats --json'; printf 'topol'; } |
  "$RUN" $MODEL --steps $STEPS --json --quiet --repl --config "$(config junk)" > "$W/junk.out" 2> "$W/junk.err" ||
  fail "run fed garbage: $(cat "$W/junk.err")"
py '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
ref = json.loads(sys.argv[2])
assert any(l.startswith("error: line too long") for l in lines), "no error for the 10 MiB line"
assert sum(l.startswith("error: ") for l in lines) >= 2, "garbage not refused"
assert any(l.startswith("{\"last_loss\"") for l in lines), "no answer after the garbage"
assert json.loads(lines[-1])["losses"] == ref["losses"], "losses changed"
logged = [l for l in open(sys.argv[3]).read().splitlines() if "] " in l and l.split("] ")[0].endswith(("[info", "[debug", "[trace"))]
assert not logged, ("the default level (warn) logged", logged)
print("10 MiB line and garbage refused; losses unchanged; nothing logged below warn")' "$W/junk.out" "$REF" "$W/junk.err" || fail "garbage"

# over 3 processes (--processes 3), the LLM at tp 2: topology lists every
# replica the plan implies, each answering from the process that hosts it
# (3 distinct pids), and the LLM's tp ranks after each of its replicas;
# detaching (end of input) leaves the run going to the same losses
sed 's/parallel { dp = auto; }/parallel { tp = 2; dp = auto; }/' $MODEL > "$W/tp2.sect"
grep -q 'tp = 2' "$W/tp2.sect" || fail "no tp = 2 in the edited model"
{ echo 'topology --json'; } |
  UCX_TLS=tcp "$RUN" "$W/tp2.sect" --steps $STEPS --json --repl --processes 3 --config "$(config procs)" > "$W/procs.out" 2> "$W/procs.err" ||
  fail "run over 3 processes: $(cat "$W/procs.err")"
py '
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
ref = json.loads(sys.argv[2])
topo = [json.loads(l) for l in lines if l.startswith("{\"actors\"")][0]
replicas = [a for a in topo["actors"] if a["kind"] == "section-replica"]
expected = sum(int(m[1]) * int(m[2]) for m in (re.match(r"plan  \w+: (?:tp \d+, )?dp (\d+), pp (\d+)", l) for l in lines) if m)
assert len(replicas) == expected, ("replicas in topology vs the plan", len(replicas), expected)
pids = {a["process"] for a in replicas}
assert len(pids) == 3, ("replicas should live in 3 processes", pids)
llm = [a["name"] for a in replicas if a["section"] == "llm"]
ranks = [a for a in topo["actors"] if a["kind"] == "tp-rank"]
assert [a["name"] for a in ranks] == [n.removesuffix(" replica") + f" tp{r}" for n in llm for r in (0, 1)], ranks
assert topo["count"] == len(topo["actors"]) == 4 + len(replicas) + len(ranks), topo["count"]  # scheduler, loader, checkpointer, tracer
got, want = json.loads(lines[-1])["losses"], ref["losses"]
assert len(got) == len(want) and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(got, want)), ("losses over 3 processes", got, want)
print("topology over 3 processes:", len(replicas), "replicas in", len(pids), "processes,", len(ranks), "tp ranks; losses equal")' "$W/procs.out" "$REF" || fail "processes"

# checkpoint now, then --resume from it continues with the same losses;
# loglevel: at info (--log-level) the run logs the pause but no step, from
# `loglevel debug` on every step's end, the checkpoint and the steering
{ echo 'loglevel --json'; echo "trace start $W/repl-trace.json"; echo 'step 3'; wait_for 'paused before step 4' "$W/ck.err";
  echo 'trace stop'; echo 'loglevel debug'; echo 'checkpoint --json'; echo resume; } |
  "$RUN" $MODEL --steps $STEPS --json --quiet --repl --log-level info --config "$(config ck)" > "$W/ck.out" 2> "$W/ck.err" ||
  fail "checkpoint run: $(cat "$W/ck.err")"
CK=$(py 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{\"message\""): print(json.loads(l)["message"].split(": ", 1)[1])' "$W/ck.out")
grep -q "^wrote [1-9][0-9]* events to $W/repl-trace.json" "$W/ck.out" || fail "trace stop: $(cat "$W/ck.out")"
py 'import json,sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
names = {e.get("name") for e in ev}
assert {"step 0", "step 1", "step 2"} <= names, sorted(n for n in names if n and n.startswith("step"))' "$W/repl-trace.json" ||
  fail "the trace recorded from the REPL lacks the steps"
[ -d "$CK" ] || fail "checkpoint answered '$CK', not a folder: $(cat "$W/ck.out")"
grep -q '^{"level":"info","ok":true}$' "$W/ck.out" || fail "loglevel --json: $(grep level "$W/ck.out")"
grep -q '^log level debug (was info)' "$W/ck.out" || fail "loglevel debug: $(grep 'log level' "$W/ck.out")"
py 'import sys, re
err = open(sys.argv[1]).read().splitlines()
first = next(i for i, l in enumerate(err) if "[info] repl: log level debug (was info)" in l)
assert not [l for l in err[:first] if "[debug]" in l], ("debug lines at level info", err[:first])
assert any(l.endswith("[info] paused before step 4") for l in err[:first]), ("the pause not logged at info", err[:first])
after = err[first:]
assert any(re.search(r"\[info\] checkpoint of steps 0..3 written: .*step-00000004$", l) for l in after), after
assert any(re.search(r"\[info\] repl: resume: running from step 4$", l) for l in after), after
steps = [int(m.group(1)) for l in after for m in [re.search(r"\[debug\] step (\d+) done: loss", l)] if m]
assert steps and steps == list(range(4, 12)), steps
print("loglevel: no step lines at info; at debug steps", steps[0], "to", steps[-1], "and the checkpoint logged")' "$W/ck.err" ||
  fail "loglevel: $(cat "$W/ck.err")"
case "$CK" in *step-00000004) ;; *) fail "checkpoint after 'step 3' is $CK, not step 4";; esac
"$RUN" $MODEL --steps $STEPS --json --quiet --resume "$CK" --config "$(config resumed)" > "$W/resumed.out" ||
  fail "--resume $CK refused"
py 'import json,sys
ref = json.loads(sys.argv[1]); r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert r["losses"] == ref["losses"][4:], (r["losses"], ref["losses"][4:])
print("checkpoint at step 4 resumed; losses equal the uninterrupted run")' "$REF" "$W/resumed.out" || fail "resume"

# quit: exit 0 with a checkpoint of the steps done
{ echo "step 2"; wait_for 'paused before step 3' "$W/quit.err"; echo quit; } |
  "$RUN" $MODEL --steps $STEPS --json --quiet --repl --log-level info --config "$(config quit)" > "$W/quit.out" 2> "$W/quit.err"
rc=$?
[ $rc -eq 0 ] || fail "quit: exit $rc: $(cat "$W/quit.err")"
py 'import json,sys,os
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert r["steps"] == 3 and r["checkpoint"] and r["checkpoint"].endswith("step-00000003") and os.path.isdir(r["checkpoint"]), r
print("quit after", r["steps"], "steps, exit 0, checkpoint", os.path.basename(r["checkpoint"]))' "$W/quit.out" || fail "quit"
echo PASS
