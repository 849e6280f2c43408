#!/usr/bin/env python3
"""Stand-in for DeepRacer-for-cloud's training prepare-config.py: writes the robomaker
configuration where DRfC uploads it (s3://BUCKET/MODEL_PREFIX/PARAMS_FILE), here into the
bucket folder, from the same environment variables; prints the worker configurations."""

import os
from pathlib import Path

env = os.environ
config = {
    "AWS_REGION": env.get("DR_AWS_APP_REGION", "us-east-1"),
    "JOB_TYPE": "TRAINING",
    "METRICS_S3_BUCKET": env.get("DR_LOCAL_S3_BUCKET", "bucket"),
    "METRICS_S3_OBJECT_KEY": f"{env.get('DR_LOCAL_S3_METRICS_PREFIX', '')}/TrainingMetrics.json",
    "MODEL_METADATA_FILE_S3_KEY": env.get("DR_LOCAL_S3_MODEL_METADATA_KEY", ""),
    "REWARD_FILE_S3_KEY": env.get("DR_LOCAL_S3_REWARD_KEY", ""),
    "SAGEMAKER_SHARED_S3_BUCKET": env.get("DR_LOCAL_S3_BUCKET", "bucket"),
    "SAGEMAKER_SHARED_S3_PREFIX": env.get("DR_LOCAL_S3_MODEL_PREFIX", ""),
    "WORLD_NAME": env.get("DR_WORLD_NAME", ""),
    "RACE_TYPE": env.get("DR_RACE_TYPE", ""),
    "DISPLAY_NAME": env.get("DR_DISPLAY_NAME", ""),
    "NUM_WORKERS": env.get("DR_WORKERS", "1"),
}
bucket = Path(env["DR_DIR"]) / "data" / "minio" / env.get("DR_LOCAL_S3_BUCKET", "bucket")
target = bucket / env.get("DR_LOCAL_S3_MODEL_PREFIX", "") / env["DR_CURRENT_PARAMS_FILE"]
target.parent.mkdir(parents=True, exist_ok=True)
target.write_text("".join(f"{key}: {value!r}\n" for key, value in config.items()))
workers = int(env.get("DR_WORKERS", "1"))
print(",".join(target.name for _ in range(workers)))
