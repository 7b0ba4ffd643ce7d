"""DatasetService servicer."""

from __future__ import annotations

from typing import Any

from starforge_api.control.v1 import dataset_service_pb2 as pb
from starforge_api.control.v1 import dataset_service_pb2_grpc as pb_grpc

from control import auth, datasets
from control.context import Context


class DatasetServicer(pb_grpc.DatasetServiceServicer):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def PushDataset(self, request: pb.PushDatasetRequest, context: Any) -> pb.PushDatasetResponse:
        p = auth.current()
        d = await self.ctx.db.run(
            lambda s: datasets.push(
                s, p, self.ctx.store, request.name, request.version, request.manifest, request.description
            )
        )
        return pb.PushDatasetResponse(dataset=d)

    async def ListDatasets(self, request: pb.ListDatasetsRequest, context: Any) -> pb.ListDatasetsResponse:
        return pb.ListDatasetsResponse(
            datasets=await self.ctx.db.run(lambda s: datasets.list_datasets(s, request.owner))
        )

    async def GetDataset(self, request: pb.GetDatasetRequest, context: Any) -> pb.GetDatasetResponse:
        return pb.GetDatasetResponse(dataset=await self.ctx.db.run(lambda s: datasets.get(s, request.ref)))
