#!/usr/bin/env bash
# A recipe split by seed across GPU leases too short for it: seed K's chat and cut runs are one recipe folder,
# $WORK/$NAME-sK, two runs in one process. A lease resumes the pair it was given, finishes it, starts the next and
# stops at a deadline, the unfinished pair at the end of a training step with its checkpoints there, so that
# `bench/real_weights.sh keep` can bring it back for the next lease. `bench/pool_seeds.py` pools the folders.
# A group of seeds, K written `1,2,3`, is one folder too ($WORK/$NAME-s1-2-3), all its runs in one process: a
# sampling pass costs mostly its decode steps, which more rows do not add to, so a step of the group costs less
# than its pairs' steps one after another; its kept folder is as many times larger as it has seeds.
#
#   bash bench/real_weights.sh model SHA256                 # once the pieces are in: $WORK/model (may run detached:
#                                                           #   a `run` started meanwhile waits for it)
#   bash bench/pairs.sh run +SECONDS K[,K...] ...           # detached: seeds K... in order, all stopped by then
#                                                           #   (MIN_START=S: start none with under S s left)
#                                                           #   (FINISH_BY=+S: a pair that would end within S s
#                                                           #   of `run` is let finish past the deadline)
#   bash bench/pairs.sh later +SECONDS                      # the deadline moved to SECONDS from now (either way)
#   RUN=$WORK/$NAME-sK bash bench/real_weights.sh poll      # where seed K stands
#   RUN=$WORK/$NAME-sK bash bench/real_weights.sh keep DIR  # after the stop: the pieces to carry on with
#
# `run` resumes seed K from $WORK/keep-sK (the pieces of `keep`, carried in) when its folder is not there yet, and
# gives a seed's folder the untrained team's evaluations (`evals/base-*`) of any other seed's folder in $WORK: they
# are the same for every seed, so the recipe reuses them and plays only the trained runs'. A seed whose recipe
# fails or is stopped ends the sequence. Stages go to $WORK/stages, the recipes' output to $WORK/recipe.log.
# The deadline lives in $WORK/deadline (seconds since the epoch), read every two seconds while a recipe runs: `later`
# lifts it for a pair that would finish soon after it, or brings it forward. With FINISH_BY (the lease's end, less
# what bringing the results back takes), the sequence decides that itself when the deadline comes: it asks
# bench/pair_eta.py how long the running pair still needs (its steps left at its recent pace, then EVAL_SECONDS
# of evaluations) and, when that ends by FINISH_BY, moves the deadline there once; otherwise it stops the pair.
set -euo pipefail
WORK=${WORK:-/tmp/real}
NAME=${NAME:-stable}
PRESET=${PRESET:-paper-stable}
PYTHON=${PYTHON:-python3}
# Up to four batches a sampling pass: a cut run, whose groups rarely differ, takes its eight draws in two passes.
SETS=${SETS:---set train.draw_batches=4 --set eval.batch_evals=4}
# The runs of one seed (the preset's arms): a folder's runs share one process.
RUNS_PER_SEED=${RUNS_PER_SEED:-2}
# A seed starts only with this many seconds left before the deadline: a pair stopped after a few steps costs its
# keep and its carrying back and forth (minutes) for little training, so a lease may rather leave it to the next.
MIN_START=${MIN_START:-60}
# What a pair's evaluations take once its training ends, for FINISH_BY's projection: the trained runs' six
# evaluations (the untrained pair's are reused), generously.
EVAL_SECONDS=${EVAL_SECONDS:-180}

stage() { echo "$1 $(date -u +%T) $(date +%s)" >> "$WORK/stages"; }
usage() { echo "usage: bash bench/pairs.sh run +SECONDS K[,K...] ... | later +SECONDS" >&2; exit 2; }
deadline() { cat "$WORK/deadline"; }
# Written whole (a rename), since the sequence may read it at any moment: at $1 (seconds since the epoch), or $1
# seconds from now.
write_deadline() { echo "$1" > "$WORK/deadline.part" && mv "$WORK/deadline.part" "$WORK/deadline"; }
set_deadline() { write_deadline $(( $(date +%s) + $1 )); }

case "${1:-}" in
run)
    [[ "${2:-}" =~ ^\+[0-9]+$ ]] && [ $# -ge 3 ] || usage
    for k in "${@:3}"; do [[ "$k" =~ ^[0-9]+(,[0-9]+)*$ ]] || usage; done
    [[ "$MIN_START" =~ ^[0-9]+$ ]] || { echo "MIN_START=$MIN_START: give it as whole seconds, e.g. MIN_START=600" >&2; exit 2; }
    [[ "$EVAL_SECONDS" =~ ^[0-9]+$ ]] || { echo "EVAL_SECONDS=$EVAL_SECONDS: give it as whole seconds, e.g. EVAL_SECONDS=180" >&2; exit 2; }
    if [ -n "${FINISH_BY:-}" ]; then
        [[ "$FINISH_BY" =~ ^\+[0-9]+$ ]] && [ "${FINISH_BY#+}" -ge "${2#+}" ] \
            || { echo "FINISH_BY=$FINISH_BY: give the lease's end as +SECONDS from now, no sooner than the deadline ${2}" >&2; exit 2; }
    fi
    [ -f "$WORK/model/config.json" ] || [ -f "$WORK/model.converting" ] \
        || { echo "$WORK/model: no model; run bench/real_weights.sh model SHA256 first" >&2; exit 2; }
    set_deadline "${2#+}"; shift 2
    rm -f "$WORK/finish_by"; [ -z "${FINISH_BY:-}" ] || echo $(( $(date +%s) + ${FINISH_BY#+} )) > "$WORK/finish_by"
    setsid nohup bash "$0" _sequence "$@" >> "$WORK/recipe.log" 2>&1 < /dev/null &
    echo "seeds $* until $(date -u -d @"$(deadline)" +%T) (pid $!)"
    ;;
later)
    [[ "${2:-}" =~ ^\+[0-9]+$ ]] && [ $# = 2 ] || usage
    [ -f "$WORK/deadline" ] \
        || { echo "$WORK/deadline: no deadline to move; start with bash bench/pairs.sh run" >&2; exit 2; }
    set_deadline "${2#+}"
    stage "deadline moved to $(date -u -d @"$(deadline)" +%T)"
    echo "deadline $(date -u -d @"$(deadline)" +%T)"
    ;;
_sequence)
    shift
    # A model still being converted (bench/real_weights.sh model, detached): wait for it, within the deadline.
    if [ ! -f "$WORK/model/config.json" ]; then
        until [ -f "$WORK/model/config.json" ]; do
            if [ ! -f "$WORK/model.converting" ] || [ "$(date +%s)" -ge "$(deadline)" ]; then
                stage "no model: its conversion ended without one, or the deadline came"; stage "sequence end"; exit 1
            fi
            sleep 2
        done
        stage "model converted"
    fi
    data=(); [ ! -d "$WORK/gsm8k" ] || data=(--gsm8k "$WORK/gsm8k")  # a preset of the micro world has none
    for k in "$@"; do
        tag=${k//,/-}  # seeds 1,2,3: the folder $NAME-s1-2-3, its pieces keep-s1-2-3
        seeds=$(( $(tr -cd , <<< "$k" | wc -c) + 1 ))
        run=$WORK/$NAME-s$tag
        if [ ! -d "$run/runs" ] && compgen -G "$WORK/keep-s$tag/keep.*" > /dev/null; then
            RUN=$run bash "$(dirname "$0")/real_weights.sh" resume "$WORK/keep-s$tag" > /dev/null
            stage "seed $k resumed"
        fi
        mkdir -p "$run/evals"
        for base in "$WORK/$NAME"-s*/evals/base-*; do
            [ -f "$base/summary.json" ] && [ ! -e "$run/evals/$(basename "$base")" ] && cp -r "$base" "$run/evals/"
        done
        left=$(( $(deadline) - $(date +%s) ))
        [ $left -gt "$MIN_START" ] || { stage "seed $k not started: the deadline is near"; break; }
        stage "seed $k start"
        rc=0
        # shellcheck disable=SC2086  # SETS is a list of arguments
        "$PYTHON" -m talktosolve.cli recipe --preset "$PRESET" "${data[@]}" --out "$run" \
            --quiet --set model.name_or_path="$WORK/model" --set seeds="$k" \
            --set train.runs_per_process=$(( seeds * RUNS_PER_SEED )) $SETS &
        pid=$!
        # SIGTERM at the deadline as it stands: training stops at the end of the step in progress, checkpoints saved.
        # Unless the pair would end by FINISH_BY: then the deadline moves there, once.
        while kill -0 $pid 2> /dev/null; do
            if [ "$(date +%s)" -ge "$(deadline)" ]; then
                finish=$(cat "$WORK/finish_by" 2> /dev/null || true)
                eta=
                [ -z "$finish" ] || [ "$finish" -le "$(deadline)" ] \
                    || eta=$("$PYTHON" "$(dirname "$0")/pair_eta.py" "$run" --eval-seconds "$EVAL_SECONDS" 2>> "$WORK/recipe.log") \
                    || eta=
                if [ -n "$eta" ] && [ $(( $(date +%s) + eta )) -le "$finish" ]; then
                    write_deadline "$finish"
                    stage "seed $k needs about ${eta} s: deadline moved to $(date -u -d @"$finish" +%T)"
                else
                    kill -TERM $pid; break
                fi
            fi
            sleep 2
        done
        wait $pid || rc=$?
        stage "seed $k end rc=$rc"
        [ $rc = 0 ] || break
    done
    stage "sequence end"
    ;;
*)
    usage
    ;;
esac
