"""Recipe declarations -> catalog protos."""

from __future__ import annotations

import json

from starforge.catalog.v1 import recipe_pb2
from starforge.control.v1 import error_reason_pb2
from starforge.job.v1 import job_spec_pb2

from common import errors
from recipes.catalog import Catalog, RecipeDecl

_TYPES = {
    "int": recipe_pb2.PARAMETER_TYPE_INT,
    "float": recipe_pb2.PARAMETER_TYPE_FLOAT,
    "string": recipe_pb2.PARAMETER_TYPE_STRING,
    "bool": recipe_pb2.PARAMETER_TYPE_BOOL,
    "string_list": recipe_pb2.PARAMETER_TYPE_STRING_LIST,
}


def recipe_to_proto(r: RecipeDecl) -> recipe_pb2.Recipe:
    msg = recipe_pb2.Recipe(
        name=r.name,
        framework=r.framework,
        version=r.version,
        digest=r.digest,
        description=r.description,
        adapter=r.adapter,
        entrypoint=r.entrypoint,
        metrics=r.metrics,
        artifacts=r.artifacts,
        requires_model=r.requires_model,
        requires_train_data=r.requires_train_data,
        multi_pool=r.multi_pool,
        pool_names=r.pool_names,
        default_profile=r.default_profile,
        stages=r.stages,
        default_observability=r.default_observability,
    )
    for p in r.parameters:
        param = msg.parameters.add(
            key=p.key,
            type=_TYPES[p.type],
            default_json=json.dumps(p.default) if p.default is not None else "",
            choices=[str(c) for c in p.choices],
            doc=p.doc,
            required=p.required,
        )
        if p.min is not None:
            param.min = p.min
        if p.max is not None:
            param.max = p.max
    for rt in r.runtimes:
        msg.runtimes.add(
            framework_version=rt.framework_version,
            runtime_id=rt.runtime_id,
            image=rt.image,
            python=rt.python,
            capabilities=rt.capabilities,
            default=rt.default,
        )
    return msg


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
        valid = ", ".join(x.framework_version for x in r.runtimes)
        raise errors.InvalidArgument(
            f"{method} has no framework version {framework_version!r}; valid: {valid}",
            field_violations=(errors.FieldViolation("framework_version", f"valid: {valid}"),),
        )
    return job_spec_pb2.RecipeLock(
        method=r.name,
        version=r.version,
        digest=r.digest,
        framework_version=rt.framework_version,
        runtime_id=rt.runtime_id,
    )
