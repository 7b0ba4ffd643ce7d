"""CatalogService servicer."""

from __future__ import annotations

from typing import Any

from starforge_api.catalog.v1 import catalog_service_pb2 as pb
from starforge_api.catalog.v1 import catalog_service_pb2_grpc as pb_grpc
from starforge_api.catalog.v1 import recipe_pb2

from common import errors
from control import catalog_api
from recipes.catalog import Catalog


class CatalogServicer(pb_grpc.CatalogServiceServicer):
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    async def ListRecipes(self, request: pb.ListRecipesRequest, context: Any) -> pb.ListRecipesResponse:
        return pb.ListRecipesResponse(
            catalog_version=self.catalog.version,
            catalog_digest=self.catalog.digest,
            recipes=[
                recipe_pb2.RecipeSummary(
                    name=r.name,
                    version=r.version,
                    digest=r.digest,
                    summary=r.description.split(". ")[0].strip(),
                )
                for r in (self.catalog.recipes[n] for n in self.catalog.names())
            ],
        )

    async def GetRecipe(self, request: pb.GetRecipeRequest, context: Any) -> pb.GetRecipeResponse:
        r = catalog_api.find(self.catalog, request.name)
        if request.version and request.version != r.version:
            raise errors.NotFound(f"{r.name} has no version {request.version}; the catalog publishes {r.version}")
        return pb.GetRecipeResponse(recipe=catalog_api.recipe_to_proto(r))

    async def ResolveLock(self, request: pb.ResolveLockRequest, context: Any) -> pb.ResolveLockResponse:
        return pb.ResolveLockResponse(
            lock=catalog_api.lock_for(self.catalog, request.method, request.framework_version)
        )
