"""drgpu/core/redaction.py: which settings are secrets, and how they are masked."""

from __future__ import annotations

import pytest

from drgpu.core.model import Plan, Role, ServicePlan
from drgpu.core.redaction import (
    MASK,
    holds_secret,
    is_secret,
    masked,
    masked_data,
    masked_plan,
    redact,
    secret_values,
)


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DR_LOCAL_S3_MODEL_METADATA_KEY", False),  # S3 object keys and prefixes name files
        ("DR_LOCAL_S3_REWARD_KEY", False),
        ("METRICS_S3_OBJECT_KEY", False),
        ("DR_LOCAL_S3_MODEL_PREFIX", False),
        ("DR_LOCAL_S3_ACCESS_KEY", True),
        ("DR_LOCAL_S3_HYPERPARAMETERS_KEY", False),
        ("MODEL_METADATA_FILE_S3_KEY", False),
        ("DR_LOCAL_S3_PRETRAINED_PREFIX", False),
        ("DR_LOCAL_S3_API_KEY", True),  # an API key, an SSE-C encryption key: secrets
        ("DR_UPLOAD_S3_SSE_C_KEY", True),
        ("DR_UPLOAD_S3_ENCRYPTION_KEY", True),
        ("AWS_ACCESS_KEY_ID", True),
        ("github_token", True),
        ("DB_PASSWORD", True),
        ("DB_PASSWD", True),
        ("DR_UPLOAD_S3_CREDENTIALS", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("DR_RUN_ID", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret(name) is secret
    assert masked(name, "value") == (MASK if secret else "value")
    assert masked(name, "") == ""


def test_redaction_masks_long_secret_values_only() -> None:
    values = {"A_KEY": "abc", "B_TOKEN": "tok-123456", "C_SECRET": "tok-123456789", "X": "tok-1"}
    secrets = secret_values(values)
    assert secrets == ("tok-123456789", "tok-123456")
    assert redact("a tok-123456789 b tok-123456 c abc", secrets) == "a **** b **** c abc"


def test_a_url_password_is_a_secret_and_an_s3_key_is_not() -> None:
    values = {
        "DR_REMOTE_MINIO_URL": "http://minio:pa55word@10.0.0.2:9000",
        "DR_SHORT_URL": "http://u:pw@h",
        "DR_LOCAL_S3_REWARD_KEY": "custom_files/reward_function.py",
    }
    secrets = secret_values(values)
    assert secrets == ("pa55word", "u:pw")
    line = "Using configuration files: s3://bucket/custom_files/reward_function.py"
    assert redact(line, secrets) == line


def test_a_plan_shown_masks_secret_environment_values() -> None:
    service = ServicePlan(
        name="sagemaker",
        role=Role.TRAINER,
        devices=(),
        capabilities=(),
        environment=(("API_TOKEN", "t0ken-value"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")),
        labels=(),
    )
    plan = Plan(project="deepracer-0", run_id="0", services=(service,))
    assert holds_secret(plan)
    assert masked_plan(plan).services[0].environment == (
        ("API_TOKEN", MASK),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    )


def test_a_plan_shown_masks_a_secret_passed_on_under_another_name() -> None:
    service = ServicePlan(
        name="sagemaker",
        role=Role.TRAINER,
        devices=(),
        capabilities=(),
        environment=(("PASS_ON", "p\u00e4ssw\u00f6rd98765"), ("URL", "s3://u:t0ken-value@h")),
        labels=(),
    )
    plan = Plan(project="deepracer-0", run_id="0", services=(service,))
    shown = masked_plan(plan, ("p\u00e4ssw\u00f6rd98765", "t0ken-value"))
    assert shown.services[0].environment == (("PASS_ON", MASK), ("URL", f"s3://u:{MASK}@h"))


def test_a_document_is_masked_in_its_data_before_any_encoding() -> None:
    document = {
        "services": {
            "a": {"environment": {"X": "p\u00e4ssw\u00f6rd98765"}, "command": ["-p", "x"]}
        },
        "n": 3,
        "list": ("p\u00e4ssw\u00f6rd98765-tail",),
    }
    assert masked_data(document, ("p\u00e4ssw\u00f6rd98765",)) == {
        "services": {"a": {"environment": {"X": MASK}, "command": ["-p", "x"]}},
        "n": 3,
        "list": [f"{MASK}-tail"],
    }


def test_masked_data_masks_the_longer_of_two_nested_secrets_whatever_their_order() -> None:
    assert masked_data({"v": ["token-abcd-efgh"]}, ("abcd", "token-abcd-efgh")) == {"v": [MASK]}
