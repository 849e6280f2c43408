#!/usr/bin/env bash
# Training stop of a DeepRacer-for-cloud-shaped checkout (drgpu's tests; not DRfC's file).
# As DRfC's: first the SageMaker trainers rl_coach started for this run (containers
# named ...algo-N-xxxxx... with this run's RUN_ID and model prefix), then
# `docker compose <the FIRST compose file only> -p deepracer-$DR_RUN_ID down`.

STACK_NAME="deepracer-$DR_RUN_ID"

for CONTAINER in $(docker ps -q --filter name=algo-); do
  ENV=$(docker inspect --format '{{join .Config.Env "\n"}}' $CONTAINER)
  if grep -qx "RUN_ID=${DR_RUN_ID}" <<<"$ENV" && grep -qx "MODEL_S3_PREFIX=${DR_LOCAL_S3_MODEL_PREFIX}" <<<"$ENV"; then
    echo "Stopping SageMaker trainer $(docker inspect --format '{{.Name}}' $CONTAINER)"
    docker rm -f -v $CONTAINER >/dev/null
  fi
done

if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  docker stack rm $STACK_NAME
else
  COMPOSE_FILES=$(echo ${DR_TRAIN_COMPOSE_FILE} | cut -f1-2 -d\ )
  export DR_CURRENT_PARAMS_FILE=""
  docker compose $COMPOSE_FILES -p $STACK_NAME down
fi
