"""SecretService servicer (adapter only; control.secrets does the work)."""

from __future__ import annotations

from typing import Any

from starforge_api.control.v1 import secret_service_pb2 as pb
from starforge_api.control.v1 import secret_service_pb2_grpc as pb_grpc

from control import auth, secrets
from control.context import Context


class SecretServicer(pb_grpc.SecretServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def SetSecret(self, request: pb.SetSecretRequest, context: Any) -> pb.SetSecretResponse:
        p, keyring = auth.current(), self.ctx.keyring
        secret, created = await self.ctx.db.run(
            lambda s: secrets.set_secret(s, p, keyring, request.name, request.value, request.project)
        )
        return pb.SetSecretResponse(secret=secret, created=created)

    async def ListSecrets(self, request: pb.ListSecretsRequest, context: Any) -> pb.ListSecretsResponse:
        p, keyring = auth.current(), self.ctx.keyring
        rows = await self.ctx.db.run(lambda s: secrets.list_secrets(s, p, keyring, request.project))
        return pb.ListSecretsResponse(secrets=rows)

    async def DeleteSecret(self, request: pb.DeleteSecretRequest, context: Any) -> pb.DeleteSecretResponse:
        p, keyring = auth.current(), self.ctx.keyring
        secret = await self.ctx.db.run(lambda s: secrets.delete_secret(s, p, keyring, request.name, request.project))
        return pb.DeleteSecretResponse(secret=secret)
