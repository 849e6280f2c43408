"""A DeepRacer-for-cloud-shaped checkout and its activated shell, for tests.

Written for drgpu (no DRfC file is copied): `bin/activate.sh` reads system.env and the
run.env exactly as DRfC's `dr-update-env` does (`grep -v '^#'`, a `for` over the words,
`cut -d=`, `eval "export $key=$value"`), then exports `DR_DIR`, `DR_CONFIG`,
`DR_DOCKER_FILE_SEP` and the compose-file lists the way DRfC writes them.
`activated(checkout, run_env)` sources it in bash and returns the exported environment.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

ACTIVATE = r"""
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" >/dev/null 2>&1 && pwd)"
DIR="$(dirname $SCRIPT_DIR)"
export DR_DIR=$DIR

function dr-update-env {
  if [[ -f "$DIR/system.env" ]]; then
    LINES=$(grep -v '^#' $DIR/system.env)
    for l in $LINES; do
      env_var=$(echo $l | cut -f1 -d\=)
      env_val=$(echo $l | cut -f2 -d\=)
      eval "export $env_var=$env_val"
    done
  else
    echo "File system.env does not exist."
    return 1
  fi
  if [[ -f "$DR_CONFIG" ]]; then
    LINES=$(grep -v '^#' $DR_CONFIG)
    for l in $LINES; do
      env_var=$(echo $l | cut -f1 -d\=)
      env_val=$(echo $l | cut -f2 -d\=)
      eval "export $env_var=$env_val"
    done
  else
    echo "File ${DR_CONFIG} does not exist."
    return 1
  fi
  if [[ -z "${DR_RUN_ID}" ]]; then
    export DR_RUN_ID=0
  fi
  if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
    export DR_ROBOMAKER_TRAIN_PORT=$(expr 8080 + $DR_RUN_ID)
    export DR_ROBOMAKER_EVAL_PORT=$(expr 8180 + $DR_RUN_ID)
    export DR_ROBOMAKER_GUI_PORT=$(expr 5900 + $DR_RUN_ID)
  else
    export DR_ROBOMAKER_TRAIN_PORT="8080-8089"
    export DR_ROBOMAKER_EVAL_PORT="8080-8089"
    export DR_ROBOMAKER_GUI_PORT="5901-5920"
  fi
  export AWS_DEFAULT_REGION=${DR_AWS_APP_REGION}
}

if [[ -f "$1" ]]; then
  export DR_CONFIG=$(realpath "$1")
  dr-update-env || return 1
elif [[ -f "$DIR/run.env" ]]; then
  export DR_CONFIG="$DIR/run.env"
  dr-update-env || return 1
else
  echo "No configuration file."
  return 1
fi

if [[ -z "${DR_DOCKER_STYLE}" ]]; then
  export DR_DOCKER_STYLE="swarm"
fi
if [[ "${DR_DOCKER_STYLE,,}" == "swarm" ]]; then
  export DR_DOCKER_FILE_SEP="-c"
else
  export DR_DOCKER_FILE_SEP="-f"
fi
export DR_LOCAL_S3_ENDPOINT_URL="http://localhost:9000"
ENDPOINT="$DR_DOCKER_FILE_SEP $DIR/docker/docker-compose-endpoint.yml"
DR_TRAIN_COMPOSE_FILE="$DR_DOCKER_FILE_SEP $DIR/docker/docker-compose-training.yml $ENDPOINT"
DR_EVAL_COMPOSE_FILE="$DR_DOCKER_FILE_SEP $DIR/docker/docker-compose-eval.yml $ENDPOINT"
export DR_TRAIN_COMPOSE_FILE
export DR_EVAL_COMPOSE_FILE
"""

SYSTEM_ENV = """\
DR_CLOUD=local
DR_AWS_APP_REGION=us-east-1
DR_LOCAL_S3_BUCKET=bucket
DR_SIMAPP_SOURCE=awsdeepracercommunity/deepracer-simapp
DR_SIMAPP_VERSION=5.3.3-gpu
DR_WORKERS=1
DR_DOCKER_STYLE=compose
DR_HOST_X=False
# DR_ROBOMAKER_CUDA_DEVICES=0
DR_SAGEMAKER_CUDA_DEVICES=1
DR_ROBOMAKER_CUDA_DEVICES=0
"""

RUN_ENV = """\
DR_RUN_ID=0
DR_CAR_NAME=FastCar
DR_DISPLAY_NAME=$DR_CAR_NAME
DR_LOCAL_S3_MODEL_PREFIX=rl-deepracer-sagemaker
DR_LOCAL_S3_CUSTOM_FILES_PREFIX=custom_files
DR_LOCAL_S3_MODEL_METADATA_KEY=$DR_LOCAL_S3_CUSTOM_FILES_PREFIX/model_metadata.json
DR_LOCAL_S3_REWARD_KEY=${DR_LOCAL_S3_CUSTOM_FILES_PREFIX}/reward_function.py
DR_UPLOAD_S3_PREFIX=$DR_LOCAL_S3_MODEL_PREFIX-1
#DR_EVAL_RTF=1.0
"""

TRAINING = """\
services:
  rl_coach:
    image: ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}
    environment:
      - RUN_ID=${DR_RUN_ID}
      - SAGEMAKER_IMAGE=${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}
      - MODELMETADATA_FILE_S3_KEY=${DR_LOCAL_S3_MODEL_METADATA_KEY}
      - CUDA_VISIBLE_DEVICES=${DR_SAGEMAKER_CUDA_DEVICES:-}
    volumes:
      - "/var/run/docker.sock:/var/run/docker.sock"
  robomaker:
    image: ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}
    command: ["${ROBOMAKER_COMMAND:-}"]
    environment:
      - CUDA_VISIBLE_DEVICES=${DR_ROBOMAKER_CUDA_DEVICES:-}
"""

EVALUATION = """\
services:
  rl_coach:
    image: ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}
    command: ["/bin/bash", "-c", "echo No work for coach in Evaluation Mode"]
  robomaker:
    image: ${DR_SIMAPP_SOURCE}:${DR_SIMAPP_VERSION}
    command: ["${ROBOMAKER_COMMAND:-}"]
    environment:
      - CUDA_VISIBLE_DEVICES=${DR_ROBOMAKER_CUDA_DEVICES:-}
"""

ENDPOINT = """\
services:
  rl_coach:
    environment:
      - S3_ENDPOINT_URL=${DR_MINIO_URL:-http://minio:9000}
  robomaker:
    environment:
      - S3_ENDPOINT_URL=${DR_MINIO_URL:-http://minio:9000}
"""


def make_checkout(root: Path, *, system_env: str = SYSTEM_ENV, run_env: str = RUN_ENV) -> Path:
    """A DRfC-shaped checkout at `root`: settings, compose files and bin/activate.sh."""
    (root / "bin").mkdir(parents=True)
    (root / "docker").mkdir()
    (root / "bin" / "activate.sh").write_text(ACTIVATE, encoding="utf-8")
    (root / "system.env").write_text(system_env, encoding="utf-8")
    (root / "run.env").write_text(run_env, encoding="utf-8")
    for name, text in (
        ("docker-compose-training.yml", TRAINING),
        ("docker-compose-eval.yml", EVALUATION),
        ("docker-compose-endpoint.yml", ENDPOINT),
    ):
        (root / "docker" / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def activated(root: Path, *args: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment `source bin/activate.sh ARGS` exports, run by bash in `root`."""
    environment = base if base is not None else {"PATH": os.environ["PATH"], "HOME": str(root)}
    done = subprocess.run(
        ["bash", "-c", 'source bin/activate.sh "$@" >&2 && env -0', "activate", *args],
        cwd=root,
        env=environment,
        capture_output=True,
        check=True,
    )
    pairs = (item.partition("=") for item in done.stdout.decode().split("\0") if item)
    return {key: value for key, _, value in pairs if key not in ("_", "SHLVL", "PWD", "OLDPWD")}
