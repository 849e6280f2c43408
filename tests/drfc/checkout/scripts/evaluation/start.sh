#!/usr/bin/env bash
# Evaluation start of a DeepRacer-for-cloud-shaped checkout (drgpu's tests; not DRfC's
# file). Same interface and Compose call as DRfC's scripts/evaluation/start.sh:
#   start.sh [-q] [-c]     (project deepracer-eval-$DR_RUN_ID, no --scale)

source "$DR_DIR/bin/scripts_wrapper.sh"

usage() {
  echo "Usage: $0 [-q] [-c]"
  echo "       -q        Quiet - does not start log tracing."
  echo "       -c        Clone - copies model into new prefix before evaluating."
  exit 1
}

trap 'echo "Requested to stop."; exit 1' INT

while getopts ":qc" opt; do
  case $opt in
  q) OPT_QUIET="QUIET" ;;
  c) OPT_CLONE="CLONE" ;;
  \?)
    echo "Invalid option -$OPTARG" >&2
    usage
    ;;
  esac
done

STACK_NAME="deepracer-eval-$DR_RUN_ID"
if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  if [[ "$(docker stack ps $STACK_NAME 2>/dev/null | wc -l)" -gt 1 ]]; then
    echo "ERROR: Processes running in stack $STACK_NAME. Stop evaluation with dr-stop-evaluation."
    exit 1
  fi
fi

echo "Evaluation of model s3://$DR_LOCAL_S3_BUCKET/$DR_LOCAL_S3_MODEL_PREFIX starting."
echo "Using image ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}"

BUCKET_DIR="$DR_DIR/data/minio/$DR_LOCAL_S3_BUCKET"
if [ -n "$OPT_CLONE" ]; then
  echo "Cloning model into s3://$DR_LOCAL_S3_BUCKET/${DR_LOCAL_S3_MODEL_PREFIX}-E"
  mkdir -p "$BUCKET_DIR/${DR_LOCAL_S3_MODEL_PREFIX}-E"
  cp -r "$BUCKET_DIR/$DR_LOCAL_S3_MODEL_PREFIX/." "$BUCKET_DIR/${DR_LOCAL_S3_MODEL_PREFIX}-E/" 2>/dev/null
  export DR_LOCAL_S3_MODEL_PREFIX=${DR_LOCAL_S3_MODEL_PREFIX}-E
fi

S3_PATH="s3://$DR_LOCAL_S3_BUCKET/$DR_LOCAL_S3_MODEL_PREFIX"
export ROBOMAKER_COMMAND="/opt/ml/code/run.sh run evaluation.launch.py"
export DR_CURRENT_PARAMS_FILE=${DR_LOCAL_S3_EVAL_PARAMS_FILE}

if [ ${DR_ROBOMAKER_MOUNT_LOGS,,} = "true" ]; then
  COMPOSE_FILES="$DR_EVAL_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-mount.yml"
  export DR_MOUNT_DIR="$DR_DIR/data/logs/robomaker/$DR_LOCAL_S3_MODEL_PREFIX"
  mkdir -p $DR_MOUNT_DIR
else
  COMPOSE_FILES="$DR_EVAL_COMPOSE_FILE"
fi

echo "Creating Robomaker configuration in $S3_PATH/$DR_CURRENT_PARAMS_FILE"
python3 $DR_DIR/scripts/training/prepare-config.py >/dev/null

if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  if [ "$DR_DOCKER_MAJOR_VERSION" -gt 24 ]; then
    DETACH_FLAG="--detach=true"
  fi
  docker stack deploy $COMPOSE_FILES $DETACH_FLAG $STACK_NAME
else
  docker compose $COMPOSE_FILES -p $STACK_NAME up -d
fi

if [ -n "$OPT_QUIET" ]; then
  exit 0
fi
# DRfC follows the simulator's log here (dr-logs-robomaker -e); this fixture does not.
