"""Recipe declarations -> catalog protos."""

from __future__ import annotations

from starforge_api.control.v1 import error_reason_pb2
from starforge_api.job.v1 import job_spec_pb2

from common import errors
from recipes.catalog import Catalog, RecipeDecl
from recipes.proto import recipe_to_proto

__all__ = ["find", "lock_for", "recipe_to_proto"]


def find(catalog: Catalog, name: str) -> RecipeDecl:
    r = catalog.get(name)
    if r is None:
        raise errors.NotFound(
            f"method {name!r} is not in the catalog; published: {', '.join(catalog.names())}",
            reason=error_reason_pb2.ERROR_REASON_UNKNOWN_METHOD,
        )
    return r


def lock_for(catalog: Catalog, method: str, framework_version: str) -> job_spec_pb2.RecipeLock:
    r = find(catalog, method)
    rt = r.runtime(framework_version)
    if rt is None:
        known = ", ".join(x.framework_version for x in r.runtimes)
        raise errors.InvalidArgument(
            f"{method} has no framework version {framework_version!r}; known versions: {known}",
            field_violations=(errors.FieldViolation("framework_version", f"known versions: {known}"),),
        )
    return job_spec_pb2.RecipeLock(
        method=r.name,
        version=r.version,
        digest=r.digest,
        framework_version=rt.framework_version,
        runtime_id=rt.runtime_id,
    )
