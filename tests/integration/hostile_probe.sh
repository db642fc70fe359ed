#!/bin/sh
# Hostile build step (tests/integration/hostile_build_test.sh): tries what an agent-written
# build step must not be able to do, and records one line per attempt, to $H_OUT and stdout:
#   RESULT <attempt> BLOCKED|LEAK|STARTED|ALLOWED <detail>
# LEAK means the attempt reached something kiln protects. Inputs (build args / env): H_AUTH
# (registry auth file), H_STATE (kiln's state dir), H_VICTIM (a file in another candidate's
# workspace), H_VICTIM_STORE (another candidate's build storage), H_PORTS (kiln HTTP, registry,
# Kubernetes stand-in), H_PIDS (host pids of kiln and of another build), H_FILL_DIR, H_FILL_MB.
OUT=${H_OUT:-/results.txt}
mkdir -p "$(dirname "$OUT")" 2>/dev/null
: > "$OUT"
res() { echo "RESULT $1 $2 $3" | tee -a "$OUT"; }
TMP=${TMPDIR:-/tmp}
PAT=$TMP/.hostile-pat
# Patterns assembled at run time, so that no command line or file of this step contains them.
printf '%s%s\n' kiln-hostile- secret > "$PAT"
printf '"%s%s"\n' au ths >> "$PAT"

# 1. The registry credential by path.
if cat "$H_AUTH" 2>/dev/null | grep -q -f "$PAT"; then res auth_file LEAK "$H_AUTH"
else res auth_file BLOCKED "$(cat "$H_AUTH" 2>&1 | head -c 80 | tr '\n' ' ')"; fi

# 2. Every process's environment, command line and root.
n=0; leak=""
for d in /proc/[0-9]*; do
  n=$((n + 1))
  for f in environ cmdline; do
    if tr '\0' '\n' < "$d/$f" 2>/dev/null | grep -q -f "$PAT"; then leak="$leak $d/$f"; fi
  done
  if cat "$d/root$H_AUTH" 2>/dev/null | grep -q -f "$PAT"; then leak="$leak $d/root$H_AUTH"; fi
  if [ -n "$(ls -A "$d/root$H_STATE" 2>/dev/null)" ]; then leak="$leak $d/root$H_STATE"; fi
  if cat "$d/root$H_VICTIM" 2>/dev/null | grep -q -f "$PAT"; then leak="$leak $d/root$H_VICTIM"; fi
done
if [ -n "$leak" ]; then res proc_walk LEAK "$leak"; else res proc_walk BLOCKED "pids_visible=$n"; fi

# 3. Signals to kiln and to another build (host pids).
for p in $H_PIDS; do
  if kill -0 "$p" 2>/dev/null; then
    # A pid that exists in this PID namespace is one of the build's own processes: only a
    # process that is not ours is a leak, and `kill -0` cannot tell; record without killing.
    if [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' < "/proc/$p/cmdline" | grep -q "kiln\|sleep 43"; then
      kill -TERM "$p" 2>/dev/null && res "signal_$p" LEAK "signalled" || res "signal_$p" BLOCKED "visible"
    else
      res "signal_$p" BLOCKED "pid $p is not kiln's here"
    fi
  else
    res "signal_$p" BLOCKED "$(kill -0 "$p" 2>&1 | head -c 60)"
  fi
done

# 4. Connections to kiln's HTTP port, the registry and the Kubernetes API stand-in.
connect() {
  if command -v busybox >/dev/null 2>&1; then
    busybox nc -w 2 127.0.0.1 "$1" </dev/null >/dev/null 2>&1
  elif command -v bash >/dev/null 2>&1; then
    timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
  else
    return 1
  fi
}
for port in $H_PORTS; do
  if connect "$port"; then res "connect_$port" LEAK "connected"; else res "connect_$port" BLOCKED "refused"; fi
done

# 5. Another candidate's workspace and build storage, and kiln's state directory.
if cat "$H_VICTIM" 2>/dev/null | grep -q -f "$PAT"; then res other_workspace LEAK "$H_VICTIM"
else res other_workspace BLOCKED "unreadable"; fi
if [ -n "$(ls -A "$H_VICTIM_STORE" 2>/dev/null)" ]; then res other_storage LEAK "$H_VICTIM_STORE"
else res other_storage BLOCKED "unreadable"; fi
if [ -n "$(ls -A "$H_STATE" 2>/dev/null)" ]; then res state_dir LEAK "$H_STATE"
else res state_dir BLOCKED "unreadable"; fi

# 6. A background process that tries to outlive the build.
(setsid sleep 4343 >/dev/null 2>&1 &) 2>/dev/null
nohup sleep 4344 >/dev/null 2>&1 &
res background STARTED "sleep 4343, sleep 4344"

# 7. Fill the disk (bounded: at most H_FILL_MB MiB).
F=$H_FILL_DIR/hostile-fill
if dd if=/dev/zero of="$F" bs=1048576 count="$H_FILL_MB" 2>/dev/null; then
  res disk_fill LEAK "wrote $(wc -c < "$F") bytes"
else
  res disk_fill BLOCKED "stopped at $(wc -c < "$F" 2>/dev/null) bytes"
fi
rm -f "$F" "$PAT"
exit 0
