#!/usr/bin/env bash
# The dr-* commands of a DeepRacer-for-cloud-shaped checkout (drgpu's tests).

function dr-start-training {
  dr-update-env
  "$DR_DIR/scripts/training/start.sh" "$@"
}

function dr-stop-training {
  bash -c "cd $DR_DIR/scripts/training && ./stop.sh"
}

function dr-start-evaluation {
  dr-update-env
  "$DR_DIR/scripts/evaluation/start.sh" "$@"
}

function dr-stop-evaluation {
  bash -c "cd $DR_DIR/scripts/evaluation && ./stop.sh"
}
