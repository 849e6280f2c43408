#!/usr/bin/env bash
# A DeepRacer-for-cloud-shaped bin/activate.sh, written for drgpu's tests (not DRfC's
# file): `source bin/activate.sh [run.env]` exports what DRfC's activation exports.
#   - DR_DIR, DR_CONFIG (the run.env in use: the argument, else $DR_DIR/run.env)
#   - every key of system.env, then of run.env, each line evaluated as bash does
#     (`eval "export KEY=VALUE"`), so `$VAR` and `${VAR}` expand
#   - DR_RUN_ID (default 0), DR_DOCKER_STYLE (default swarm), DR_DOCKER_FILE_SEP
#     (-c for swarm, else -f), the robomaker ports, AWS_DEFAULT_REGION
#   - DR_LOCAL_ACCESS_KEY_ID / DR_LOCAL_SECRET_ACCESS_KEY (DRfC reads them from the AWS
#     profile; here a fixed stand-in) and DR_LOCAL_S3_AUTH_MODE
#   - DR_TRAIN_COMPOSE_FILE / DR_EVAL_COMPOSE_FILE: "-f a.yml -f b.yml" (or -c ...)
#   - DR_DOCKER_MAJOR_VERSION, the docker CLI's major version (the swarm start scripts
#     add --detach=true above 24)
# and creates the external network sagemaker-local (internal here: the tests use no
# outside network). It also defines dr-update-env and, from scripts_wrapper.sh,
# dr-start-training, dr-stop-training, dr-start-evaluation and dr-stop-evaluation.
# Fixture-only: DR_DOCKER_SOCKET, the engine socket rl_coach mounts (from DOCKER_HOST).

_dr_load_env_file() {
  # DRfC's loop, word for word: lines not starting with #, split into words (and globbed)
  # by bash, each word cut at its first and second =, then evaluated.
  LINES=$(grep -v '^#' $1)
  for l in $LINES; do
    env_var=$(echo $l | cut -f1 -d\=)
    env_val=$(echo $l | cut -f2 -d\=)
    eval "export $env_var=$env_val"
  done
}

function dr-update-env {
  if [[ ! -f "$DR_DIR/system.env" ]]; then
    echo "File system.env does not exist."
    return 1
  fi
  _dr_load_env_file "$DR_DIR/system.env"
  if [[ ! -f "$DR_CONFIG" ]]; then
    echo "File ${DR_CONFIG} does not exist."
    return 1
  fi
  _dr_load_env_file "$DR_CONFIG"
  if [[ -z "${DR_RUN_ID}" ]]; then
    export DR_RUN_ID=0
  fi
  if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
    export DR_ROBOMAKER_TRAIN_PORT=$((8080 + DR_RUN_ID))
    export DR_ROBOMAKER_EVAL_PORT=$((8180 + DR_RUN_ID))
    export DR_ROBOMAKER_GUI_PORT=$((5900 + DR_RUN_ID))
  else
    export DR_ROBOMAKER_TRAIN_PORT="8080-8089"
    export DR_ROBOMAKER_EVAL_PORT="8080-8089"
    export DR_ROBOMAKER_GUI_PORT="5901-5920"
  fi
  export AWS_DEFAULT_REGION=${DR_AWS_APP_REGION}
}

DR_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." >/dev/null 2>&1 && pwd)"
export DR_DIR

if [[ -n "$1" && -f "$1" ]]; then
  export DR_CONFIG="$(realpath "$1")"
elif [[ -f "$DR_DIR/run.env" ]]; then
  export DR_CONFIG="$DR_DIR/run.env"
else
  echo "No configuration file."
  return 1
fi
dr-update-env || return 1

if [[ -z "${DR_DOCKER_STYLE}" ]]; then
  export DR_DOCKER_STYLE="swarm"
fi
if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  export DR_DOCKER_FILE_SEP="-c"
else
  export DR_DOCKER_FILE_SEP="-f"
fi

if ! docker network inspect sagemaker-local >/dev/null 2>&1; then
  if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
    # DRfC: a swarm-scoped overlay, so that stack services can join it.
    docker network create --driver overlay --attachable --scope swarm --internal \
      sagemaker-local >/dev/null 2>&1
  else
    docker network create --internal \
      --label com.docker.compose.network=sagemaker-local \
      --label com.docker.compose.project=sagemaker-local sagemaker-local >/dev/null 2>&1
  fi
fi

case "${DOCKER_HOST:-}" in
  unix://*) export DR_DOCKER_SOCKET="${DOCKER_HOST#unix://}" ;;
  *) export DR_DOCKER_SOCKET=/var/run/docker.sock ;;
esac

DR_TRAIN_COMPOSE_FILE="$DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-training.yml"
DR_EVAL_COMPOSE_FILE="$DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-eval.yml"
if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  DR_TRAIN_COMPOSE_FILE="$DR_TRAIN_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-training-swarm.yml"
  DR_EVAL_COMPOSE_FILE="$DR_EVAL_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-eval-swarm.yml"
fi

# DRfC: `aws --profile $DR_LOCAL_S3_PROFILE configure get ...`; a fixed stand-in here.
export DR_LOCAL_ACCESS_KEY_ID="fixture-access-key"
export DR_LOCAL_SECRET_ACCESS_KEY="fixture-secret-key"
export DR_LOCAL_S3_AUTH_MODE="profile"
DR_TRAIN_COMPOSE_FILE="$DR_TRAIN_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-keys.yml"
DR_EVAL_COMPOSE_FILE="$DR_EVAL_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-keys.yml"

export DR_TRAIN_COMPOSE_FILE
export DR_EVAL_COMPOSE_FILE

DR_DOCKER_MAJOR_VERSION=$(docker --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1 | cut -d. -f1)
export DR_DOCKER_MAJOR_VERSION
export DR_LOCAL_PROFILE_ENDPOINT_URL=""

source "$DR_DIR/bin/scripts_wrapper.sh"
