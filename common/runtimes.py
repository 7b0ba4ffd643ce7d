"""Runtime names, as an executor's `Describe` reports them and the control plane matches images
against them. Shared by the executor kinds (which report them) and the control plane (which reads
them), so that neither layer imports the other's package."""

from __future__ import annotations

RUNTIME_PROCESS = "process"  # bootstrap.sh as a process on the host (local, agent)
RUNTIME_DOCKER = "docker"  # one container per attempt (local, agent)
RUNTIME_RAY = "ray"  # a RayJob on Kubernetes (kuberay)
RUNTIME_HOST = "host"  # slurm, container_runtime none: on the nodes, bare
RUNTIME_ENROOT = "enroot"  # slurm with pyxis
RUNTIME_APPTAINER = "apptainer"  # slurm with apptainer

# The runtimes that run jobs without a container: where the image "host" can run.
HOST_RUNTIMES = (RUNTIME_PROCESS, RUNTIME_HOST)
