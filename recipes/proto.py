"""Recipe declarations <-> catalog protos (the console publishes them; `sf` validates against them)."""

from __future__ import annotations

import json

from starforge_api.catalog.v1 import recipe_pb2

from recipes.catalog import ParameterDecl, RecipeDecl, RuntimeDecl

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


_NAMES = {v: k for k, v in _TYPES.items()}


def decl_from_proto(r: recipe_pb2.Recipe) -> RecipeDecl:
    """What a client needs of a published recipe to check overrides and inputs before packing."""
    return RecipeDecl(
        name=r.name,
        framework=r.framework,
        version=r.version,
        description=r.description,
        adapter=r.adapter,
        entrypoint=r.entrypoint,
        runtimes=[
            RuntimeDecl(x.framework_version, x.runtime_id, x.image, x.python, list(x.capabilities), x.default)
            for x in r.runtimes
        ],
        parameters=[
            ParameterDecl(
                key=p.key,
                type=_NAMES.get(p.type, "string"),
                default=json.loads(p.default_json) if p.default_json else None,
                min=p.min if p.HasField("min") else None,
                max=p.max if p.HasField("max") else None,
                choices=list(p.choices),
                doc=p.doc,
                required=p.required,
            )
            for p in r.parameters
        ],
        metrics=list(r.metrics),
        artifacts=list(r.artifacts),
        requires_model=r.requires_model,
        requires_train_data=r.requires_train_data,
        multi_pool=r.multi_pool,
        pool_names=list(r.pool_names),
        default_profile=r.default_profile,
        default_observability=r.default_observability,
        stages=list(r.stages),
        digest=r.digest,
    )
