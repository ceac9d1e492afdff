#!/usr/bin/env bash
# The paper recipe on real weights (a tied GGUF file: Qwen2.5-Coder-1.5B-Instruct in the run of record) on a GPU
# machine reached only through calls of limited size: the file travels in pieces, one per call, and the run
# outlives the calls.
#
#   bash bench/real_weights.sh take .gguf/piece.a     # once per piece, in order (each call copies one to /tmp)
#   bash bench/real_weights.sh model SHA256           # join the pieces, check, convert once to $WORK/model
#   bash bench/real_weights.sh start SHA256 [--set KEY=VALUE ...]  # `model`, then start the recipe detached
#                                                     # (STOP_AFTER=SECONDS: stop it then, as `stop` does)
#   bash bench/real_weights.sh time SHA256 [--set KEY=VALUE ...]   # `start`, timed by bench/recipe_timing.py
#                                                     # ($WORK/timing.json once it ends)
#   bash bench/real_weights.sh poll                   # the log's tail and each run's last step
#   bash bench/real_weights.sh watch DEST [SECONDS]   # until the recipe ends, DEST kept current (a call's $OUT)
#   bash bench/real_weights.sh interrupt 20           # kill the run once each run has checkpoint 20 (then start)
#   bash bench/real_weights.sh pack DEST [all]        # results, report, plots, logs (no weights) as one tar
#   bash bench/real_weights.sh stop                   # SIGTERM: the recipe stops after its step, checkpoints there
#   bash bench/real_weights.sh keep DIR               # the folder in 16 MiB pieces that a later lease resumes from
#   bash bench/real_weights.sh resume DIR             # (next lease, pieces carried in) unpack them, then `start`
#   bash bench/real_weights.sh save-cache DEST        # torch inductor's compile cache on this machine, as one tgz
#   bash bench/real_weights.sh load-cache TGZ         # (next lease, before the recipe) its first step compiles less
#
# The run is `talktosolve recipe --preset $PRESET` (default paper) with the model and GSM8K folder below and six runs per process.
# Run again after an interruption, `start` resumes the same folder (the recipe is resumable step by step).
set -euo pipefail
WORK=${WORK:-/tmp/real}
RUN=${RUN:-$WORK/paper}
PRESET=${PRESET:-paper}
GSM8K=${GSM8K:-.gpu/gsm8k}
mkdir -p "$WORK"

case "${1:-}" in
take)
    cp "$2" "$WORK/$(basename "$2")"
    ls -l "$WORK"
    ;;
model)
    # Into model.part, then renamed: $WORK/model exists only whole, so a later step (or `bench/pairs.sh`) can wait
    # for it while this runs detached, as the kept pieces are carried in.
    if [ ! -f "$WORK/model/config.json" ]; then
        # While this runs, `bench/pairs.sh run` may start: its sequence waits for the model while this marker is here.
        touch "$WORK/model.converting"
        trap 'rm -f "$WORK/model.converting"' EXIT
        cat "$WORK"/piece.* > "$WORK/tied.gguf"
        rm -rf "$WORK/model.part"
        python3 bench/gguf_to_folder.py "$WORK/tied.gguf" "$WORK/model.part" --sha256 "$2" 2>&1 | grep -v '%|'
        mv "$WORK/model.part" "$WORK/model"
        rm -f "$WORK"/piece.* "$WORK/tied.gguf"
    fi
    [ -d "$WORK/gsm8k" ] || cp -r "$GSM8K" "$WORK/gsm8k"  # the tree's copy may be replaced by a later call
    ;;
start | time)
    # start: `model`, then the recipe detached. time: the same recipe run by bench/recipe_timing.py, which writes
    # $WORK/timing.json when it ends (`watch` copies it); its folder must be new, since a resumed recipe would time
    # only what was left.
    [ -n "${2:-}" ] || { echo "usage: bash bench/real_weights.sh $1 SHA256 [--set KEY=VALUE ...]" >&2; exit 2; }
    verb=$1 sha=$2; shift 2
    bash "$0" model "$sha"
    recipe=(--preset "$PRESET" --gsm8k "$WORK/gsm8k" --out "$RUN" --quiet --set model.name_or_path="$WORK/model"
            --set train.runs_per_process=6 "$@")
    if [ "$verb" = time ]; then
        run=(python3 bench/recipe_timing.py --out "$WORK/timing.json" -- "${recipe[@]}") said=", timed"
    else
        # STOP_AFTER=SECONDS: SIGTERM after that long, so the recipe stops at a step's end with every run's
        # checkpoint there, in time to `keep` it before the lease ends.
        limit=(); [ -z "${STOP_AFTER:-}" ] || limit=(timeout -s TERM "$STOP_AFTER")
        run=("${limit[@]}" python3 -m talktosolve.cli recipe "${recipe[@]}") said=""
    fi
    setsid nohup "${run[@]}" >>"$WORK/recipe.log" 2>&1 < /dev/null &
    echo $! > "$WORK/recipe.pid"
    echo "started pid $! at $(date -u +%H:%M:%S)$said" | tee -a "$WORK/starts.log"
    ;;
watch)
    # While the recipe `start` or `time` began runs, DEST gets every SECONDS (default 5) the configs, each run's
    # metrics, the finished evaluations' summaries and the results (watch.tgz), `time`'s timing.json and the log's
    # tail, each file replaced whole: a call the lease cuts short still brings back the last copy. A last copy is
    # made after the recipe ends; then it returns. A recipe started otherwise is watched once its pid is in
    # $WORK/recipe.pid.
    [ -n "${2:-}" ] || { echo "usage: bash bench/real_weights.sh watch DEST [SECONDS]" >&2; exit 2; }
    [ -f "$WORK/recipe.pid" ] || { echo "no $WORK/recipe.pid: start the recipe (bash $0 start SHA256)" >&2; exit 1; }
    pid=$(cat "$WORK/recipe.pid")
    dest=$(mkdir -p "$2" && cd "$2" && pwd)
    while :; do
        # Whether it runs is read before copying, so the copy after its end is made whole. A recipe that ended and
        # that no parent has reaped yet (state Z) has ended too.
        running=0
        if kill -0 "$pid" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" != Z ]; then
            running=1
        fi
        if [ -d "$RUN" ]; then
            # tar exits 1 when a file changed while it read it (a step appending its metrics): the archive is
            # written all the same, that file's last line possibly cut, and the copy after the end is whole.
            rc=0
            (cd "$RUN" && find . \( -name config.json -o -name metrics.jsonl -o -name summary.json \
                -o -name results.json \) -print0 \
                | tar --null --warning=no-file-changed -T - -czf "$dest/.watch.tgz") || rc=$?
            [ "$rc" -gt 1 ] || mv "$dest/.watch.tgz" "$dest/watch.tgz"
        fi
        if [ -f "$WORK/timing.json" ] && cp "$WORK/timing.json" "$dest/.timing.json"; then
            mv "$dest/.timing.json" "$dest/timing.json"
        fi
        if tail -c 20000 "$WORK/recipe.log" > "$dest/.recipe.log.tail" 2>/dev/null; then
            mv "$dest/.recipe.log.tail" "$dest/recipe.log.tail"
        fi
        [ "$running" = 1 ] || break
        sleep "${3:-5}"
    done
    ;;
poll)
    date -u +%H:%M:%S
    grep -v -i -E 'warn|^\s*$' "$WORK/recipe.log" | tail -n 8 || true
    RUN=$RUN python3 - <<'PY'
import glob, json, os
for m in sorted(glob.glob(os.environ["RUN"] + "/runs/*/metrics.jsonl")):
    rows = [json.loads(line) for line in open(m)]
    if rows:
        r = rows[-1]
        keep = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()
                if k in ("step", "train/reward", "talk/send", "talk/use", "perf/seconds", "perf/skipped",
                         "perf/samples", "perf/peak_gpu_gb") or k.startswith("train/")}
        print(os.path.basename(os.path.dirname(m)), json.dumps(keep))
PY
    ls "$RUN/evals" 2>/dev/null | tr '\n' ' '; echo
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader || true
    ;;
interrupt)
    # A lease can end mid-run: kill the recipe once every run has written checkpoint step-$2, then start it again
    # (a test of resuming by hand; `stop` is what keeps a step).
    step=$(printf '%06d' "$2")
    at() { ls -d "$RUN"/runs/*/checkpoints/step-"$step" 2>/dev/null | wc -l; }
    runs() { ls -d "$RUN"/runs/*/ 2>/dev/null | wc -l; }
    until [ "$(at)" -gt 0 ] && [ "$(at)" -ge "$(runs)" ]; do sleep 2; done
    sleep 1
    pkill -9 -f 'talktosolve.cli recipe' && echo "killed at $(date -u +%H:%M:%S) after step $2" | tee -a "$WORK/starts.log"
    sleep 2
    ;;
pack)
    # $2: the tar to write; $3 (optional) "all" adds the transcripts and chats for diagnosis.
    skip=(--exclude='*.safetensors' --exclude='*.pt' --exclude='checkpoints' --exclude='final')
    [ "${3:-}" = all ] || skip+=(--exclude='transcripts.jsonl' --exclude='chats.jsonl')
    logs=(); for f in recipe.log starts.log stages; do [ ! -f "$WORK/$f" ] || logs+=("$f"); done
    tar -C "$RUN" "${skip[@]}" -czf "$2" . -C "$WORK" "${logs[@]}"
    ls -l "$2"
    ;;
stop)
    # Before the lease ends: the recipe stops when the training step in progress ends, every run's checkpoint saved
    # there (talktosolve/experiment/stopping.py), so `keep` loses no step. In its evaluations it ends at once (the
    # finished ones are kept).
    pkill -TERM -f 'talktosolve.cli recip[e]' || { echo "no recipe is running" >&2; exit 1; }
    while pgrep -f 'talktosolve.cli recip[e]' > /dev/null; do sleep 1; done
    grep -v -i warn "$WORK/recipe.log" | tail -n 1 || true
    ls "$RUN"/runs/*/checkpoints 2>/dev/null || true
    ;;
keep)
    # A lease ends and keeps nothing: $2 gets the recipe folder gzipped in 16 MiB pieces (keep.tgz.000, ...), each finished
    # run with its final weights and no checkpoints, each unfinished run with one checkpoint: the newest step that
    # every unfinished run has (runs sharing a process resume together from it), about 440 MB for a paper run
    # (37M adapter parameters and two Adam moments in fp32; `stop` first puts it at the last step). gzip -1
    # shrinks the transcripts, not the weights: a pair of paper-stable runs at step 60 was 51 pieces, 73 without.
    # Bring them back four a call ($OUT holds 64 MiB), carry them to the next lease and `resume` there; `start`
    # then goes on from that checkpoint. A call carries 64 MiB with the tracked tree (21 MB), so rejoin them into
    # bigger pieces first (`cat keep.tgz.* | split -b 40M -d -a 3 - keep.tgz.`: a pair's 50 pieces become 20).
    mkdir -p "$2"
    skip=() common= first=1
    for r in "$RUN"/runs/*/; do
        [ -f "$r/done.json" ] && continue
        steps=$(ls "$r"checkpoints 2>/dev/null | { grep '^step-' || true; } | sort || true)
        if [ $first = 1 ]; then common=$steps; first=0; else common=$(comm -12 <(echo "$common") <(echo "$steps")); fi
    done
    keep=$(echo "$common" | { grep . || true; } | tail -n 1)
    [ $first = 1 ] || [ -n "$keep" ] || echo "no checkpoint step common to the unfinished runs: they start over" >&2
    for r in "$RUN"/runs/*/; do
        name=runs/$(basename "$r")
        if [ -f "$r/done.json" ]; then skip+=(--exclude="./$name/checkpoints"); continue; fi
        for c in "$r"checkpoints/*; do
            [ -e "$c" ] && [ "$(basename "$c")" != "$keep" ] && skip+=(--exclude="./$name/checkpoints/$(basename "$c")")
        done
    done
    tar -C "$RUN" "${skip[@]}" -cf - . | gzip -1 | split -b 16777216 -d -a 3 - "$2/keep.tgz."
    ls -l "$2"
    ;;
resume)
    # $2: the pieces `keep` wrote, carried in; unpacked into the recipe folder (keep.tar.*: as kept before gzip).
    mkdir -p "$RUN"
    if compgen -G "$2/keep.tgz.*" > /dev/null; then cat "$2"/keep.tgz.* | tar -xz -C "$RUN"
    else cat "$2"/keep.tar.* | tar -x -C "$RUN"; fi
    ls "$RUN/runs"
    ;;
save-cache | load-cache)
    # A process's first step compiles the learner's layers (torch inductor, its Triton kernels); torch keeps what it
    # compiled in this folder and reuses it in a later process of the same code, torch and GPU, but a lease ends
    # with its disk. Carried from one lease to the next, the cache makes the next recipe's first step cheaper.
    dir=${TORCHINDUCTOR_CACHE_DIR:-/tmp/torchinductor_$(whoami)}
    [ -n "${2:-}" ] || { echo "usage: bash bench/real_weights.sh $1 FILE" >&2; exit 2; }
    if [ "$1" = save-cache ]; then
        [ -d "$dir" ] || { echo "no compile cache at $dir: it is written by a recipe's first step on this machine" >&2; exit 1; }
        tar -C "$dir" -czf "$2" .
    else
        [ -f "$2" ] || { echo "no file $2: carry in what save-cache wrote in an earlier lease" >&2; exit 1; }
        mkdir -p "$dir" && tar -xzf "$2" -C "$dir"
    fi
    du -sh "$dir" "$2" | tr '\n' ' '; echo
    ;;
*)
    echo "usage: bash bench/real_weights.sh take PIECE | model SHA256 | start SHA256 [--set K=V ...] | time SHA256 [--set K=V ...] | poll | watch DEST [SECONDS] | interrupt STEP | pack DEST [all] | stop | keep DIR | resume DIR | save-cache FILE | load-cache FILE" >&2
    exit 2
    ;;
esac
