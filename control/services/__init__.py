"""gRPC servicers of the control plane. They adapt protos to domain calls and back; nothing else."""
