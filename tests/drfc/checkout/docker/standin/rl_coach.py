"""rl_coach stand-in: starts the SageMaker trainer as SageMaker local mode does.

Through the Docker socket it creates a container named `<tmpdir>-algo-1-<random>-1`
(compose labels of that temporary project, service `algo-1-<random>`), outside the
stack's compose project, with an NVIDIA device request for every GPU and this
container's CUDA_VISIBLE_DEVICES, RUN_ID and model prefix; then it keeps running.

STANDIN_TRAINER_DELAY=s waits s seconds before creating the trainer, and a SIGTERM in
that time (Compose stopping rl_coach) does not stop it before the trainer is started:
as the real rl_coach, whose SageMaker local mode finishes what it asked of the engine,
a trainer can come after DRfC's stop script looked for one.
"""

import http.client
import json
import os
import random
import signal
import socket
import string
import sys
import time

SOCKET = "/var/run/docker.sock"
FORWARDED = ("CUDA_VISIBLE_DEVICES", "RUN_ID", "MODEL_S3_PREFIX", "MODEL_S3_BUCKET")


class _UnixConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(SOCKET)


def _api(method: str, path: str, body: object = None) -> object:
    connection = _UnixConnection("docker")
    payload = json.dumps(body) if body is not None else None
    connection.request(method, path, payload, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    data = answer.read()
    if answer.status >= 300:
        raise RuntimeError(f"{method} {path}: {answer.status} {data.decode(errors='replace')}")
    return json.loads(data) if data else None


def _random(alphabet: str, size: int) -> str:
    return "".join(random.choice(alphabet) for _ in range(size))


def main() -> int:
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: stopping.append(signum))
    print("rl_coach: CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    for key in ("MODELMETADATA_FILE_S3_KEY", "HYPERPARAMETER_FILE_S3_KEY", "SAGEMAKER_IMAGE"):
        print(f"rl_coach: {key}={os.environ.get(key, '<unset>')}")
    time.sleep(float(os.environ.get("STANDIN_TRAINER_DELAY") or 0))
    project = "tmp" + _random(string.ascii_lowercase + string.digits, 8)
    service = "algo-1-" + _random(string.ascii_lowercase + string.digits, 5)
    created = _api(
        "POST",
        f"/containers/create?name={project}-{service}-1",
        {
            "Image": os.environ["SAGEMAKER_IMAGE"],
            "Cmd": ["sleep", "infinity"],
            "Env": [f"{key}={os.environ[key]}" for key in FORWARDED if key in os.environ],
            "Labels": {
                "com.docker.compose.project": project,
                "com.docker.compose.service": service,
                "com.docker.compose.oneoff": "False",
            },
            "HostConfig": {
                "Init": True,
                "NetworkMode": "none",
                "DeviceRequests": [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}],
            },
        },
    )
    assert isinstance(created, dict)
    _api("POST", f"/containers/{created['Id']}/start")
    print(f"rl_coach: started the SageMaker trainer {project}-{service}-1", flush=True)
    if stopping:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
