#!/usr/bin/env bash
# Training start of a DeepRacer-for-cloud-shaped checkout (drgpu's tests; not DRfC's file).
# Same interface and the same Compose call as DRfC's scripts/training/start.sh:
#   start.sh [-w] [-q | -s | -r [n] | -a] [-v]
# The S3 bucket is the folder $DR_DIR/data/minio/$DR_LOCAL_S3_BUCKET (DRfC's local minio
# keeps it there); `aws s3 cp/ls/rm` become cp, ls and rm on it.

source "$DR_DIR/bin/scripts_wrapper.sh"

usage() {
  echo "Usage: $0 [-w] [-q | -s | -r [n] | -a ] [-v]"
  echo "       -w        Wipes the target AWS DeepRacer model structure before upload."
  echo "       -q        Do not output / follow a log when starting."
  echo "       -a        Follow all Sagemaker and Robomaker logs."
  echo "       -s        Follow Sagemaker logs (default)."
  echo "       -v        Updates the viewer webpage."
  echo "       -r [n]    Follow Robomaker logs for worker n (default worker 0 / replica 1)."
  exit 1
}

trap 'echo "Requested to stop."; exit 1' INT

while getopts ":whqsavr:" opt; do
  case $opt in
  w) OPT_WIPE="WIPE" ;;
  q) OPT_QUIET="QUIET" ;;
  s | a | v) ;;
  r) [[ $OPTARG =~ ^[0-9]+$ ]] || ((OPTIND--)) ;;
  h) usage ;;
  \?)
    echo "Invalid option -$OPTARG" >&2
    usage
    ;;
  esac
done

STACK_NAME="deepracer-$DR_RUN_ID"
if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  if [[ "$(docker stack ps $STACK_NAME 2>/dev/null | wc -l)" -gt 1 ]]; then
    echo "ERROR: Processes running in stack $STACK_NAME. Stop training with dr-stop-training."
    exit 1
  fi
fi

BUCKET_DIR="$DR_DIR/data/minio/$DR_LOCAL_S3_BUCKET"
WORK_DIR=${DR_DIR}/tmp/start/
mkdir -p ${WORK_DIR}
rm -f ${WORK_DIR}/*
for KEY in "$DR_LOCAL_S3_REWARD_KEY" "$DR_LOCAL_S3_MODEL_METADATA_KEY" "$DR_LOCAL_S3_HYPERPARAMETERS_KEY"; do
  if ! cp "$BUCKET_DIR/$KEY" "$WORK_DIR" 2>/dev/null; then
    echo "Training aborted. Configuration files were not found."
    echo "Manually check that the following file exists: s3://${DR_LOCAL_S3_BUCKET}/${KEY}"
    exit 1
  fi
done
echo "Training of model s3://$DR_LOCAL_S3_BUCKET/$DR_LOCAL_S3_MODEL_PREFIX starting."
echo "Using image ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}"

S3_PATH="s3://$DR_LOCAL_S3_BUCKET/$DR_LOCAL_S3_MODEL_PREFIX"
MODEL_DIR="$BUCKET_DIR/$DR_LOCAL_S3_MODEL_PREFIX"
if [[ -n "$(ls -A "$MODEL_DIR" 2>/dev/null)" ]]; then
  if [[ -z $OPT_WIPE ]]; then
    echo "Selected path $S3_PATH exists. Delete it, or use -w option. Exiting."
    exit 1
  fi
  echo "Wiping path $S3_PATH."
  rm -rf "$MODEL_DIR"
fi

if [ ${DR_ROBOMAKER_MOUNT_LOGS,,} = "true" ]; then
  COMPOSE_FILES="$DR_TRAIN_COMPOSE_FILE $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-mount.yml"
  export DR_MOUNT_DIR="$DR_DIR/data/logs/robomaker/$DR_LOCAL_S3_MODEL_PREFIX"
  mkdir -p $DR_MOUNT_DIR
else
  COMPOSE_FILES="$DR_TRAIN_COMPOSE_FILE"
fi

export DR_CURRENT_PARAMS_FILE=${DR_LOCAL_S3_TRAINING_PARAMS_FILE}
WORKER_CONFIG=$(python3 $DR_DIR/scripts/training/prepare-config.py)

if [ "$DR_WORKERS" -gt 1 ]; then
  echo "Starting $DR_WORKERS workers"
  if [[ "${DR_DOCKER_STYLE,,}" != "swarm" ]]; then
    mkdir -p $DR_DIR/tmp/comms.$DR_RUN_ID
    rm -rf $DR_DIR/tmp/comms.$DR_RUN_ID/*
    COMPOSE_FILES="$COMPOSE_FILES $DR_DOCKER_FILE_SEP $DR_DIR/docker/docker-compose-robomaker-multi.yml"
  fi
  if [ "$DR_TRAIN_MULTI_CONFIG" == "True" ]; then
    export MULTI_CONFIG=$WORKER_CONFIG
  fi
  export ROBOMAKER_COMMAND="/opt/ml/code/run.sh multi distributed_training.launch.py"
else
  export ROBOMAKER_COMMAND="/opt/ml/code/run.sh run distributed_training.launch.py"
fi
echo "Creating Robomaker configuration in $S3_PATH/$DR_LOCAL_S3_TRAINING_PARAMS_FILE"

if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  # As DRfC's: some node must carry each placement label (read with jq), then the deploy.
  for ROLE in Robomaker Sagemaker; do
    NODES=$(docker node ls --format '{{.ID}}' | xargs docker inspect |
      jq ".[] | select (.Spec.Labels.$ROLE == \"true\") | .ID" | wc -l)
    if [[ "$NODES" -eq 0 ]]; then
      echo "ERROR: No Swarm Nodes labelled for placement of $ROLE. Please add $ROLE node."
      echo "       Example: docker node update --label-add $ROLE=true $(docker node inspect self | jq .[0].ID -r)"
      exit 1
    fi
  done
  if [ "$DR_DOCKER_MAJOR_VERSION" -gt 24 ]; then
    DETACH_FLAG="--detach=true"
  fi
  docker stack deploy $COMPOSE_FILES $DETACH_FLAG $STACK_NAME
else
  docker compose $COMPOSE_FILES -p $STACK_NAME up -d --scale robomaker=$DR_WORKERS
fi

# drgpu's tests: hold the script here a while (an `up` in flight, to be interrupted).
sleep "${DRGPU_TEST_START_SLEEP:-0}"

if [ -n "$OPT_QUIET" ]; then
  exit 0
fi
# DRfC follows the trainer's log here (dr-logs-sagemaker); this fixture does not.
