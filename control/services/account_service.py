"""AccountService servicer."""

from __future__ import annotations

from typing import Any

from starforge_api.control.v1 import account_service_pb2 as pb
from starforge_api.control.v1 import account_service_pb2_grpc as pb_grpc

from control import accounts, auth
from control.db.engine import Database


class AccountServicer(pb_grpc.AccountServiceServicer):
    def __init__(self, db: Database, verifier: auth.TokenVerifier) -> None:
        self.db = db
        self.verifier = verifier

    async def WhoAmI(self, request: pb.WhoAmIRequest, context: Any) -> pb.WhoAmIResponse:
        p = auth.current()
        user, token = await self.db.run(lambda s: accounts.whoami(s, p))
        return pb.WhoAmIResponse(user=user, token=token)

    async def CreateToken(self, request: pb.CreateTokenRequest, context: Any) -> pb.CreateTokenResponse:
        p = auth.current()
        token, info = await self.db.run(
            lambda s: accounts.create_token(s, p, request.user, request.name, request.ttl_seconds)
        )
        return pb.CreateTokenResponse(token=token, info=info)

    async def ListTokens(self, request: pb.ListTokensRequest, context: Any) -> pb.ListTokensResponse:
        p = auth.current()
        return pb.ListTokensResponse(
            tokens=await self.db.run(lambda s: accounts.list_tokens(s, p, request.include_inactive))
        )

    async def RevokeToken(self, request: pb.RevokeTokenRequest, context: Any) -> pb.RevokeTokenResponse:
        p = auth.current()
        info = await self.db.run(lambda s: accounts.revoke_token(s, p, request.token_id))
        self.verifier.forget()
        return pb.RevokeTokenResponse(info=info)

    async def CreateUser(self, request: pb.CreateUserRequest, context: Any) -> pb.CreateUserResponse:
        p = auth.current()
        user, token = await self.db.run(lambda s: accounts.create_user(s, p, request.name, request.admin))
        return pb.CreateUserResponse(user=user, token=token)

    async def ListUsers(self, request: pb.ListUsersRequest, context: Any) -> pb.ListUsersResponse:
        p = auth.current()
        return pb.ListUsersResponse(users=await self.db.run(lambda s: accounts.list_users(s, p)))
