#!/usr/bin/env bash
# A recipe split by seed across GPU leases too short for it: seed K's chat and cut runs are one recipe folder,
# $WORK/$NAME-sK, two runs in one process. A lease resumes the pair it was given, finishes it, starts the next and
# stops at a deadline, the unfinished pair at the end of a training step with its checkpoints there, so that
# `bench/real_weights.sh keep` can bring it back for the next lease. `bench/pool_seeds.py` pools the folders.
#
#   bash bench/real_weights.sh model SHA256                 # once the pieces are in: $WORK/model
#   bash bench/pairs.sh run +SECONDS K [K ...]              # detached: seeds K... in order, all stopped by then
#   RUN=$WORK/$NAME-sK bash bench/real_weights.sh poll      # where seed K stands
#   RUN=$WORK/$NAME-sK bash bench/real_weights.sh keep DIR  # after the stop: the pieces to carry on with
#
# `run` resumes seed K from $WORK/keep-sK (the pieces of `keep`, carried in) when its folder is not there yet, and
# gives a seed's folder the untrained team's evaluations (`evals/base-*`) of any other seed's folder in $WORK: they
# are the same for every seed, so the recipe reuses them and plays only the trained runs'. A seed whose recipe
# fails or is stopped ends the sequence. Stages go to $WORK/stages, the recipes' output to $WORK/recipe.log.
set -euo pipefail
WORK=${WORK:-/tmp/real}
NAME=${NAME:-stable}
PRESET=${PRESET:-paper-stable}
PYTHON=${PYTHON:-python3}
# Up to four batches a sampling pass: a cut run, whose groups rarely differ, takes its eight draws in two passes.
SETS=${SETS:---set train.runs_per_process=2 --set train.draw_batches=4 --set eval.batch_evals=4}

stage() { echo "$1 $(date -u +%T) $(date +%s)" >> "$WORK/stages"; }
usage() { echo "usage: bash bench/pairs.sh run +SECONDS K [K ...]" >&2; exit 2; }

case "${1:-}" in
run)
    [[ "${2:-}" =~ ^\+[0-9]+$ ]] && [ $# -ge 3 ] || usage
    [ -f "$WORK/model/config.json" ] || { echo "$WORK/model: no model; run bench/real_weights.sh model SHA256 first" >&2; exit 2; }
    deadline=$(( $(date +%s) + ${2#+} )); shift 2
    setsid nohup bash "$0" _sequence "$deadline" "$@" >> "$WORK/recipe.log" 2>&1 < /dev/null &
    echo "seeds $* until $(date -u -d @"$deadline" +%T) (pid $!)"
    ;;
_sequence)
    deadline=$2; shift 2
    data=(); [ ! -d "$WORK/gsm8k" ] || data=(--gsm8k "$WORK/gsm8k")  # a preset of the micro world has none
    for k in "$@"; do
        run=$WORK/$NAME-s$k
        if [ ! -d "$run/runs" ] && compgen -G "$WORK/keep-s$k/keep.*" > /dev/null; then
            RUN=$run bash "$(dirname "$0")/real_weights.sh" resume "$WORK/keep-s$k" > /dev/null
            stage "seed $k resumed"
        fi
        mkdir -p "$run/evals"
        for base in "$WORK/$NAME"-s*/evals/base-*; do
            [ -f "$base/summary.json" ] && [ ! -e "$run/evals/$(basename "$base")" ] && cp -r "$base" "$run/evals/"
        done
        left=$(( deadline - $(date +%s) ))
        [ $left -gt 60 ] || { stage "seed $k not started: the deadline is near"; break; }
        stage "seed $k start"
        rc=0
        # shellcheck disable=SC2086  # SETS is a list of arguments
        timeout -s TERM $left "$PYTHON" -m talktosolve.cli recipe --preset "$PRESET" "${data[@]}" --out "$run" \
            --quiet --set model.name_or_path="$WORK/model" --set seeds="$k" $SETS || rc=$?
        stage "seed $k end rc=$rc"
        [ $rc = 0 ] || break
    done
    stage "sequence end"
    ;;
*)
    usage
    ;;
esac
