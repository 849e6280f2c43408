#!/usr/bin/env bash
# Evaluation stop of a DeepRacer-for-cloud-shaped checkout (drgpu's tests; not DRfC's
# file): `docker compose <the FIRST compose file only> -p deepracer-eval-$DR_RUN_ID down`.

STACK_NAME="deepracer-eval-$DR_RUN_ID"

if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  docker stack rm $STACK_NAME
else
  COMPOSE_FILES=$(echo ${DR_EVAL_COMPOSE_FILE} | cut -f1-2 -d\ )
  export DR_CURRENT_PARAMS_FILE=""
  docker compose $COMPOSE_FILES -p $STACK_NAME down
fi
